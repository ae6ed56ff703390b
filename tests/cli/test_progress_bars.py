"""Third-party progress bars stay out of logs: a build whose stderr is not a terminal shows none."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ..conftest import TINY_MODEL


@pytest.mark.slow
def test_a_build_logged_to_a_file_has_no_third_party_progress_bars(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_DISABLE_PROGRESS_BARS",
                                                             "HF_DATASETS_DISABLE_PROGRESS_BARS")}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_HOME=str(tmp_path / "hf"))
    result = subprocess.run(
        [sys.executable, "-m", "eagle3_synth.cli", "build", "B1_glaive", "--model", str(TINY_MODEL), "--limit", "2",
         "--max-new-tokens", "4", "--temperature", "0", "--out", str(tmp_path / "ds")],
        capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "B1_glaive: wrote 2 rows" in result.stdout
    # transformers' "Loading weights" and datasets' "Generating train split" bars, shown on a terminal.
    assert "Loading weights" not in result.stderr and "Generating train split" not in result.stderr
    assert "it/s]" not in result.stderr and "examples/s]" not in result.stderr
    assert "B1_glaive: 2 prompts kept" in result.stderr  # our own progress lines stay
