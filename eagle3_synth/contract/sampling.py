"""How one sample was sampled: the `sampling` column, and the checks of its values.

A rollout (a line of prompts.jsonl) carries its sampling (`PreparedPrompt.sampling`: the run's
`--temperature`/`--top-p`/`--top-k`/`--min-p`/`--max-new-tokens`, updated by its draw from
`--sampling-mix`, and the run's `--seed`). Each of its turns is sent with that sampling and the
seed of its own sample, `seed + sample_id` (`sample_sampling`): the engine request and the row's
`sampling` column are both made by this one function, so the column says exactly what the engine
was sent.

`max_new_tokens` in the column is the cap the request had; a `length` row with fewer output ids
than it was stopped early by the engine (SGLang lowers a request's `max_new_tokens` to fit the
context or the KV budget: sglang srt/managers/scheduler.py), and `stats` counts it as `lowered`
(`is_lowered`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from eagle3_synth.contract.ranges import RANGES
from eagle3_synth.errors import ConfigError

# The sampling values of a request, in the order the column writes them (then `seed`).
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p", "max_new_tokens")


def sampling_problem(name: str, value: Any) -> str | None:
    """Why `value` is not a valid `name` (one of SAMPLING_KEYS, or `seed`), None when it is: its type
    here, its range from the one table (`contract/ranges.py`)."""
    if name not in (*SAMPLING_KEYS, "seed"):
        raise ConfigError(f"unknown sampling parameter {name!r}; the parameters are {', '.join(SAMPLING_KEYS)}")
    integer = name in ("top_k", "max_new_tokens", "seed")
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        if name == "seed" and value is None:
            return None
        return f"must be {'an integer' if integer else 'a number'}, got {value!r}"
    return None if name == "seed" else RANGES[name].problem(value)


def check_sampling(max_new_tokens: int, temperature: float, top_p: float, top_k: int = -1, min_p: float = 0.0) -> None:
    """The one place sampling values are checked, named by the options a user types."""
    for name, value in (("max_new_tokens", max_new_tokens), ("temperature", temperature), ("top_p", top_p),
                        ("top_k", top_k), ("min_p", min_p)):
        problem = sampling_problem(name, value)
        if problem is not None:
            raise ConfigError(f"--{name.replace('_', '-')} {problem}")


def sample_sampling(rollout: Mapping[str, Any], sample_id: int) -> dict[str, Any]:
    """The sampling of one sample of a rollout: the rollout's values, and its seed `seed +
    sample_id` (None: unseeded), as the engine is sent it and the `sampling` column records it."""
    values = {name: rollout.get(name) for name in SAMPLING_KEYS}
    seed = rollout.get("seed")
    values["seed"] = None if seed is None else seed + sample_id
    return values


def dumps_sampling(sampling: Mapping[str, Any]) -> str:
    """The `sampling` column: the sample's sampling as JSON, keys in SAMPLING_KEYS order then seed."""
    return json.dumps({name: sampling.get(name) for name in (*SAMPLING_KEYS, "seed")})


def row_cap(sampling_json: str | None) -> int | None:
    """The `max_new_tokens` a row was generated with (None where the row records no sampling)."""
    if not sampling_json:
        return None
    cap = json.loads(sampling_json).get("max_new_tokens")
    return cap if isinstance(cap, int) else None


def is_lowered(finish_reason: str, completion_tokens: int, sampling_json: str | None) -> bool:
    """A `length` row that stopped before its own cap: the engine lowered the cap (module doc)."""
    cap = row_cap(sampling_json)
    return finish_reason == "length" and cap is not None and completion_tokens < cap
