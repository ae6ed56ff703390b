"""What a drafter is worth served: acceptance figures from SGLang's per-request counts.

Per request SGLang reports its verify steps, the drafts accepted over them and a histogram of drafts
accepted per step (`engines.base.SpeculativeCounts`). From them, over any set of requests:
- acceptance length: tokens each verify step yields, the target's own token plus the accepted drafts,
  1 + accepted / steps (the trainers' tau = 1 + sum of full_acc_k measures the same thing offline);
- tokens per verify step: completion tokens / steps, SGLang's own `spec_accept_length` (it also
  counts the token the prefill made, so it is a little above the acceptance length on short outputs);
- per position: the share of steps that accepted at least k drafts, k = 1, 2, ... (from the
  histogram: the served counterpart of a trainer's per-position accuracy);
- acceptance rate: accepted / proposed drafts.
Totals are ratios of sums (every verify step weighs the same); the spread is over requests.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from eagle3_synth.engines.base import SpeculativeCounts


@dataclass(frozen=True)
class Served:
    """One row evaluated: where it came from and what the speculative engine reported for it."""

    config: str
    sample_id: int
    turn: int
    completion_tokens: int
    counts: SpeculativeCounts | None  # None: no verify step (an output of one token, or an error)
    equal_to_row: bool | None = None  # greedy only: the output is the row's recorded output
    equal_to_baseline: bool | None = None  # greedy only: the output is the engine's without speculation
    error: str | None = None
    # Where an unequal output first differs: {"row"|"baseline": [output position, its id, the other's id]}
    # (an id is None past an output's end). A near-tie of two logits in the engine's dtype shows as one id
    # swapped for another that the other engine ranks a hair lower.
    differences: dict[str, list] = field(default_factory=dict)

    def as_dict(self) -> dict:
        counts = self.counts
        return {"config": self.config, "sample_id": self.sample_id, "turn": self.turn,
                "completion_tokens": self.completion_tokens,
                "verify_steps": counts.verify_steps if counts else 0,
                "correct_drafts": counts.correct_drafts if counts else 0,
                "proposed_drafts": counts.proposed_drafts if counts else 0,
                "correct_drafts_histogram": list(counts.correct_drafts_histogram) if counts else [],
                "sglang_accept_length": counts.accept_length if counts else None,
                "equal_to_row": self.equal_to_row, "equal_to_baseline": self.equal_to_baseline,
                "first_differences": self.differences, "error": self.error}


def first_difference(output: Sequence[int], reference: Sequence[int]) -> list | None:
    """[position, output's id, reference's id] of the first output position where they differ (an
    id None past its sequence's end), None when they are equal."""
    for position in range(max(len(output), len(reference))):
        mine = output[position] if position < len(output) else None
        theirs = reference[position] if position < len(reference) else None
        if mine != theirs:
            return [position, mine, theirs]
    return None


def _unequal_label(served: Served, reference: str) -> str:
    """"B1_glaive:6 (output token 36: 16, not 20)": the row, and where its output first left the reference's."""
    label = f"{served.config}:{served.sample_id}"
    where = served.differences.get(reference)
    return label + (f" (output token {where[0]}: {where[1]}, not {where[2]})" if where else "")


def quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def acceptance(served: Iterable[Served], draft_steps: int | None = None) -> dict:
    """The figures of the module doc over `served` (rows without a verify step counted apart);
    `draft_steps`, the draft steps per verify, gives every position its figure (SGLang's histogram ends
    at the most drafts any step accepted)."""
    rows = list(served)
    counted = [s for s in rows if s.counts is not None and s.counts.verify_steps > 0]
    steps = sum(s.counts.verify_steps for s in counted)
    correct = sum(s.counts.correct_drafts for s in counted)
    proposed = sum(s.counts.proposed_drafts for s in counted)
    tokens = sum(s.completion_tokens for s in counted)
    per_request = [1 + s.counts.correct_drafts / s.counts.verify_steps for s in counted]
    width = max([len(s.counts.correct_drafts_histogram) for s in counted] + [draft_steps + 1 if draft_steps and counted else 0])
    histogram = [sum(s.counts.correct_drafts_histogram[k] for s in counted if k < len(s.counts.correct_drafts_histogram))
                 for k in range(width)]
    figures = {
        "rows": len(rows), "rows_without_steps": len(rows) - len(counted), "verify_steps": steps,
        "completion_tokens": tokens, "correct_drafts": correct, "proposed_drafts": proposed,
        "acceptance_length": 1 + correct / steps if steps else None,
        "tokens_per_step": tokens / steps if steps else None,
        "acceptance_rate": correct / proposed if proposed else None,
        "correct_drafts_histogram": histogram,
        "per_position": [sum(histogram[k:]) / sum(histogram) for k in range(1, width)] if sum(histogram) else [],
    }
    if per_request:
        figures["acceptance_length_spread"] = {
            "std": statistics.pstdev(per_request), "p10": quantile(per_request, 0.1),
            "p50": quantile(per_request, 0.5), "p90": quantile(per_request, 0.9)}
    return figures


def greedy_check(served: Sequence[Served]) -> dict:
    """Counts of greedy outputs equal / unequal to the row and to the engine without speculation,
    with the first unequal rows named (EAGLE's verification is lossless: each is a bug or a dtype
    difference between the engine that wrote the row and this one)."""
    result = {}
    for name, attribute in (("row", "equal_to_row"), ("baseline", "equal_to_baseline")):
        checked = [s for s in served if getattr(s, attribute) is not None]
        unequal = [s for s in checked if not getattr(s, attribute)]
        result[name] = {"checked": len(checked), "unequal": len(unequal),
                        "unequal_rows": [_unequal_label(s, name) for s in unequal[:10]]}
    return result
