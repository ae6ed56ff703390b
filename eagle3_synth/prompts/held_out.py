"""The held-out `validation` split: which whole conversations it takes, by a seeded draw.

A trainer's own split is by row (speculators' `train_data_ratio`), so with `--samples-per-prompt`
and `--turns all` the rollouts and turns of one conversation would land on both sides and the
validation loss would measure memorisation. Here the unit is the source conversation: every
rollout and every turn of a conversation is on one side.

`--validation FRACTION` (0 < FRACTION < 1) takes each conversation whose draw
`seeded_draw(seed, "validation:<conversation>")` is below FRACTION, a draw of its own (another key
than the `--template-kwarg-mix`/`--sampling-mix` draws), so one conversation's side never depends
on another's. `--validation N` (an integer >= 1) takes the N conversations with the smallest draws
among those kept: it needs the whole list, which `RunDirectory.prompt_slots()` gives at assembly.
Either is a pure function of the prepared conversations, the value and the seed (the run's
`--selection-seed`), so nothing is written for it and a resumed run gives the same split.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from eagle3_synth.errors import ConfigError

# The package's one seeded draw, shared by the per-rollout mixes (`turns.py`) and the validation
# split (`held_out.py`): each keys it differently, so no draw moves another.


def seeded_draw(seed: int, key: str) -> float:
    """A number in [0, 1) from blake2b of `seed:key`: the same for the same pair on any machine,
    and independent of every other key (one conversation's draw never moves another's)."""
    digest = hashlib.blake2b(f"{seed}:{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


Validation = float | int | None
SPLITS = ("train", "validation")


def check_validation(value: Any, option: str = "--validation") -> Validation:
    """None (no validation split), a count N >= 1 (an int, or a string of digits) or a fraction
    0 < F < 1 (a float, or a string with a decimal point); a ConfigError naming `option` otherwise."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        try:
            value = int(text) if text.isdigit() else float(text)
        except ValueError:
            raise ConfigError(f"{option}: {text!r} is neither a count N (>= 1) nor a fraction (0 < F < 1)") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{option}: {value!r} is neither a count N (>= 1) nor a fraction (0 < F < 1)")
    if isinstance(value, int):
        if value < 1:
            raise ConfigError(f"{option}: a count must be >= 1, got {value}")
        return value
    if not 0.0 < value < 1.0:
        raise ConfigError(f"{option}: a fraction must be strictly between 0 and 1, got {value!r} "
                          "(a count of conversations is an integer)")
    return float(value)


def validation_draws(conversations: np.ndarray, seed: int) -> np.ndarray:
    """Each conversation's draw in [0, 1) (`seeded_draw(seed, "validation:<id>")`)."""
    return np.array([seeded_draw(seed, f"validation:{int(c)}") for c in conversations], dtype=np.float64)


def validation_conversations(conversations: np.ndarray, validation: Validation, seed: int) -> np.ndarray:
    """The sorted conversation ids that go to `validation` (none without one), drawn from the
    distinct ids in `conversations` (one per rollout is fine: a conversation counts once)."""
    if validation is None:
        return np.zeros(0, np.int64)
    distinct = np.unique(np.asarray(conversations, dtype=np.int64))
    draws = validation_draws(distinct, seed)
    if isinstance(validation, float):
        held_out = distinct[draws < validation]
        if not len(held_out):  # asked for a split and silently given none: refused instead
            raise ConfigError(f"--validation {validation}: the draw holds out none of the run's {len(distinct)} "
                              "conversations; give a larger fraction or a count")
        return held_out
    if validation >= len(distinct):
        raise ConfigError(f"--validation {validation}: the run keeps {len(distinct)} conversations, so no "
                          "conversation would be left for train; give a smaller count or a fraction")
    order = np.lexsort((distinct, draws))  # smallest draws first; ties (never seen) by id
    return np.sort(distinct[order[:validation]])


def split_of(conversation: int, held_out: np.ndarray) -> str:
    """`validation` if the conversation is held out, else `train`."""
    i = np.searchsorted(held_out, conversation)
    return "validation" if i < len(held_out) and held_out[i] == conversation else "train"


def run_validation(fields: dict[str, Any]) -> tuple[Validation, int]:
    """A run's recorded `validation` value and the seed its draw uses (the selection seed), from
    run.json's fields; (None, 0) for a run made without one (its run.json has no such field)."""
    conversations = fields.get("conversations") or {}
    return fields.get("validation"), int(conversations.get("mix_seed", 0))
