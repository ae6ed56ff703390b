"""Prompt preparation: seeded selection under a cap, hygiene with a rejects file, the prompt identity,
and `eagle3-synth build CONFIG --source-file ...` end to end for every config B1-B8."""

from __future__ import annotations

import json
import logging
import shutil
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
from datasets import load_dataset

from eagle3_synth.prompts import adapters as sources
from eagle3_synth.cli import main
from eagle3_synth.prompts.configs import BUILTIN_CONFIGS
from eagle3_synth.errors import ConfigError, PromptError
from eagle3_synth.prompts.selection import PromptSelection, seeded_candidates
from eagle3_synth.prompts.prepare import model_context_length
from eagle3_synth.prompts.readers import iter_source_files

from ..conftest import KIMI_TOKENIZER, QWEN_TOKENIZER
from ..support.prompt_cases import SOURCES, fixture_files, options, prepare, write_replay

# -- seeded selection --------------------------------------------------------------------------------

def numbered(count: int):
    def read():
        from eagle3_synth.prompts.readers import SourceRecord

        return (SourceRecord("numbers", i, {"n": i}) for i in range(count))
    return read


def order(seed: int, pool: int, count: int = 40) -> list[tuple[int, str]]:
    from eagle3_synth.prompts.conversation import Conversation

    found = seeded_candidates(numbered(count), lambda r: Conversation([{"role": "user", "content": str(r["n"])}]),
                              lambda r: f"n{r['n']}", seed, pool)
    return [(c.sample_id, c.item.messages[0]["content"]) for c in found]


def test_seeded_order_is_a_fixed_permutation_whatever_the_pool():
    full = order(seed=0, pool=1000)
    assert [sample_id for sample_id, _ in full] == list(range(40))
    assert sorted(int(n) for _, n in full) == list(range(40))
    assert [n for _, n in full] != [str(i) for i in range(40)]  # shuffled
    assert order(seed=0, pool=1000) == full  # same seed, same order
    assert order(seed=0, pool=3) == full  # a small pool reads the source again and goes on where it stopped
    assert [n for _, n in order(seed=1, pool=1000)] != [n for _, n in full]


def test_cap_takes_a_prefix_of_the_seeded_order(kimi_tokenizer):
    everything, _ = prepare(options("B6_sharegpt"), kimi_tokenizer)
    two, _ = prepare(options("B6_sharegpt", limit=2), kimi_tokenizer)
    assert len(everything) == 5
    assert [p.source_id for p in two] == [p.source_id for p in everything[:2]]
    assert [p.sample_id for p in two] == [p.sample_id for p in everything[:2]]
    other_seed, _ = prepare(options("B6_sharegpt", selection=PromptSelection(source_files=tuple(fixture_files("B6_sharegpt")), seed=3)),
                            kimi_tokenizer)
    assert sorted(p.source_id for p in other_seed) == sorted(p.source_id for p in everything)
    assert [p.source_id for p in other_seed] != [p.source_id for p in everything]


def test_sample_ids_are_ranks_and_rejects_leave_gaps(kimi_tokenizer):
    prepared, rejects = prepare(options("B1_glaive"), kimi_tokenizer)
    kept = [p.sample_id for p in prepared]
    gaps = [r["sample_id"] for r in rejects]
    assert kept == sorted(kept) and not set(kept) & set(gaps)
    assert sorted(kept + gaps) == list(range(15))  # every record of the file has exactly one sample_id
    # Records without an id column are named by their place in the file.
    assert {p.source_id for p in prepared} <= {f"glaive-function-calling-v2.json#{i}" for i in range(15)}


def test_scan_limit_reads_only_the_first_records(kimi_tokenizer):
    selection = PromptSelection(source_files=tuple(fixture_files("B1_glaive")), scan_limit=3)
    prepared, rejects = prepare(options("B1_glaive", selection=selection), kimi_tokenizer)
    assert sorted(p.source_id for p in prepared) == [f"glaive-function-calling-v2.json#{i}" for i in range(3)]
    assert rejects == []


# -- hygiene -----------------------------------------------------------------------------------------

def test_duplicates_keep_the_first_in_prompt_list_order(kimi_tokenizer):
    prepared, rejects = prepare(options("B8_opencodereasoning"), kimi_tokenizer)
    duplicate = next(r for r in rejects if r["reason"] == "duplicate")
    first = next(p for p in prepared if p.messages == [{"role": "user", "content": duplicate_text()}])
    assert duplicate["detail"].endswith(f"same prompt ids as sample_id {first.sample_id}")
    assert first.sample_id < duplicate["sample_id"]
    assert {first.source_id, duplicate["source_id"]} == {"0a1b2c3d4e5f", "2c3d4e5f6071"}


def duplicate_text() -> str:
    return json.loads((SOURCES / "B8_opencodereasoning" / "split_0.jsonl").read_text(encoding="utf-8").splitlines()[0])["input"]


def test_too_long_prompts_are_skipped_with_the_numbers(kimi_tokenizer):
    everything, _ = prepare(options("B3_ultrachat"), kimi_tokenizer)
    lengths = sorted(len(p.prompt_ids) for p in everything)
    limit = lengths[1]  # keeps the two shortest
    prepared, rejects = prepare(options("B3_ultrachat", context_length=100 + limit, max_new_tokens=100), kimi_tokenizer)
    assert sorted(len(p.prompt_ids) for p in prepared) == lengths[:2]
    too_long = [r for r in rejects if r["reason"] == "too_long"]
    assert len(too_long) == 1
    assert f"{lengths[2]} prompt tokens > {limit} (the model's context minus max_new_tokens)" in too_long[0]["detail"]


def test_context_must_leave_room_for_the_output():
    with pytest.raises(ConfigError, match="leaves no room for prompts with --max-new-tokens 4096"):
        options("B3_ultrachat", context_length=2048, max_new_tokens=4096)


@pytest.mark.parametrize("tokenizer_path", [KIMI_TOKENIZER, QWEN_TOKENIZER])
def test_control_tokens_in_text_are_rejected(tokenizer_path, kimi_tokenizer, qwen_tokenizer):
    tokenizer = kimi_tokenizer if tokenizer_path == KIMI_TOKENIZER else qwen_tokenizer
    prepared, rejects = prepare(options("B1_glaive", tokenizer=tokenizer_path), tokenizer)
    control = [r for r in rejects if r["reason"] == "control_token"]
    assert [r["source_id"] for r in control] == ["glaive-function-calling-v2.json#13"]
    assert "messages[1] contains '<|im_end|>', which the tokenizer reads as a control token" in control[0]["detail"]


def test_qwen_reads_think_tags_in_text_as_control_tokens(qwen_tokenizer, kimi_tokenizer, tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"id": "t", "input": "Explain what <tool_call> does in Hermes prompts."}) + "\n",
                    encoding="utf-8")
    assert prepare(options("B8_opencodereasoning", [str(path)], tokenizer=QWEN_TOKENIZER), qwen_tokenizer)[0] == []
    # the Kimi fixture has no such token: the same text is a normal prompt there
    assert len(prepare(options("B8_opencodereasoning", [str(path)]), kimi_tokenizer)[0]) == 1


def test_strict_fails_at_the_first_reject_naming_the_record(kimi_tokenizer):
    with pytest.raises(PromptError, match=r"train\.jsonl:\d \(sample_id \d\): .*--strict"):
        prepare(options("B7_magpie", strict=True), kimi_tokenizer)


def test_context_length_from_config_json(tmp_path):
    (tmp_path / "flat").mkdir()
    (tmp_path / "flat" / "config.json").write_text(json.dumps({"max_position_embeddings": 40960}))
    (tmp_path / "nested").mkdir()
    (tmp_path / "nested" / "config.json").write_text(json.dumps({"text_config": {"max_position_embeddings": 262144}}))
    assert model_context_length(str(tmp_path / "flat")) == 40960
    assert model_context_length(None, str(tmp_path / "nested")) == 262144
    assert model_context_length(str(KIMI_TOKENIZER)) is None  # a tokenizer folder has no config.json


# -- identity ----------------------------------------------------------------------------------------

def test_prompt_identity_changes_with_everything_that_decides_the_list(tmp_path):
    copy = tmp_path / "glaive.json"
    shutil.copy(fixture_files("B1_glaive")[0], copy)
    base = PromptSelection(source_files=(str(copy),))
    identity = options("B1_glaive", selection=base).plan.identity()
    assert options("B1_glaive", selection=base).plan.identity() == identity
    variants = [
        options("B1_glaive", selection=base, limit=5),
        options("B1_glaive", selection=PromptSelection(source_files=(str(copy),), seed=1)),
        options("B1_glaive", selection=PromptSelection(source_files=(str(copy),), scan_limit=10)),
        options("B1_glaive", selection=PromptSelection(from_source=True)),
        options("B1_glaive", selection=PromptSelection(from_source=True, revision="v1")),
        options("B3_ultrachat", selection=base),  # another adapter
    ]
    identities = [o.plan.identity() for o in variants]
    assert all(other != identity for other in identities)
    assert identities[3] != identities[4]
    copy.write_text(copy.read_text(encoding="utf-8").replace("pizza", "pasta"), encoding="utf-8")
    assert options("B1_glaive", selection=base).plan.identity() != identity


# -- the command line --------------------------------------------------------------------------------

EXPECTED_REJECTS = {
    "B1_glaive": {"unparseable": 6, "control_token": 1},
    "B2_hermes_fc": {"unparseable": 2},
    "B3_ultrachat": {"unparseable": 3},
    "B4_mixturethoughts": {"unparseable": 1},
    "B5_openthoughts": {"unparseable": 1},
    "B6_sharegpt": {"unparseable": 3},
    "B7_magpie": {"unparseable": 1, "duplicate": 1},
    "B8_opencodereasoning": {"unparseable": 2, "duplicate": 1},
}


def build(config: str, out: Path, replay: Path, *extra: str) -> int:
    # One turn per conversation: these tests are about the adapters' prompts (tests/run/test_conversations.py
    # has whole conversations).
    args = ["build", config, "--turns", "last", "--model", str(KIMI_TOKENIZER), "--engine", "replay", "--replay", str(replay),
            "--out", str(out), *extra]
    for path in fixture_files(config):
        args += ["--source-file", path]
    return main(args)


@pytest.mark.parametrize("config", list(BUILTIN_CONFIGS))
def test_every_config_builds_from_its_source_files(config, tmp_path, kimi_tokenizer, caplog):
    caplog.set_level(logging.INFO, logger="eagle3_synth.prompts.prepare")
    write_replay(tmp_path / "replay.jsonl", kimi_tokenizer, 20)
    assert build(config, tmp_path / "ds", tmp_path / "replay.jsonl") == 0
    rejects = [json.loads(line) for line in open(tmp_path / "ds" / ".runs" / config / "rejects.jsonl", encoding="utf-8")]
    assert Counter(r["reason"] for r in rejects) == EXPECTED_REJECTS[config]
    assert all(r["source_id"] and r["detail"] for r in rejects)
    ds = load_dataset(str(tmp_path / "ds"), config, split="train")
    records = sum(1 for _ in iter_source_files(fixture_files(config)))
    assert len(ds) + len(rejects) == records
    assert sorted(list(ds["sample_id"]) + [r["sample_id"] for r in rejects]) == list(range(records))
    # what was templated is the adapter's conversation of the named record
    adapter = sources.get_adapter(BUILTIN_CONFIGS[config].adapter)
    by_id = {}
    for record in iter_source_files(fixture_files(config)):
        if record.error is None:
            by_id.setdefault(adapter.source_id(record.record) or record.locator, record.record)
    for row in ds:
        assert json.loads(row["messages"]) == adapter.convert(by_id[row["source_id"]]).messages
    counts = ", ".join(f"{k}={v}" for k, v in EXPECTED_REJECTS[config].items())
    assert f"{config}: {len(ds)} prompts kept of {records} records considered; rejected: " in caplog.text
    assert all(f"{reason}={count}" in caplog.text for reason, count in EXPECTED_REJECTS[config].items()), counts


def test_resume_reads_the_run_prompts_not_the_source(tmp_path, kimi_tokenizer, monkeypatch):
    write_replay(tmp_path / "replay.jsonl", kimi_tokenizer, 20)
    assert build("B6_sharegpt", tmp_path / "ds", tmp_path / "replay.jsonl", "--limit", "2") == 0
    first = load_dataset(str(tmp_path / "ds"), "B6_sharegpt", split="train")

    def refuse(record):
        raise AssertionError("a resumed run converted a source record again")

    monkeypatch.setitem(sources.ADAPTERS, "sharegpt", replace(sources.ADAPTERS["sharegpt"], _convert=refuse))
    assert build("B6_sharegpt", tmp_path / "ds", tmp_path / "replay.jsonl", "--limit", "2") == 0
    again = load_dataset(str(tmp_path / "ds"), "B6_sharegpt", split="train")
    assert list(again["sample_id"]) == list(first["sample_id"]) and list(again["prompt_ids"]) == list(first["prompt_ids"])


def test_a_changed_source_file_is_not_mixed_into_a_run(tmp_path, kimi_tokenizer, capsys):
    write_replay(tmp_path / "replay.jsonl", kimi_tokenizer, 20)
    source = tmp_path / "split_0.jsonl"
    shutil.copy(fixture_files("B8_opencodereasoning")[0], source)
    args = ["build", "B8_opencodereasoning", "--model", str(KIMI_TOKENIZER), "--engine", "replay",
            "--replay", str(tmp_path / "replay.jsonl"), "--out", str(tmp_path / "ds"), "--source-file", str(source)]
    assert main(args) == 0
    with open(source, "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"id": "new", "input": "A new problem."}) + "\n")
    assert main(args) == 2
    assert "started with different settings" in capsys.readouterr().err


@pytest.mark.parametrize("extra,message", [
    (["--scan-limit", "0"], "--scan-limit must be >= 1"),
    (["--max-context", "0"], "--max-context must be >= 1"),
    (["--source-revision", "v1"], "--source-revision applies to --from-source only"),
])
def test_bad_prompt_options_are_named(tmp_path, capsys, extra, message):
    code = main(["build", "B1_glaive", "--model", str(KIMI_TOKENIZER), "--engine", "replay", "--replay", "x",
                 "--out", str(tmp_path), *extra])
    assert code == 2 and message in capsys.readouterr().err


def test_source_options_exclude_each_other(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["build", "B1_glaive", "--model", str(KIMI_TOKENIZER), "--prompts", "p.jsonl", "--from-source",
              "--out", str(tmp_path)])
    assert "not allowed with argument" in capsys.readouterr().err
