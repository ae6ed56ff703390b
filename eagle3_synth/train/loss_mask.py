"""Training inputs from rows: `input_ids = prompt_ids + output_ids` and a loss mask over them.

Token-exact by construction: the ids are concatenated, never decoded. What the mask covers:

- `train_on="output"` (default): every generated token -- reasoning, `</think>`, response, tool
  calls and the stop token (`[0]*len(prompt_ids) + [1]*len(output_ids)`, docs/data.md "Boundaries");
- `train_on="response"`: only `output_ids[response_start:]`; a row whose reasoning never ended
  (`response_start == -1`) then has nothing to learn from (all zeros).

With `datasets`:

    from eagle3_synth.train.loss_mask import training_map_fn
    ds = load_dataset("org/eagle3-synth", "B1_glaive", split="train")
    train = ds.map(training_map_fn(train_on="output"), batched=True, remove_columns=ds.column_names)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
from typing import Any, Literal

from eagle3_synth.errors import ConfigError

TrainOn = Literal["output", "response"]
TRAIN_ON: tuple[str, ...] = ("output", "response")


def _check(train_on: str, max_length: int | None) -> None:
    if train_on not in TRAIN_ON:
        raise ConfigError(f"train_on must be one of {TRAIN_ON}, got {train_on!r}")
    if max_length is not None and max_length < 1:
        raise ConfigError(f"max_length must be >= 1, got {max_length}")


def loss_mask(prompt_len: int, output_len: int, response_start: int, train_on: TrainOn = "output") -> list[int]:
    """The mask for a sequence of `prompt_len + output_len` tokens."""
    if train_on == "output":
        first = 0
    elif response_start >= 0:
        first = response_start
    else:
        first = output_len
    return [0] * (prompt_len + first) + [1] * (output_len - first)


def masked_output_starts(lengths: np.ndarray, response_starts: np.ndarray | None, train_on: TrainOn) -> np.ndarray:
    """Per row, the first index of `output_ids` under the loss mask (== length: none), as
    `loss_mask` sets it (its column form, for counting tokens under the mask: `train/draft_vocab.py`): 0 for `output`; `response_start`, or the length when reasoning
    never ended (`-1`), for `response`."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if train_on == "output":
        return np.zeros_like(lengths)
    if train_on != "response" or response_starts is None:
        raise ConfigError(f"train_on must be one of {TRAIN_ON}, got {train_on!r}")
    starts = np.asarray(response_starts, dtype=np.int64)
    return np.where(starts >= 0, np.minimum(starts, lengths), lengths)


def training_example(
    row: Mapping[str, Any], *, train_on: TrainOn = "output", max_length: int | None = None
) -> dict[str, list[int]]:
    """`{"input_ids", "loss_mask"}` of one row; `max_length` cuts both from the right."""
    _check(train_on, max_length)
    return _example(row["prompt_ids"], row["output_ids"], row["response_start"], train_on, max_length)


def _example(
    prompt_ids: Sequence[int], output_ids: Sequence[int], response_start: int, train_on: TrainOn, max_length: int | None
) -> dict[str, list[int]]:
    input_ids = [*prompt_ids, *output_ids]
    mask = loss_mask(len(prompt_ids), len(output_ids), response_start, train_on)
    if max_length is not None:
        input_ids, mask = input_ids[:max_length], mask[:max_length]
    return {"input_ids": input_ids, "loss_mask": mask}


def training_map_fn(
    train_on: TrainOn = "output", max_length: int | None = None
) -> Callable[[Mapping[str, list[Any]]], dict[str, list[list[int]]]]:
    """A batched `Dataset.map` function adding `input_ids` and `loss_mask` columns."""
    _check(train_on, max_length)

    def to_training(batch: Mapping[str, list[Any]]) -> dict[str, list[list[int]]]:
        examples = [
            _example(p, o, r, train_on, max_length)
            for p, o, r in zip(batch["prompt_ids"], batch["output_ids"], batch["response_start"])
        ]
        return {"input_ids": [e["input_ids"] for e in examples], "loss_mask": [e["loss_mask"] for e in examples]}

    return to_training
