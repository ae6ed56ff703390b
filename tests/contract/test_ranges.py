"""The one range table: each entry is the command line's own option, and one check for every caller."""

from __future__ import annotations

import argparse

import pytest

from eagle3_synth.cli import make_parser
from eagle3_synth.contract.ranges import RANGES, check_range, check_ranges
from eagle3_synth.errors import ConfigError


def _options() -> dict[str, set[str]]:
    """dest -> the option strings that set it, over every subcommand."""
    found: dict[str, set[str]] = {}
    parsers = [make_parser()]
    while parsers:
        parser = parsers.pop()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                parsers.extend(action.choices.values())
            elif action.option_strings:
                found.setdefault(action.dest, set()).update(action.option_strings)
    return found


def test_every_range_names_the_option_of_its_field():
    options = _options()
    wrong = {name: r.option for name, r in RANGES.items()
             if r.option.startswith("--") and r.option not in options.get(name, ())}
    assert not wrong, wrong


@pytest.mark.parametrize(("name", "value", "message"), [
    ("top_p", 0.0, "--top-p must be > 0 and <= 1, got 0.0"),
    ("top_k", 0, "--top-k must be >= 1 (or -1), got 0"),
    ("temperature", float("nan"), "--temperature must be a finite number >= 0, got nan"),
])
def test_a_value_out_of_range_names_its_option(name, value, message):
    with pytest.raises(ConfigError) as caught:
        check_range(name, value)
    assert str(caught.value) == message


def test_unset_values_and_auto_shards_pass():
    check_ranges({"top_k": -1, "limit": None, "num_shards": "auto", "shard_index": "auto", "other": -5})
