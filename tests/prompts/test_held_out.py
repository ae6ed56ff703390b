"""The validation draw: whole conversations, a count or a fraction, the same for the same seed."""

from __future__ import annotations

import numpy as np
import pytest

from eagle3_synth.errors import ConfigError
from eagle3_synth.prompts.configs import ConfigSpec
from eagle3_synth.prompts.held_out import check_validation, split_of, validation_conversations, validation_draws
from eagle3_synth.run.settings import GenerationSettings

# Rollout -> conversation, as `prompt_slots().conversation` gives it: 3 rollouts of each of 200.
ROLLOUTS = np.repeat(np.arange(200, dtype=np.int64), 3)


def test_a_fraction_takes_the_conversations_drawn_below_it():
    held = validation_conversations(ROLLOUTS, 0.25, seed=0)
    draws = validation_draws(np.arange(200), seed=0)
    assert held.tolist() == np.flatnonzero(draws < 0.25).tolist()
    assert 25 < len(held) < 75  # about a quarter of 200
    assert held.tolist() == validation_conversations(ROLLOUTS, 0.25, seed=0).tolist()  # deterministic
    assert held.tolist() != validation_conversations(ROLLOUTS, 0.25, seed=1).tolist()  # per seed


def test_a_count_takes_that_many_conversations_with_the_smallest_draws():
    held = validation_conversations(ROLLOUTS, 10, seed=3)
    draws = validation_draws(np.arange(200), seed=3)
    assert held.tolist() == sorted(np.argsort(draws)[:10].tolist())
    # The draw is per conversation, so a count never splits one: the 10 are the first 10 of a larger count.
    assert set(held) < set(validation_conversations(ROLLOUTS, 20, seed=3))


def test_every_rollout_of_a_conversation_is_on_one_side():
    held = validation_conversations(ROLLOUTS, 0.3, seed=7)
    sides = {}
    for conversation in ROLLOUTS.tolist():
        sides.setdefault(conversation, set()).add(split_of(conversation, held))
    assert all(len(side) == 1 for side in sides.values())
    assert {"train", "validation"} == set().union(*sides.values())


def test_a_conversations_side_does_not_depend_on_the_others():
    """A fraction's draw is per conversation: dropping conversations moves none of the others."""
    held = set(validation_conversations(ROLLOUTS, 0.3, seed=0).tolist())
    fewer = set(validation_conversations(ROLLOUTS[ROLLOUTS % 2 == 0], 0.3, seed=0).tolist())
    assert fewer == {c for c in held if c % 2 == 0}


def test_no_validation_holds_out_nothing():
    assert validation_conversations(ROLLOUTS, None, seed=0).tolist() == []


def test_a_count_that_leaves_no_train_is_refused():
    with pytest.raises(ConfigError, match=r"--validation 200: the run keeps 200 conversations"):
        validation_conversations(ROLLOUTS, 200, seed=0)


@pytest.mark.parametrize(("given", "expected"), [("200", 200), ("0.05", 0.05), (7, 7), (0.5, 0.5), (None, None)])
def test_counts_and_fractions_are_read_as_given(given, expected):
    value = check_validation(given)
    assert value == expected and type(value) is type(expected)


@pytest.mark.parametrize(("given", "message"), [
    ("0", "--validation: a count must be >= 1, got 0"),
    ("1.0", "--validation: a fraction must be strictly between 0 and 1, got 1.0"),
    ("-0.1", "--validation: a fraction must be strictly between 0 and 1, got -0.1"),
    ("ten", "--validation: 'ten' is neither a count N"),
    (True, "--validation: True is neither a count N"),
])
def test_bad_values_are_refused_naming_the_option(given, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(".", r"\.")):
        check_validation(given)


def test_the_option_and_the_config_field_reach_the_spec(tmp_path):
    assert GenerationSettings(validation="0.1").validation == 0.1
    with pytest.raises(ConfigError, match="config 'mine': validation: a count must be >= 1, got 0"):
        ConfigSpec(name="mine", source="", split="train", pattern="", adapter="messages", cap=1, license="x",
                   validation=0)
    assert ConfigSpec(name="mine", source="", split="train", pattern="", adapter="messages", cap=1, license="x",
                      validation=5).validation == 5
