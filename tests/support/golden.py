"""Golden files: expected outputs kept as pretty-printed JSON under tests/golden/, so a change reads as a diff.

`check_golden("adapters/B1_glaive", data)` compares `data` with tests/golden/adapters/B1_glaive.json.
After a deliberate change, regenerate with `EAGLE3_SYNTH_UPDATE_GOLDEN=1 python -m pytest ...` and
read the diff before committing it. A missing golden file fails (it is never written silently).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
UPDATE_ENV = "EAGLE3_SYNTH_UPDATE_GOLDEN"


def dumps(data: Any) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def check_golden(name: str, data: Any) -> None:
    path = GOLDEN / f"{name}.json"
    text = dumps(data)
    if os.environ.get(UPDATE_ENV):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    assert path.is_file(), f"no golden file {path}; create it with {UPDATE_ENV}=1 and read it before committing"
    expected = path.read_text(encoding="utf-8")
    assert text == expected, (f"{path} differs from what the code gives now (run with {UPDATE_ENV}=1 and "
                              f"`git diff {path}` to see how)")
