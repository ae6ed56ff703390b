"""Every number option's range: one table (`RANGES`), one check, for the command line, the builder's
kwargs, config files and the engines alike.

Checked as soon as the values are known (the run configuration when made, every field by its name:
the command line's and the builder's alike; the engines' options when an engine starts), so a typo fails in a
second, not after hours. argparse reads "nan" and "inf" as floats, and a NaN temperature would be
written into run.json and sent to the engine: a value must be finite. Sampling values also have a
type (`contract/row.py: sampling_problem`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from eagle3_synth.errors import ConfigError


@dataclass(frozen=True)
class Range:
    """`minimum <= value`, `above < value`, `value <= maximum` (each when set), or one of `also`."""

    option: str  # as a user types it, for the message
    minimum: float | None = None
    above: float | None = None
    maximum: float | None = None
    also: tuple[float, ...] = ()  # other values allowed, e.g. -1 for "off"

    def allowed(self) -> str:
        bounds = [f"{sign} {bound:g}" for sign, bound in ((">=", self.minimum), (">", self.above), ("<=", self.maximum))
                  if bound is not None]
        return " and ".join(bounds) + "".join(f" (or {other:g})" for other in self.also)

    def problem(self, value: float | int) -> str | None:
        """Why `value` is out of this range ("must be ..., got ..."), None when it is in it."""
        if value in self.also:
            return None
        if isinstance(value, float) and not math.isfinite(value):
            return f"must be a finite number {self.allowed()}, got {value!r}"
        if (self.minimum is not None and value < self.minimum) or (self.above is not None and not value > self.above) \
                or (self.maximum is not None and value > self.maximum):
            return f"must be {self.allowed()}, got {value!r}"
        return None


# Field (and command-line dest) -> its range. Sampling: SGLang refuses a top_k below 1 other than -1
# ("off": sglang srt/sampling/sampling_params.py, `SamplingParams.verify`; the transformers engine
# reads -1 the same way) and a min_p outside [0, 1] (same file).
RANGES: dict[str, Range] = {
    "limit": Range("--limit", minimum=1),
    "scan_limit": Range("--scan-limit", minimum=1),
    "max_context": Range("--max-context", minimum=1),
    "samples_per_prompt": Range("--samples-per-prompt", minimum=1),
    "max_new_tokens": Range("--max-new-tokens", minimum=1),
    "temperature": Range("--temperature", minimum=0),
    "top_p": Range("--top-p", above=0, maximum=1),
    "top_k": Range("--top-k", minimum=1, also=(-1,)),
    "min_p": Range("--min-p", minimum=0, maximum=1),
    "batch_size": Range("--batch-size", minimum=1),
    "max_in_flight": Range("--max-in-flight", minimum=1),
    "request_timeout": Range("--request-timeout", above=0),
    "max_retries": Range("--max-retries", minimum=0),
    "num_shards": Range("--num-shards", minimum=1),
    "shard_index": Range("--shard-index", minimum=0),
    "max_hours": Range("--max-hours", above=0),
    "workers": Range("workers", minimum=1),
    # validate
    "check_workers": Range("--workers", minimum=1),
    # export, hidden-states and the trainers' inputs
    "max_length": Range("--max-length", minimum=1),
    "batch_tokens": Range("--batch-tokens", minimum=1),
    "max_bytes": Range("--max-bytes", minimum=0),
    "draft_vocab_size": Range("--draft-vocab-size", minimum=1),
    "target_vocab_size": Range("--target-vocab-size", minimum=1),
    # evaluate: SGLang's speculative settings (each >= 1, sglang srt/server_args.py) and the rows taken
    "max_rows": Range("--max-rows", minimum=1),
    "num_steps": Range("--num-steps", minimum=1),
    "eagle_topk": Range("--eagle-topk", minimum=1),
    "num_draft_tokens": Range("--num-draft-tokens", minimum=1),
    # publish
    "preview_chars": Range("--preview-chars", minimum=1),
}


def check_range(name: str, value: float | int | None) -> None:
    """`value` of the field `name` in its range (`RANGES`), or a one-line ConfigError naming the
    option; None passes (an unset option)."""
    if value is None:
        return
    problem = RANGES[name].problem(value)
    if problem is not None:
        raise ConfigError(f"{RANGES[name].option} {problem}")


def check_ranges(values: Mapping[str, Any]) -> None:
    """Every value of `values` that has a range (a dict of fields, or `vars()` of parsed options)."""
    for name in RANGES:
        value = values.get(name)
        if isinstance(value, str):  # --shard-index/--num-shards auto: resolved and checked by run/shards.py
            continue
        check_range(name, value)
