"""benchmarks/bench_scheduling.py's dependent-turns mode: the workload, and both strategies end to end
on a tiny model engine."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    from benchmarks import bench_scheduling

    return bench_scheduling


def test_workload_is_seeded_and_turns_are_1_to_6(bench):
    a = bench.Conversations.make(300, "uniform")
    assert a == bench.Conversations.make(300, "uniform")
    assert set(a.turns) == set(range(1, 7))
    assert [len(u) for u in a.user_ids] == [t - 1 for t in a.turns]
    skewed = bench.Conversations.make(300, "skewed")
    assert sum(skewed.turns) < sum(a.turns)
    firsts = a.firsts
    assert firsts[0] == 0 and all(firsts[c + 1] - firsts[c] == a.turns[c] for c in range(299))


def test_next_prompt_appends_output_and_user_ids_and_ends_where_next_turns_does(bench):
    work = bench.Conversations([[5, 6]], [3], [[[7], [8, 9]]])
    assert work.next_prompt(0, 0, [5, 6], [1000, 2], "stop") == [5, 6, 1000, 2, 7]
    assert work.next_prompt(0, 1, [5, 6, 1000, 2, 7], [1001, 2], "stop") == [5, 6, 1000, 2, 7, 1001, 2, 8, 9]
    assert work.next_prompt(0, 2, [1], [2], "stop") is None  # the last turn
    assert work.next_prompt(0, 0, [5, 6], [1000] * 3, "length") is None  # cut off


def test_each_turn_has_its_own_length(bench):
    work = bench.Conversations.make(50, "uniform")
    lengths = work.expected(bench.ContinuousBatchingModel())
    long = [per for per in lengths if len(per) >= 4]
    assert long and any(len(set(per)) > 1 for per in long)


@pytest.mark.slow
def test_both_strategies_generate_every_planned_turn(bench):
    work = bench.Conversations.make(40, "uniform")
    total = sum(len(per) for per in work.expected(bench.ContinuousBatchingModel()))
    args = ("--backend", "batching", "--slots", "8", "--per-token-ms", "0.01")
    for run in (lambda url: bench.turn_feed(url, work, 16, marks={}),
                lambda url: bench.turn_feed(url, work, 16, longest_first=True),
                lambda url: bench.barrier_per_turn(url, work, 16)):
        with bench.server_process(*args) as url:
            assert run(url) == total
            assert bench.stats(url)["requests"] == total


def test_help_still_works():
    out = subprocess.run([sys.executable, "-m", "benchmarks.bench_scheduling", "--help"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    assert "--conversations" in out and "--prompts" in out
