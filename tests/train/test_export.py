"""`export`: speculators rows are the exact ids; SpecForge rows carry the sample's text."""

from __future__ import annotations

import json

import pytest
from datasets import load_dataset

from eagle3_synth.cli import main

from ..support.built_datasets import KIMI_CONFIG, QWEN_CONFIG, checks_dataset


@pytest.fixture(scope="module")
def folder(tmp_path_factory, kimi_tokenizer, qwen_tokenizer):
    return checks_dataset(tmp_path_factory, kimi_tokenizer, qwen_tokenizer)


def rows_of(folder, config) -> dict[int, dict]:
    return {row["sample_id"]: row for row in load_dataset(str(folder), config, split="train")}


def export(folder, tmp_path, config, fmt, *extra: str) -> list[dict]:
    out = tmp_path / f"{config}-{fmt}.jsonl"
    assert main(["export", str(folder), config, "--format", fmt, "--out", str(out), "--overwrite", *extra]) == 0
    return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("config", [KIMI_CONFIG, QWEN_CONFIG])
def test_speculators_rows_rebuild_the_ids_exactly(folder, tmp_path, config, kimi_tokenizer, qwen_tokenizer):
    tokenizer = kimi_tokenizer if config == KIMI_CONFIG else qwen_tokenizer
    rows = rows_of(folder, config)
    records = export(folder, tmp_path, config, "speculators")
    assert len(records) == len(rows) and len({r["id"] for r in records}) == len(rows)
    for record in records:
        row = rows[record["metadata"]["sample_id"]]
        p, o = len(row["prompt_ids"]), len(row["output_ids"])
        assert record["input_ids"][:p] == row["prompt_ids"] and record["input_ids"][p:] == row["output_ids"]
        assert record["loss_mask"] == [0] * p + [1] * o
        assert record["text"] == tokenizer.decode(row["prompt_ids"] + row["output_ids"], skip_special_tokens=False)
        assert record["metadata"]["finish_reason"] == row["finish_reason"]
    # speculators reads local JSONL with datasets' json loader and keeps input_ids + loss_mask.
    loaded = load_dataset("json", data_files=str(tmp_path / f"{config}-speculators.jsonl"), split="train")
    assert loaded["input_ids"] == [r["input_ids"] for r in records]


def test_speculators_response_only_mask(folder, tmp_path):
    rows = rows_of(folder, KIMI_CONFIG)
    for record in export(folder, tmp_path, KIMI_CONFIG, "speculators", "--train-on", "response", "--no-text"):
        row = rows[record["metadata"]["sample_id"]]
        p, o, r = len(row["prompt_ids"]), len(row["output_ids"]), row["response_start"]
        first = p + (r if r >= 0 else o)
        assert "text" not in record
        assert record["loss_mask"] == [0] * first + [1] * (p + o - first)


def test_specforge_rows_carry_reasoning_and_response_text(folder, tmp_path, kimi_tokenizer, kimi_markers):
    rows = rows_of(folder, KIMI_CONFIG)
    records = export(folder, tmp_path, KIMI_CONFIG, "specforge")
    assert sorted(int(r["id"].rsplit("-", 1)[1]) for r in records) == sorted(
        s for s, row in rows.items() if row["finish_reason"] == "stop")
    for record in records:
        sample_id = int(record["id"].rsplit("-", 1)[1])
        row, shape = rows[sample_id], sample_id % 6
        out = row["output_ids"]
        assert record["conversations"][:-1] == json.loads(row["messages"])
        # tools as a JSON string in every record (datasets <= 4.5 cannot load a column mixing types)
        assert record["tools"] == (row["tools"] or "[]")
        reply = record["conversations"][-1]
        assert reply["role"] == "assistant"
        cut = out.index(kimi_markers.reasoning_close.id) if kimi_markers.reasoning_close.id in out else out.index(
            kimi_markers.tool_section_begin.id)
        assert reply["reasoning_content"] == kimi_tokenizer.decode(out[:cut])
        if shape == 0:
            assert reply["content"] == f"The answer is {2 * sample_id}." and "tool_calls" not in reply
            assert "I consider the numbers carefully." in reply["reasoning_content"]
        elif shape == 1:
            assert reply["content"] == ""
            assert reply["tool_calls"] == [{"id": "functions.get_weather:0", "type": "function",
                                            "function": {"name": "get_weather", "arguments": '{"city": "Paris 0"}'}}]
        elif shape == 3:
            assert [c["function"]["arguments"] for c in reply["tool_calls"]] == ['{"city": "Paris 0"}', '{"city": "Paris 1"}']


def test_specforge_text_re_templates_to_the_sample_when_reasoning_closed(folder, tmp_path, kimi_tokenizer):
    """With the Kimi template, SpecForge's re-rendering gives back the sample's text -- except where
    the model ended reasoning implicitly with a tool section: text cannot say that, ids can."""
    rows = rows_of(folder, KIMI_CONFIG)
    for record in export(folder, tmp_path, KIMI_CONFIG, "specforge"):
        row = rows[int(record["id"].rsplit("-", 1)[1])]
        text = kimi_tokenizer.apply_chat_template(record["conversations"], tools=json.loads(record["tools"]) or None,
                                                  tokenize=False, add_generation_prompt=False)
        original = kimi_tokenizer.decode(row["prompt_ids"] + row["output_ids"], skip_special_tokens=False)
        assert (text == original) == (row["think_end"] >= 0), row["sample_id"]


def test_specforge_qwen_tool_call(folder, tmp_path):
    records = export(folder, tmp_path, QWEN_CONFIG, "specforge")
    reply = next(r["conversations"][-1] for r in records if r["id"] == f"{QWEN_CONFIG}-1")
    # As a serving stack's parsers return it: reasoning stripped, and the content ends where the
    # call begins -- the "\n\n" the model wrote between </think> and <tool_call> is not content.
    assert reply["reasoning_content"] == "Use the tool." and reply["content"] == ""
    call = reply["tool_calls"][0]["function"]
    assert call["name"] == "get_weather" and json.loads(call["arguments"]) == {"city": "Oslo"}


def test_specforge_include_unfinished(folder, tmp_path, capsys):
    records = export(folder, tmp_path, KIMI_CONFIG, "specforge")
    assert "left out 8 rows that did not stop" in capsys.readouterr().out
    assert len(export(folder, tmp_path, KIMI_CONFIG, "specforge", "--include-unfinished")) == len(records) + 8


def test_jsonl_is_the_stored_rows(folder, tmp_path):
    rows = rows_of(folder, QWEN_CONFIG)
    records = export(folder, tmp_path, QWEN_CONFIG, "jsonl")
    assert records == [rows[s] for s in sorted(rows)]


def test_export_from_a_run_directory_matches_the_folder(folder, tmp_path):
    from_folder = export(folder, tmp_path / "a", QWEN_CONFIG, "speculators")
    from_run = export(folder / ".runs" / QWEN_CONFIG, tmp_path / "b", QWEN_CONFIG, "speculators")
    assert from_run == from_folder


def test_train_on_needs_speculators(folder, tmp_path, capsys):
    out = tmp_path / "x.jsonl"
    assert main(["export", str(folder), KIMI_CONFIG, "--format", "jsonl", "--out", str(out), "--train-on", "response"]) == 2
    assert "--train-on applies to --format ids (speculators) only" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("train_on", ["output", "response"])
def test_min_loss_tokens_leaves_out_rows_with_fewer_supervised_tokens_and_counts_them(folder, tmp_path, capsys, train_on):
    rows = rows_of(folder, KIMI_CONFIG)

    def supervised(row):
        p, o, r = len(row["prompt_ids"]), len(row["output_ids"]), row["response_start"]
        return o - (0 if train_on == "output" else (r if r >= 0 else o))

    counts = sorted(supervised(row) for row in rows.values())
    threshold = counts[len(counts) // 2]  # about half the rows have fewer
    few = [sid for sid, row in rows.items() if supervised(row) < threshold]
    assert 0 < len(few) < len(rows)
    capsys.readouterr()
    records = export(folder, tmp_path, KIMI_CONFIG, "speculators", "--train-on", train_on, "--no-text",
                     "--min-loss-tokens", str(threshold))
    kept = {record["metadata"]["sample_id"] for record in records}
    assert kept == set(rows) - set(few)
    assert all(sum(record["loss_mask"]) >= threshold for record in records)
    assert f"left out {len(few)} rows that have fewer supervised tokens than --min-loss-tokens" in capsys.readouterr().out


def test_min_loss_tokens_counts_what_is_left_after_a_truncation(folder, tmp_path):
    rows = rows_of(folder, KIMI_CONFIG)
    prompts = sorted(len(r["prompt_ids"]) for r in rows.values())
    cut = prompts[len(prompts) // 2] + 4  # rows with longer prompts keep fewer than 4 output tokens
    records = export(folder, tmp_path, KIMI_CONFIG, "speculators", "--no-text", "--max-length", str(cut),
                     "--overlong", "truncate", "--min-loss-tokens", "4")
    assert records and all(sum(record["loss_mask"]) >= 4 for record in records)
    expected = {sid for sid, r in rows.items() if min(len(r["prompt_ids"]) + len(r["output_ids"]), cut) - len(r["prompt_ids"]) >= 4}
    assert {record["metadata"]["sample_id"] for record in records} == expected and len(expected) < len(rows)


def test_a_negative_min_loss_tokens_is_named(folder, tmp_path, capsys):
    out = tmp_path / "x.jsonl"
    code = main(["export", str(folder), KIMI_CONFIG, "--format", "ids", "--out", str(out), "--min-loss-tokens", "-1"])
    assert code == 2 and "--min-loss-tokens must be an integer >= 0, got -1" in capsys.readouterr().err
