"""`hidden-states --check`: the written files reproduce the model's own logits.

For each file: `lm_head(norm(stored final state))` (SpecForge stores the normed state: only the head)
against the logits of a plain, independent forward of the whole model over the row's ids, one row
at a time. On greedy rows (temperature 0 recorded with the data), the argmax at each position that
predicts an output token must also be that token: the states are the ones that wrote the data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eagle3_synth.train.hidden_states.layers import model_parts
from eagle3_synth.train.hidden_states.layouts import Item

# Largest |difference| between reproduced and reference logits, relative to the largest |logit|:
# the storage dtype's precision, with room for a batched vs single-row forward.
TOLERANCE = {"float32": 1e-4, "bfloat16": 3e-2, "float16": 1e-2}
SHOWN = 5


@dataclass
class CheckReport:
    rows: int = 0
    worst: float = 0.0  # the largest relative difference seen
    greedy_positions: int = 0
    bad_rows: list[str] = field(default_factory=list)  # "file: why"

    @property
    def ok(self) -> bool:
        return not self.bad_rows

    def lines(self) -> list[str]:
        head = (f"check: {self.rows} rows, logits reproduced within {self.worst:.2e} (relative), "
                f"{self.greedy_positions} greedy positions compared")
        return [head, *(f"  {line}" for line in self.bad_rows[:SHOWN]),
                *([f"  ... and {len(self.bad_rows) - SHOWN} more"] if len(self.bad_rows) > SHOWN else [])]


def _tie_tolerance(logits: Any) -> float:
    """Two logits this close count as a tie (an argmax the storage dtype cannot resolve)."""
    return float(logits.abs().max()) * 2 ** -7


def check_files(model: Any, layout: Any, items: list[Item], storage_dtype: str, greedy: bool) -> CheckReport:
    """Check every item's file (they must exist); `greedy` adds the argmax comparison."""
    import torch

    parts = model_parts(model)
    device = model.get_input_embeddings().weight.device
    tolerance = TOLERANCE[storage_dtype]
    report = CheckReport()
    for item in items:
        path: Path = layout.path(item)
        token_ids, state, needs_norm = layout.last_state(path)
        if token_ids.tolist() != item.input_ids.tolist():
            report.bad_rows.append(f"{path.name} ({item.row_id}): its token ids are not the row's")
            continue
        with torch.inference_mode():
            ids = torch.from_numpy(item.input_ids).to(torch.long).unsqueeze(0).to(device)
            reference = model(input_ids=ids, use_cache=False).logits[0].float()
            hidden = state.to(device=device, dtype=parts.lm_head.weight.dtype)
            logits = parts.lm_head(parts.norm(hidden) if needs_norm else hidden).float()
        scale = float(reference.abs().max()) or 1.0
        diff = float((logits - reference).abs().max()) / scale
        report.rows += 1
        report.worst = max(report.worst, diff)
        if diff > tolerance:
            report.bad_rows.append(f"{path.name} ({item.row_id}): logits differ by {diff:.2e} of their scale "
                                   f"(tolerance {tolerance:.0e} for {storage_dtype})")
            continue
        if greedy:
            _check_argmax(item, logits.cpu(), path, report)
    return report


def _check_argmax(item: Item, logits: Any, path: Path, report: CheckReport) -> None:
    """Positions prompt_tokens - 1 .. T - 2 predict the output ids that follow them."""
    import torch

    start, ids = item.prompt_tokens - 1, torch.from_numpy(item.input_ids)
    predicted = logits[start:-1]
    if predicted.shape[0] == 0:
        return
    following = ids[start + 1:]
    best = predicted.max(dim=-1).values
    chosen = predicted.gather(1, following.unsqueeze(1)).squeeze(1)
    misses = (best - chosen > _tie_tolerance(predicted)).nonzero().flatten().tolist()
    report.greedy_positions += predicted.shape[0]
    if misses:
        first = misses[0] + start
        report.bad_rows.append(f"{path.name} ({item.row_id}): at {len(misses)} greedy position(s) the argmax is not the "
                               f"next output id (first at token {first + 1}: id {int(ids[first + 1])}, argmax "
                               f"{int(predicted[misses[0]].argmax())})")
