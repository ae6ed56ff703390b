"""benchmarks/bench_cross_config.py's own logic: the prompts of each config's kind and the table."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def bench():
    from benchmarks import bench_cross_config
    return bench_cross_config


def test_each_config_gets_distinct_prompts_of_its_kind(bench):
    glaive = bench.prompt_records("B1_glaive", 11, 30)
    chat = bench.prompt_records("B3_ultrachat", 11, 30)
    assert len({str(r["messages"]) + str(r.get("tools")) for r in glaive}) == 30
    assert all(r["tools"] and r["messages"][0]["role"] == "system" for r in glaive)  # function calling declares tools
    assert not any("tools" in r for r in chat)
    assert bench.prompt_records("B3_ultrachat", 11, 30) == chat  # seeded
    assert bench.prompt_records("B3_ultrachat", 12, 30) != chat


def test_a_kind_with_too_few_distinct_prompts_is_refused(bench, monkeypatch):
    monkeypatch.setitem(bench.KINDS, "B3_ultrachat", (lambda rng: bench.general_chat(__import__("random").Random(0)),))
    with pytest.raises(SystemExit, match="B3_ultrachat: only 1 distinct prompts of 3 asked"):
        bench.prompt_records("B3_ultrachat", 11, 3)


def test_the_table_is_drafter_by_held_out_config(bench):
    def report(values):
        return {"configs": {c: {"acceptance_length": v} for c, v in zip(bench.KINDS, values)},
                "overall": {"acceptance_length": sum(values) / 3}}
    table = bench.table({"B1_glaive": [report([1.5, 1.1, 1.2]), report([1.3, 1.1, 1.0])],
                         "the mix": [report([1.4, 1.3, 1.3])]})
    assert table.splitlines()[0] == "| trained on \\ served on | B1_glaive | B3_ultrachat | B5_openthoughts | all |"
    assert table.splitlines()[2] == \
        "| B1_glaive | 1.400 (1.300-1.500) | 1.100 (1.100-1.100) | 1.100 (1.000-1.200) | 1.200 (1.133-1.267) |"
    assert table.splitlines()[3] == "| the mix | 1.400 | 1.300 | 1.300 | 1.333 |"  # one seed: the value alone
