"""`stats`: every figure equals the same figure computed here independently, from the raw ids."""

from __future__ import annotations

import json
import math

import pyarrow as pa
import pytest
from datasets import load_dataset

from eagle3_synth.cli import main
from eagle3_synth.dataset.stores import open_source
from eagle3_synth.contract.row import FEATURES
from eagle3_synth.dataset.stats import (LENGTH_THRESHOLDS, STATS_COLUMNS, config_stats, format_stats_table,
                                        plot_output_lengths, turn_stats)

from ..support.built_datasets import KIMI_CONFIG, QWEN_CONFIG, checks_dataset
from ..conftest import KIMI_TOKENIZER


@pytest.fixture(scope="module")
def folder(tmp_path_factory, kimi_tokenizer, qwen_tokenizer):
    return checks_dataset(tmp_path_factory, kimi_tokenizer, qwen_tokenizer)


def nearest_rank(values: list[int], q: float) -> int:
    ordered = sorted(values)
    return ordered[max(math.ceil(q * len(ordered)) - 1, 0)]


def expected_figures(rows: list[dict], markers) -> dict:
    """The figures from output_ids and marker ids alone, without the boundary columns."""
    n = len(rows)
    outputs = [row["output_ids"] for row in rows]
    reasoning, response = [], []
    for row, out in zip(rows, outputs):
        opens_in_prompt = row["prompt_ids"][-1] == markers.reasoning_open.id
        start = 0 if opens_in_prompt else (out.index(markers.reasoning_open.id) + 1 if markers.reasoning_open.id in out else None)
        implicit = markers.tool_section_begin.id if markers.tool_section_begin else markers.tool_call_begin.id
        if markers.reasoning_close.id in out:
            end = out.index(markers.reasoning_close.id)
            resp = len(out) - end - 1
        elif start is not None and implicit in out:
            end = out.index(implicit)
            resp = len(out) - end
        else:
            end, resp = len(out), (len(out) if start is None else 0)
        reasoning.append(0 if start is None else end - start)
        response.append(resp)
    lengths = [len(o) for o in outputs]
    prompts = [len(row["prompt_ids"]) for row in rows]
    return {
        "count": n,
        "prompt_tokens": {k: nearest_rank(prompts, q) for k, q in
                          (("min", 0), ("median", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1))},
        "output_tokens": {k: nearest_rank(lengths, q) for k, q in
                          (("min", 0), ("median", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1))},
        "share_short": sum(length < 500 for length in lengths) / n,
        "share_truncated": sum(row["finish_reason"] == "length" for row in rows) / n,
        "share_no_think_end": sum(markers.reasoning_close.id not in out for out in outputs) / n,
        "share_with_tool_calls": sum(markers.tool_call_begin.id in out for out in outputs) / n,
        "mean_reasoning_tokens": sum(reasoning) / n,
        "mean_response_tokens": sum(response) / n,
        "output_tokens_total": sum(lengths),
    }


@pytest.mark.parametrize("config, marker_fixture", [(KIMI_CONFIG, "kimi_markers"), (QWEN_CONFIG, "qwen_markers")])
def test_figures_match_an_independent_computation(folder, config, marker_fixture, request):
    rows = list(load_dataset(str(folder), config, split="train"))
    expected = expected_figures(rows, request.getfixturevalue(marker_fixture))
    stats = config_stats(open_source(str(folder)).table(config, STATS_COLUMNS), config).as_dict()
    for key, value in expected.items():
        assert stats[key] == pytest.approx(value), key
    # The fixtures are built to exercise every figure: none of them is trivially 0 or 1.
    assert 0 < stats["share_short"] < 1 or config == QWEN_CONFIG
    assert 0 < stats["share_truncated"] < 1 and 0 < stats["share_with_tool_calls"] < 1


def test_every_input_kind_gives_the_same_figures(folder):
    table = open_source(str(folder)).table(KIMI_CONFIG, STATS_COLUMNS)
    dataset = load_dataset(str(folder), KIMI_CONFIG, split="train")
    from_table = config_stats(table, KIMI_CONFIG)
    assert config_stats(dataset, KIMI_CONFIG) == from_table
    assert config_stats(list(dataset), KIMI_CONFIG) == from_table
    run_dir = open_source(str(folder / ".runs" / KIMI_CONFIG))
    assert config_stats(run_dir.table(KIMI_CONFIG, STATS_COLUMNS), KIMI_CONFIG) == from_table


def test_stats_command_prints_each_config(folder, capsys):
    assert main(["stats", str(folder), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [s["config"] for s in printed] == [KIMI_CONFIG, QWEN_CONFIG]
    table = open_source(str(folder)).table(QWEN_CONFIG, STATS_COLUMNS)
    assert printed[1] == json.loads(json.dumps(config_stats(table, QWEN_CONFIG).as_dict()))

    assert main(["stats", str(folder), QWEN_CONFIG]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:2] == ["config", "n"] and len(lines) == 2
    q = printed[1]["output_tokens"]
    cells = lines[1].split()
    assert cells[:2] == [QWEN_CONFIG, "9"]
    assert f"{q['min']}/{q['median']}/{q['p90']}/{q['p99']}/{q['max']}" in cells
    assert f"{100 * printed[1]['share_truncated']:.1f}%" in cells


def test_markdown_table_has_a_row_per_config(folder):
    source = open_source(str(folder))
    stats = [config_stats(source.table(c, STATS_COLUMNS), c) for c in source.configs()]
    lines = format_stats_table(stats, markdown=True).splitlines()
    assert lines[1].startswith("|---") and [line.split("|")[1].strip() for line in lines[2:]] == source.configs()


def test_plot_writes_one_histogram_per_config(folder, tmp_path, capsys):
    import matplotlib.image

    path = tmp_path / "lengths.png"
    assert main(["stats", str(folder), "--plot", str(path)]) == 0
    assert f"wrote {path}" in capsys.readouterr().out
    two = matplotlib.image.imread(path)
    one = matplotlib.image.imread(plot_output_lengths({"x": [1, 2, 3]}, tmp_path / "one.png"))
    assert two.shape[1] == one.shape[1] and two.shape[0] == 2 * one.shape[0]  # one panel per config


def test_run_in_progress_counts_only_finished_samples(tmp_path, kimi_tokenizer):
    from ..support.built_datasets import build, kimi_outputs, write_prompts

    write_prompts(tmp_path / "prompts.jsonl", 12)
    outputs = [r for r in kimi_outputs(kimi_tokenizer, 12) if r["sample_id"] % 4 != 3]  # 3 not generated yet
    build(tmp_path / "ds", KIMI_CONFIG, KIMI_TOKENIZER, outputs, tmp_path / "prompts.jsonl", status=1)
    source = open_source(str(tmp_path / "ds" / ".runs"))
    assert source.kind == "run directory"
    stats = config_stats(source.table(KIMI_CONFIG, STATS_COLUMNS), KIMI_CONFIG)
    assert stats.count == 9
    assert stats.output_tokens_total == sum(len(r["output_ids"]) for r in outputs)


def test_empty_input_gives_zeros():
    stats = config_stats([], "empty")
    assert stats.count == 0 and stats.share_short == 0.0 and stats.output_tokens.max == 0


def test_unknown_config_is_a_clear_error(folder, capsys):
    assert main(["stats", str(folder), "B9_nothing"]) == 2
    assert "has no config 'B9_nothing'" in capsys.readouterr().err


def test_share_over_each_trainer_length_counts_prompt_plus_output():
    totals = [(100, 100), (1000, 1049), (2000, 100), (3000, 5000), (10_000, 7000)]  # 200, 2049, 2100, 8000, 17000
    rows = [{"prompt_tokens": p, "completion_tokens": o, "reasoning_start": -1, "think_end": -1, "response_start": 0,
             "tool_calls": [], "finish_reason": "stop", "turn": i % 2} for i, (p, o) in enumerate(totals)]
    table = pa.Table.from_pylist(rows, schema=pa.schema([FEATURES.arrow_schema.field(c) for c in STATS_COLUMNS]))
    stats = config_stats(table, "X")
    assert LENGTH_THRESHOLDS == (2048, 4096, 8192, 16384)
    assert stats.share_over == {2048: 4 / 5, 4096: 2 / 5, 8192: 1 / 5, 16384: 1 / 5}
    assert "80.0/40.0/20.0/20.0%" in format_stats_table([stats])
    # Per turn: rows of turn 0 (three) and turn 1 (two).
    assert [(s.config, s.count) for s in turn_stats(table, "X")] == [("X turn 0", 3), ("X turn 1", 2)]
    assert turn_stats(table.filter(pa.array([True, False, True, False, True])), "X") == []
