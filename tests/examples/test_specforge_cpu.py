"""examples/specforge_cpu.py's plain-torch EAGLE-3 loss equals SpecForge 0.2.0's own reference formula.

SpecForge's training calls a triton kernel for the EAGLE-3 KL term (`core/loss.py: LogSoftmaxLoss`);
on a CPU examples/specforge_cpu.py stands in for it. Here both that stand-in and the "Reference
implementation" `_compute_loss` of the installed SpecForge (`core/loss.py`, run from its own
source) get the same random inputs, in SpecForge's venv (tests/support/trainer_readers/
read_specforge_loss.py); values and gradients must agree. Skips without the venv, except where
EAGLE3_SYNTH_REQUIRE_SPECFORGE=1 (CI).
"""

from __future__ import annotations

import math

import pytest

from ..support.trainer_venvs import SPECFORGE, read_with, trainer_python


@pytest.mark.parametrize("seed", [0, 1])
def test_the_cpu_loss_is_specforges_reference_loss(seed):
    cases = read_with(trainer_python(SPECFORGE), "specforge_loss", str(seed))
    assert [c["dtype"] for c in cases] == ["torch.float32", "torch.bfloat16"]
    for case in cases:
        assert case["masked_rows"] > 0 and math.isfinite(case["reference"]) and case["reference"] > 0
        assert case["ours"] == pytest.approx(case["reference"], rel=1e-6), case
        assert case["grad_max_abs"] > 0  # a gradient to compare, not zeros
        assert case["grad_max_abs_diff"] <= 1e-6 * case["grad_max_abs"], case
