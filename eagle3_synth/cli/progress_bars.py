"""Third-party progress bars (transformers' "Loading weights", datasets' "Generating train split",
huggingface_hub's downloads) only on a terminal.

In a batch log (Slurm, `nohup`, CI) a tqdm bar is carriage returns on one ever-growing line; our
own progress lines (`run/progress.py`) already say where a run stands. Each library is switched
off both ways it reads the setting: its environment variable, read when it is imported
(huggingface_hub `HF_HUB_DISABLE_PROGRESS_BARS`, which transformers' `utils/logging.py` reads at
import too; datasets `HF_DATASETS_DISABLE_PROGRESS_BARS`, `datasets/config.py`), and its switch
function when it is already imported (a script that imported datasets before calling `main`).
A user's own setting of either variable wins.
"""

from __future__ import annotations

import os
import sys
from typing import TextIO

_VARIABLES = ("HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS")


def third_party_bars_off_unless_terminal(stream: TextIO | None = None) -> bool:
    """Turn the libraries' bars off when `stream` (stderr by default) is not a terminal; True if off."""
    stream = sys.stderr if stream is None else stream
    if stream.isatty() or any(name in os.environ for name in _VARIABLES):
        return False
    for name in _VARIABLES:
        os.environ[name] = "1"
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    if "transformers" in sys.modules:
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
    if "datasets" in sys.modules:
        from datasets.utils import disable_progress_bars as disable_datasets_bars

        disable_datasets_bars()
    return True
