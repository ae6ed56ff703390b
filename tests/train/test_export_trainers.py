"""What each trainer reads: `ids` (token-exact), SpecForge's and ModelOpt's conversations, the length policy."""

from __future__ import annotations

import json

import pytest
from datasets import load_dataset

from eagle3_synth.cli import main

from ..conftest import KIMI_TOKENIZER
from ..support.built_datasets import KIMI_CONFIG, checks_dataset, encode_parts, write_prompts


@pytest.fixture(scope="module")
def folder(tmp_path_factory, kimi_tokenizer, qwen_tokenizer):
    return checks_dataset(tmp_path_factory, kimi_tokenizer, qwen_tokenizer)


def export(source, tmp_path, config, fmt, *extra: str) -> tuple[list[dict], str]:
    out = tmp_path / f"{config}-{fmt}.jsonl"
    assert main(["export", str(source), config, "--format", fmt, "--out", str(out), *extra]) == 0
    return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()], str(out)


def test_ids_is_the_speculators_format(folder, tmp_path):
    ids, _ = export(folder, tmp_path / "a", KIMI_CONFIG, "ids")
    speculators, _ = export(folder, tmp_path / "b", KIMI_CONFIG, "speculators")
    assert ids == speculators and len({r["id"] for r in ids}) == len(ids)


def test_max_length_drops_or_truncates_and_counts(folder, tmp_path, capsys):
    rows = load_dataset(str(folder), KIMI_CONFIG, split="train")
    totals = [p + o for p, o in zip(rows["prompt_tokens"], rows["completion_tokens"])]
    limit = sorted(totals)[len(totals) // 2]
    longer = sum(t > limit for t in totals)
    assert 0 < longer < len(totals)
    capsys.readouterr()
    dropped, _ = export(folder, tmp_path / "a", KIMI_CONFIG, "ids", "--max-length", str(limit), "--no-text")
    assert len(dropped) == len(totals) - longer and all(len(r["input_ids"]) <= limit for r in dropped)
    assert f"left out {longer} rows that are longer than --max-length" in capsys.readouterr().out
    cut, _ = export(folder, tmp_path / "b", KIMI_CONFIG, "ids", "--max-length", str(limit), "--overlong", "truncate",
                    "--no-text")
    assert len(cut) == len(totals) and f"{longer} rows truncated at --max-length" in capsys.readouterr().out
    for record in cut:
        row = rows[next(i for i, s in enumerate(rows["sample_id"]) if s == record["metadata"]["sample_id"])]
        full = row["prompt_ids"] + row["output_ids"]
        mask = [0] * len(row["prompt_ids"]) + [1] * len(row["output_ids"])
        assert record["input_ids"] == full[:limit] and record["loss_mask"] == mask[:limit]
    # Truncating a conversation would invent a turn ending: refused, naming the options.
    out = tmp_path / "x.jsonl"
    assert main(["export", str(folder), KIMI_CONFIG, "--format", "specforge", "--out", str(out), "--max-length", "9",
                 "--overlong", "truncate"]) == 2
    assert "--overlong truncate applies to --format ids only" in capsys.readouterr().err and not out.exists()


@pytest.fixture(scope="module")
def eos_folder(tmp_path_factory, kimi_tokenizer):
    """Kimi outputs ending on <|im_end|> (the template's end of turn), [EOS] (an optional stop) or a cut."""
    root = tmp_path_factory.mktemp("eos")
    write_prompts(root / "prompts.jsonl", 3)
    endings = [("Fine.", "<|im_end|>"), ("Fine.", "[EOS]"), ("Fine and",)]
    replay = [{"sample_id": i, "output_ids": encode_parts(kimi_tokenizer, "Think.", "</think>", *parts),
               "finish_reason": "stop" if len(parts) > 1 else "length"} for i, parts in enumerate(endings)]
    (root / "replay.jsonl").write_text("".join(json.dumps(r) + "\n" for r in replay), encoding="utf-8")
    assert main(["build", KIMI_CONFIG, "--model", str(KIMI_TOKENIZER), "--engine", "replay", "--replay",
                 str(root / "replay.jsonl"), "--prompts", str(root / "prompts.jsonl"), "--out", str(root / "ds")]) == 0
    return root / "ds"


def test_conversation_formats_leave_out_other_stops_and_cut_rows_with_counts(eos_folder, tmp_path, capsys):
    capsys.readouterr()
    records, _ = export(eos_folder, tmp_path, KIMI_CONFIG, "specforge")
    assert [r["id"] for r in records] == [f"{KIMI_CONFIG}-0"]
    out = capsys.readouterr().out
    assert "left out 1 row that did not stop (--include-unfinished keeps them)" in out
    assert ("left out 1 row that stopped on a token that is not the template's end of turn "
            "(--include-other-stops keeps them)") in out
    kept, _ = export(eos_folder, tmp_path / "b", KIMI_CONFIG, "modelopt", "--include-other-stops")
    assert [r["conversation_id"] for r in kept] == [f"{KIMI_CONFIG}-0", f"{KIMI_CONFIG}-1"]


def test_specforge_writes_json_string_arguments_and_tools_that_load_as_one_type(folder, tmp_path):
    records, path = export(folder, tmp_path, KIMI_CONFIG, "specforge")
    assert any(r["tools"] != "[]" for r in records) and all(isinstance(r["tools"], str) for r in records)
    for record in records:
        for message in record["conversations"]:
            for call in message.get("tool_calls") or ():
                assert isinstance(call["function"]["arguments"], str)
    loaded = load_dataset("json", data_files=path, split="train")
    assert loaded.features["tools"].dtype == "string" and len(loaded) == len(records)


def test_modelopt_ids_are_unique_non_empty_strings_and_tools_are_counted(folder, tmp_path, capsys):
    capsys.readouterr()
    records, _ = export(folder, tmp_path, KIMI_CONFIG, "modelopt")
    ids = [r["conversation_id"] for r in records]
    assert all(isinstance(i, str) and i for i in ids) and len(set(ids)) == len(ids)
    assert set(records[0]) == {"conversation_id", "messages"}
    with_tools = sum(1 for r in load_dataset(str(folder), KIMI_CONFIG, split="train")
                     if r["tools"] and r["finish_reason"] == "stop")
    assert f"{with_tools} rows had tools, left out of the records: ModelOpt renders none" in capsys.readouterr().out
