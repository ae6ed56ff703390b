"""`make train-demo`'s path, small: speculators 0.9.0's own prepare-data and training loop read what
this package writes (ids export, draft vocabulary, hidden states) and train two short epochs on the
CPU; then the real SGLang 0.5.23 serves the drafter with its EAGLE-3 speculative decoding on the
held-out rows (`eagle3-synth evaluate`).

Needs speculators' and SGLang's virtual environments (`make speculators-venv sglang-venv`; .ci/run
creates them). Without one the test skips, naming why, except where EAGLE3_SYNTH_REQUIRE_SPECULATORS=1
and EAGLE3_SYNTH_REQUIRE_SGLANG=1 (CI): there a missing environment fails, so CI cannot silently
stop checking what the trainer reads and what SGLang serves (tests/support/trainer_venvs.py).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import TINY_MODEL
from ..support.modules import root_on_path
from ..support.trainer_venvs import SGLANG, SPECULATORS, trainer_python

EPOCHS = 2


@pytest.fixture(scope="module")
def speculators_python() -> Path:
    return trainer_python(SPECULATORS)


@pytest.mark.slow
def test_speculators_trains_an_eagle3_drafter_on_our_data_and_sglang_serves_it(speculators_python, tmp_path):
    out = tmp_path / "demo"
    argv = [sys.executable, "-m", "examples.train_demo", "--out", str(out),
            "--configs", "B1_glaive", "B2_hermes_fc",  # tool calls, and multi-turn rows
            "--samples-per-prompt", "6", "--max-new-tokens", "32", "--draft-vocab-size", "128",
            "--epochs", str(EPOCHS), "--total-seq-len", "512",
            "--speculators-python", str(speculators_python), "--sglang-python", str(trainer_python(SGLANG))]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env=root_on_path(), check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert f"epoch {EPOCHS}: validation full_acc " in done.stdout

    # prepare-data took every exported row, and each prepared row got its hidden-states file.
    from datasets import load_from_disk

    exported = sum(len((out / "train" / f"{c}.jsonl").read_text().splitlines()) for c in ("B1_glaive", "B2_hermes_fc"))
    prepared = load_from_disk(str(out / "prepared"))
    assert len(prepared) == exported > 0
    assert sorted(p.name for p in (out / "prepared" / "hidden_states").glob("hs_*.safetensors")) == \
        sorted(f"hs_{i}.safetensors" for i in range(len(prepared)))

    # The trainer's own metrics: optimizer steps with no batch lost to a missing or unreadable
    # file (--on-missing raise would have stopped it), and a validation pass after each epoch.
    records = [json.loads(line) for line in (out / "logs" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if isinstance(r.get("train"), dict)]
    assert steps and [r["global_step"] for r in steps] == list(range(len(steps)))
    assert all(r["train"]["error_records"] == 0 and math.isfinite(r["train"]["loss"]) for r in steps)
    vals = [r["val"] for r in records if isinstance(r.get("val"), dict)]
    assert len(vals) == EPOCHS
    assert all(0.0 <= val["full_acc_0_epoch"] <= 1.0 and math.isfinite(val["loss_epoch"]) for val in vals)
    # The drafter it saved uses our draft vocabulary and the tiny model's layers.
    config = json.loads(next((out / "drafter").glob("*/config.json")).read_text())
    assert config["draft_vocab_size"] == 128
    assert config["eagle_aux_hidden_state_layer_ids"] == [0, 1]  # the two SGLang can capture from 2 layers
    assert config["norm_before_residual"] is False  # the drafter layer SGLang serves
    assert TINY_MODEL.name in json.dumps(config)

    # Served: SGLang's EAGLE-3 accepted some of the trained drafter's tokens on the held-out rows, and
    # (greedy, verification lossless) every output is the target's own without speculation.
    report = json.loads((out / "logs" / "evaluate.json").read_text())
    assert report["layout"] == "speculators" and report["split"] == "validation"
    assert report["overall"]["rows"] > 0 and report["overall"]["acceptance_length"] > 1.0, report["overall"]
    baseline = report["greedy"]["baseline"]
    assert baseline["checked"] == report["overall"]["rows"] and baseline["unequal"] == 0, baseline
    assert "Served by SGLang's EAGLE-3 on the held-out rows" in done.stdout


@pytest.mark.slow
def test_speculators_trains_on_states_sglang_captured(speculators_python, tmp_path):
    """The same path with the states captured by the real SGLang (`hidden-states --engine sglang`):
    layers 1 2 (the aux layer SGLang captures and the final pre-norm state), nothing held out or served
    (SGLang's EAGLE-3 cannot hand a drafter the last layer's output)."""
    out = tmp_path / "demo"
    argv = [sys.executable, "-m", "examples.train_demo", "--out", str(out), "--configs", "B1_glaive",
            "--samples-per-prompt", "4", "--max-new-tokens", "24", "--draft-vocab-size", "128", "--epochs", "1",
            "--total-seq-len", "512", "--validation", "0", "--layers", "1", "2", "--hidden-states-engine", "sglang",
            "--speculators-python", str(speculators_python), "--sglang-python", str(trainer_python(SGLANG))]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env=root_on_path(), check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "--engine sglang" in done.stdout and "epoch 1: validation full_acc " in done.stdout
    records = [json.loads(line) for line in (out / "logs" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if isinstance(r.get("train"), dict)]
    assert steps and all(r["train"]["error_records"] == 0 and math.isfinite(r["train"]["loss"]) for r in steps)
    config = json.loads(next((out / "drafter").glob("*/config.json")).read_text())
    assert config["eagle_aux_hidden_state_layer_ids"] == [1, 2]
