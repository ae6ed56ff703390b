"""`eagle3_synth.training`: input_ids/loss_mask per row, and the same through `Dataset.map`."""

from __future__ import annotations

import re

import pytest
from datasets import load_dataset

from eagle3_synth.errors import ConfigError
from eagle3_synth.train.export import loss_mask, training_example, training_map_fn

from ..support.built_datasets import KIMI_CONFIG, checks_dataset


@pytest.fixture(scope="module")
def dataset(tmp_path_factory, kimi_tokenizer, qwen_tokenizer):
    return load_dataset(str(checks_dataset(tmp_path_factory, kimi_tokenizer, qwen_tokenizer)), KIMI_CONFIG, split="train")


def test_output_mask_covers_reasoning_and_response(dataset):
    for row in dataset:
        example = training_example(row)
        assert example["input_ids"] == row["prompt_ids"] + row["output_ids"]
        assert example["loss_mask"] == [0] * row["prompt_tokens"] + [1] * row["completion_tokens"]


def test_response_mask_starts_at_response_start(dataset, kimi_markers):
    unended = 0
    for row in dataset:
        mask = training_example(row, train_on="response")["loss_mask"]
        trained = [t for t, m in zip(row["prompt_ids"] + row["output_ids"], mask) if m]
        if row["response_start"] < 0:  # reasoning never ended: nothing to learn as a response
            unended += 1
            assert not any(mask)
        else:
            assert trained == row["output_ids"][row["response_start"]:]
            assert kimi_markers.reasoning_close.id not in trained
    assert unended > 0


def test_max_length_cuts_both(dataset):
    row = dataset[0]
    example = training_example(row, max_length=row["prompt_tokens"] + 2)
    assert example["input_ids"] == row["prompt_ids"] + row["output_ids"][:2]
    assert example["loss_mask"] == [0] * row["prompt_tokens"] + [1, 1]


def test_map_function_with_datasets(dataset):
    for train_on in ("output", "response"):
        mapped = dataset.map(training_map_fn(train_on=train_on), batched=True, batch_size=5,
                             remove_columns=dataset.column_names)
        assert mapped.column_names == ["input_ids", "loss_mask"]
        assert mapped.to_list() == [training_example(row, train_on=train_on) for row in dataset]


def test_loss_mask_edges():
    assert loss_mask(2, 3, -1, "output") == [0, 0, 1, 1, 1]
    assert loss_mask(2, 3, 1, "response") == [0, 0, 0, 1, 1]
    assert loss_mask(2, 3, -1, "response") == [0, 0, 0, 0, 0]


@pytest.mark.parametrize("kwargs, message", [
    ({"train_on": "prompt"}, "train_on must be one of ('output', 'response'), got 'prompt'"),
    ({"max_length": 0}, "max_length must be >= 1, got 0"),
])
def test_bad_options(dataset, kwargs, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        training_example(dataset[0], **kwargs)
    with pytest.raises(ConfigError, match=re.escape(message)):
        training_map_fn(**kwargs)
