"""Rows of two engines held equal, and where they are not, why: both ids and the logit margin.

At temperature 0 an engine's row is a function of the model's logits, so two engines computing the
same model in the same dtype give the same rows, except where the top two logits are within the
engines' rounding of each other: in bf16 the logits are multiples of 2**(e-7) (1/16 at a logit of
10), so two candidates tie exactly now and then, and which one an engine takes depends on the last
bit of its arithmetic (a cached decode step and a full forward already differ there). Such a
divergence is a tie, not a bug: it is reported (a warning naming the row, the position, both ids
and the margin), and the rest of that row and its conversation's later turns are not compared. Any
other divergence fails, naming the same, so a reader can tell a near-tie from a bug.
"""

from __future__ import annotations

import warnings
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest



@lru_cache(maxsize=2)
def _model(path: str, dtype: str) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype)).eval()


def logit_margin(model_path: Path, dtype: str, context: list[int], expected: int, got: int
                 ) -> tuple[float, float, float, int]:
    """(logit[expected] - logit[got], the logits' resolution at the larger of the two, how far the
    larger is below the top logit, transformers' own argmax) after `context`, in `dtype`."""
    import torch

    with torch.no_grad():
        logits = _model(str(model_path), dtype)(torch.tensor([context])).logits[0, -1]
    top = logits[[expected, got]].float().abs().max()
    mantissa = torch.finfo(logits.dtype).eps  # 2**-7 in bf16: the spacing of values in [1, 2)
    resolution = float(mantissa * 2.0 ** torch.floor(torch.log2(top.clamp(min=1e-30))))
    logits = logits.float()
    below_top = float(logits.max() - torch.maximum(logits[expected], logits[got]))
    return float(logits[expected] - logits[got]), resolution, below_top, int(logits.argmax())


def first_difference(got: list[int], want: list[int]) -> int:
    return next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))


def assert_same_rows(got: list[dict], expected: list[dict], model_path: Path, dtype: str = "bfloat16") -> None:
    """Every row equal, column by column, except after a tie (the module's doc), which is reported."""
    assert expected, "no reference rows"
    by_key = {(r["sample_id"], r.get("turn")): r for r in expected}
    assert sorted(by_key) == sorted((r["sample_id"], r.get("turn")) for r in got), "other rows"
    problems, ties, tied_rollouts = [], [], set()
    for row in sorted(got, key=lambda r: (r["sample_id"], r.get("turn") or 0)):
        want = by_key[(row["sample_id"], row.get("turn"))]
        rollout = (row.get("conversation_id"), row.get("sample_index"))
        where = f"sample_id {row['sample_id']} (turn {row.get('turn')})"
        if rollout in tied_rollouts:
            continue  # an earlier turn took the other side of a tie: this prompt carries it
        if row["prompt_ids"] != want["prompt_ids"]:
            problems.append(f"{where}: prompt ids differ")
            continue
        if row["output_ids"] != want["output_ids"]:
            out, ref = row["output_ids"], want["output_ids"]
            at = first_difference(out, ref)
            if at >= min(len(out), len(ref)):
                problems.append(f"{where}: one output is a prefix of the other ({len(ref)} expected ids, {len(out)} got)")
                continue
            margin, resolution, below_top, argmax = logit_margin(model_path, dtype, list(row["prompt_ids"]) + list(out[:at]),
                                                      ref[at], out[at])
            line = (f"{where}: output position {at}: expected id {ref[at]}, got {out[at]}; transformers' logit "
                    f"margin logit[{ref[at]}] - logit[{out[at]}] = {margin:.5f} ({dtype} resolution there "
                    f"{resolution:.5f}; its argmax {argmax}, {below_top:.5f} above the two)")
            if abs(margin) <= resolution and below_top <= resolution:
                ties.append(line)
                tied_rollouts.add(rollout)
            else:
                problems.append(line)
            continue
        differing = sorted(name for name in want if row.get(name) != want[name])
        if differing:
            problems.append(f"{where}: same ids, other {differing}")
    if ties:
        warnings.warn(f"{len(ties)} of {len(got)} rows part at a {dtype} tie (compared up to it):\n  " + "\n  ".join(ties))
    if problems:
        pytest.fail(f"{len(problems)} of {len(got)} rows differ:\n  " + "\n  ".join(problems))
    assert len(ties) * 2 <= len(got), f"most rows part at a tie: {ties}"
