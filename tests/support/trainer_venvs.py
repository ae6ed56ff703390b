"""The third-party tools' own virtual environments, for tests that run the real trainers' and the
real SGLang's code on our files.

speculators 0.9.0, SpecForge 0.2.0 and SGLang 0.5.23 pin other torch/transformers/datasets versions
than this package, so each lives in a venv of its own (`make speculators-venv`, `make
specforge-venv`, `make sglang-venv`) and tests reach it through a subprocess. Without the venv a test skips, naming why, except where the
trainer's `EAGLE3_SYNTH_REQUIRE_<NAME>=1` is set (CI): there a missing venv fails, so CI cannot
silently stop checking what the trainer reads. `EAGLE3_SYNTH_<NAME>_PYTHON` points at another
interpreter with the trainer installed.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
READERS = Path(__file__).resolve().parent / "trainer_readers"


@dataclass(frozen=True)
class Trainer:
    name: str  # as in the environment variables: SPECULATORS, SPECFORGE
    owner: str  # in messages: "speculators'"
    venv: Path
    make_target: str


SPECULATORS = Trainer("SPECULATORS", "speculators'", ROOT / ".venv-speculators", "speculators-venv")
SPECFORGE = Trainer("SPECFORGE", "SpecForge's", ROOT / ".venv-specforge", "specforge-venv")
SGLANG = Trainer("SGLANG", "SGLang's", ROOT / ".venv-sglang", "sglang-venv")


def trainer_python(trainer: Trainer) -> Path:
    """The trainer venv's interpreter, or skip (fail under EAGLE3_SYNTH_REQUIRE_<NAME>=1) naming why."""
    given = os.environ.get(f"EAGLE3_SYNTH_{trainer.name}_PYTHON")
    python = Path(given) if given else trainer.venv / "bin" / "python"
    # The make target touches `installed` only once the install and its torch check passed.
    if python.is_file() and (given or (trainer.venv / "installed").is_file()):
        return python
    why = f"{trainer.owner} environment ({python}) is not there: `make {trainer.make_target}` creates it"
    if not given and trainer.venv.is_dir():
        why = (f"{trainer.owner} environment {trainer.venv} is incomplete (an install that failed or was "
               f"stopped; see {trainer.venv / 'install.log'}): `make {trainer.make_target}` makes it again")
    require = f"EAGLE3_SYNTH_REQUIRE_{trainer.name}"
    if os.environ.get(require) == "1":
        pytest.fail(f"{why}; {require}=1 forbids skipping")
    pytest.skip(why)


def read_with(python: Path, reader: str, *args: str) -> list[dict]:
    """Run tests/support/trainer_readers/read_<reader>.py in the trainer's venv; it prints one JSON line
    (the last of its stdout) describing what the trainer's own reader returned."""
    done = subprocess.run([str(python), str(READERS / f"read_{reader}.py"), *args], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return json.loads(done.stdout.splitlines()[-1])
