"""`make train-demo`'s path, small: speculators 0.9.0's own prepare-data and training loop read what
this package writes (ids export, draft vocabulary, hidden states) and train a few steps on the CPU.

Needs speculators' virtual environment (`make speculators-venv`; .ci/run creates it). Without it
the test skips, naming why, except where EAGLE3_SYNTH_REQUIRE_SPECULATORS=1 (CI): there a missing
environment fails, so CI cannot silently stop checking what the trainer reads
(tests/support/trainer_venvs.py).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import TINY_MODEL
from ..support.trainer_venvs import SPECULATORS, trainer_python

ROOT = Path(__file__).resolve().parents[2]
STEPS = 3


@pytest.fixture(scope="module")
def speculators_python() -> Path:
    return trainer_python(SPECULATORS)


@pytest.mark.slow
def test_speculators_trains_an_eagle3_drafter_on_our_data(speculators_python, tmp_path):
    out = tmp_path / "demo"
    argv = [sys.executable, str(ROOT / "scripts" / "train_demo.py"), "--out", str(out),
            "--configs", "B1_glaive", "B2_hermes_fc",  # tool calls, and multi-turn rows
            "--samples-per-prompt", "3", "--max-new-tokens", "32", "--draft-vocab-size", "128",
            "--epochs", "1", "--max-steps", str(STEPS), "--total-seq-len", "512",
            "--speculators-python", str(speculators_python)]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "epoch 1: validation full_acc " in done.stdout

    # prepare-data took every exported row, and each prepared row got its hidden-states file.
    from datasets import load_from_disk

    exported = sum(len((out / "train" / f"{c}.jsonl").read_text().splitlines()) for c in ("B1_glaive", "B2_hermes_fc"))
    prepared = load_from_disk(str(out / "prepared"))
    assert len(prepared) == exported > STEPS
    assert sorted(p.name for p in (out / "prepared" / "hidden_states").glob("hs_*.safetensors")) == \
        sorted(f"hs_{i}.safetensors" for i in range(len(prepared)))

    # The trainer's own metrics: STEPS optimizer steps with no batch lost to a missing or unreadable
    # file (--on-missing raise would have stopped it), then one validation pass.
    records = [json.loads(line) for line in (out / "logs" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if isinstance(r.get("train"), dict)]
    assert [r["global_step"] for r in steps] == list(range(STEPS))
    assert all(r["train"]["error_records"] == 0 and math.isfinite(r["train"]["loss"]) for r in steps)
    (val,) = [r["val"] for r in records if isinstance(r.get("val"), dict)]
    assert 0.0 <= val["full_acc_0_epoch"] <= 1.0 and math.isfinite(val["loss_epoch"])
    # The drafter it saved uses our draft vocabulary and the tiny model's layers.
    config = json.loads(next((out / "drafter").glob("*/config.json")).read_text())
    assert config["draft_vocab_size"] == 128
    assert config["eagle_aux_hidden_state_layer_ids"] == [0, 1, 2]
    assert TINY_MODEL.name in json.dumps(config)
