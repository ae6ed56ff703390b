"""`make specforge-train-demo`'s path, small: SpecForge 0.2.0's own offline training loop trains an
EAGLE-3 drafter on the CPU from what this package writes (draft vocabulary, `.ckpt` hidden states of
the train split, and of the validation split for SpecForge's evaluation), on the 4-layer tiny target;
then SpecForge's own SGLang export is served by the real SGLang 0.5.23's EAGLE-3 on the held-out rows.

Needs SpecForge's and SGLang's virtual environments (`make specforge-venv sglang-venv`; .ci/run creates
them). Without one the test skips, naming why, except where EAGLE3_SYNTH_REQUIRE_SPECFORGE=1 and
EAGLE3_SYNTH_REQUIRE_SGLANG=1 (CI): there a missing environment fails (tests/support/trainer_venvs.py).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from ..support.modules import root_on_path
from ..support.trainer_venvs import SGLANG, SPECFORGE, trainer_python

EPOCHS = 2


@pytest.fixture(scope="module")
def specforge_python() -> Path:
    return trainer_python(SPECFORGE)


@pytest.mark.slow
def test_specforge_trains_an_eagle3_drafter_on_our_hidden_states(specforge_python, tmp_path):
    out = tmp_path / "demo"
    argv = [sys.executable, "-m", "examples.specforge_demo", "--out", str(out),
            "--configs", "B2_hermes_fc", "--samples-per-prompt", "2", "--max-new-tokens", "24",
            "--validation", "0.4", "--draft-vocab-size", "128", "--epochs", str(EPOCHS), "--ttt-length", "2",
            "--specforge-python", str(specforge_python), "--sglang-python", str(trainer_python(SGLANG))]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env=root_on_path(), check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]

    train_rows = len(list((out / "hs-train").glob("*.ckpt")))
    validation_rows = len(list((out / "hs-validation").glob("*.ckpt")))
    assert train_rows > 0 and validation_rows > 0
    # SpecForge's own logged metrics: one record per optimizer step, every training row once per
    # epoch (batch size 1), and one evaluation on the validation folder at the end of each epoch.
    records = [json.loads(line) for line in (out / "logs" / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if "loss" in r]
    evals = [r for r in records if "eval/avg_loss" in r]
    assert [r["step"] for r in train] == list(range(1, EPOCHS * train_rows + 1))
    assert [r["step"] for r in evals] == [train_rows * e for e in range(1, EPOCHS + 1)]
    for r in train:
        assert all(math.isfinite(r[k]) for k in ("loss", "acc", "acceptance_rate", "grad_norm")), r
        assert 0.0 <= r["acc"] <= 1.0 and 0.0 <= r["acceptance_rate"] <= 1.0 and r["loss"] > 0
        assert sorted(k for k in r if k.startswith("acc_")) == ["acc_0", "acc_1"]  # --ttt-length 2
    for r in evals:
        assert math.isfinite(r["eval/avg_loss"]) and 0.0 <= r["eval/avg_acc"] <= 1.0
        assert len(r["eval/per_position_acc"]) == 2
    for epoch in range(1, EPOCHS + 1):
        assert f"  epoch {epoch} (steps " in done.stdout
    # The draft SpecForge built: its own derivation from the tiny target, with our draft vocabulary.
    draft = json.loads((out / "run" / "draft.json").read_text())
    assert (draft["draft_vocab_size"], draft["vocab_size"], draft["hidden_size"]) == (128, 2048, 128)
    assert draft["architectures"] == ["LlamaForCausalLMEagle3"]
    assert (out / "run" / "out" / "specforge-run-best").exists()
    # It names the layers it was trained on, in SpecForge's and SGLang's numbering (vLLM's 1 2 3).
    assert draft["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 1, 2]

    # Served: SpecForge's own SGLang export, served by SGLang's EAGLE-3 on the held-out rows, 2 draft
    # steps (the trained ttt_length), greedy, every output checked against SGLang's without speculation.
    # On this 4-layer target in bf16 a held-out prompt can meet two logits that bf16 rounds equal
    # (measured: 7.1875 and 7.1875, 7.1938 and 7.1805 in float32), where verification and plain decoding
    # may pick different ids; such a row is counted and named with the position it first differs at.
    report = json.loads((out / "logs" / "evaluate.json").read_text())
    assert report["split"] == "validation" and report["overall"]["rows"] == validation_rows
    assert report["settings"]["speculative_num_steps"] == 2, report["settings"]
    assert report["overall"]["acceptance_length"] >= 1.0, report["overall"]
    baseline = report["greedy"]["baseline"]
    assert baseline["checked"] == validation_rows, baseline
    assert len(baseline["unequal_rows"]) == baseline["unequal"], baseline
    assert all("(output token " in row for row in baseline["unequal_rows"]), baseline
    assert "Served by SGLang's EAGLE-3 on the held-out rows" in done.stdout
