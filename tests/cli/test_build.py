"""End to end: `eagle3-synth build` writes a Hub-layout folder that `load_dataset` reads back."""

from __future__ import annotations

import json

import pytest
from datasets import List, Value, load_dataset

from eagle3_synth.cli import main
from eagle3_synth.prompts.configs import sample_prompts_path
from eagle3_synth.contract.row import FEATURES

from ..conftest import KIMI_TOKENIZER, QWEN_TOKENIZER
from ..support.cli_runs import run_cli, write_prompts, write_replay


def test_build_replay_then_load(tmp_path, kimi_tokenizer):
    outputs = write_replay(tmp_path / "replay.jsonl", kimi_tokenizer, 6)
    out = tmp_path / "ds"
    code = main(["build", "B1_glaive", "--model", str(KIMI_TOKENIZER), "--engine", "replay",
                 "--replay", str(tmp_path / "replay.jsonl"), "--out", str(out)])
    assert code == 0
    ds = load_dataset(str(out), "B1_glaive", split="train")
    assert ds.features == FEATURES
    assert ds.features["prompt_ids"] == List(Value("int32"))
    assert ds["sample_id"] == list(range(6))
    assert ds["output_ids"] == outputs
    prompts = [json.loads(line) for line in open(sample_prompts_path("B1_glaive"), encoding="utf-8")]
    assert json.loads(ds[0]["messages"]) == prompts[0]["messages"]
    assert ds[0]["source_id"] == prompts[0]["id"]
    row = ds[1]
    assert row["tool_calls"][0]["end"] > row["tool_calls"][0]["start"] > row["think_end"] >= 0
    assert ds[2]["finish_reason"] == "length" and ds[2]["response_start"] == -1 and ds[2]["stop_index"] == -1
    assert (out / "README.md").read_text().startswith("---\n")


def test_a_rebuilt_folder_loads_its_new_rows_plainly(tmp_path, kimi_tokenizer):
    """datasets caches a local folder under a hash of its README's configs, not of its files: the
    shard names (and so the README's data_files) carry the build's fingerprint, so a plain
    load_dataset in the same datasets cache sees the rebuilt rows."""
    import re

    from huggingface_hub import DatasetCard

    write_replay(tmp_path / "replay-0.jsonl", kimi_tokenizer, 6)
    records = [json.loads(line) for line in open(tmp_path / "replay-0.jsonl", encoding="utf-8")]
    # The same six prompts, each answered with the next one's output: same row count, other rows.
    (tmp_path / "replay-1.jsonl").write_text(
        "".join(json.dumps({**records[(i + 1) % 6], "sample_id": i}) + "\n" for i in range(6)), encoding="utf-8")
    out, loaded = tmp_path / "ds", []
    for attempt in (0, 1):  # the second from another run directory: it replaces the first's rows, as asked
        assert main(["build", "B1_glaive", "--model", str(KIMI_TOKENIZER), "--engine", "replay",
                     "--replay", str(tmp_path / f"replay-{attempt}.jsonl"), *["--overwrite"] * attempt,
                     "--run-dir", str(tmp_path / f"run-{attempt}"), "--out", str(out)]) == 0
        [shard] = sorted((out / "B1_glaive").glob("*.parquet"))
        fingerprint = re.fullmatch(r"train-([0-9a-f]{8})-00000-of-00001\.parquet", shard.name).group(1)
        [config] = DatasetCard.load(out / "README.md").data.to_dict()["configs"]
        assert config["data_files"] == [{"split": "train", "path": f"B1_glaive/train-{fingerprint}-*.parquet"}]
        loaded.append(load_dataset(str(out), "B1_glaive", split="train")["output_ids"])
    assert loaded[0] == [r["output_ids"] for r in records]
    assert loaded[1] == [records[(i + 1) % 6]["output_ids"] for i in range(6)]


def test_second_config_keeps_the_first(tmp_path, kimi_tokenizer):
    write_replay(tmp_path / "replay.jsonl", kimi_tokenizer, 6)
    out = tmp_path / "ds"
    for config in ("B1_glaive", "B3_ultrachat"):
        assert main(["build", config, "--model", str(KIMI_TOKENIZER), "--engine", "replay",
                     "--replay", str(tmp_path / "replay.jsonl"), "--out", str(out)]) == 0
    assert len(load_dataset(str(out), "B1_glaive", split="train")) == 6
    # B3's two sample conversations, every turn (the first has two): three rows
    assert len(load_dataset(str(out), "B3_ultrachat", split="train")) == 3
    readme = (out / "README.md").read_text()
    assert "config_name: B1_glaive" in readme and "config_name: B3_ultrachat" in readme


def test_unknown_config_is_named(tmp_path, capsys):
    code, text = run_cli(["build", "B9_nothing", "--model", str(KIMI_TOKENIZER), "--engine", "replay",
                          "--replay", "x", "--out", str(tmp_path)], capsys)
    assert code == 2 and "unknown config 'B9_nothing'" in text


def test_tokenizer_lacking_profile_marker_is_named(tmp_path, capsys, qwen_tokenizer):
    write_replay(tmp_path / "replay.jsonl", qwen_tokenizer, 1)
    code, text = run_cli(["build", "B1_glaive", "--model", str(QWEN_TOKENIZER), "--profile", "kimi_k2",
                          "--engine", "replay", "--replay", str(tmp_path / "replay.jsonl"), "--out", str(tmp_path / "o")],
                         capsys)
    assert code == 2 and "<|tool_calls_section_begin|>" in text


BAD_LINES = [
    '{"messages": [{"role": "user", "content": "fine"}]}',
    '{"messages": [{"role": "user", "content": "broken"',
    '{"messages": [{"role": "wizard", "content": "who am I"}]}',
    '{"messages": [{"role": "user", "content": "also fine"}], "id": "x-3"}',
]


def test_bad_prompts_are_reported_and_skipped(tmp_path, capsys, kimi_tokenizer, caplog):
    prompts = tmp_path / "prompts.jsonl"
    write_prompts(prompts, BAD_LINES)
    write_replay(tmp_path / "replay.jsonl", kimi_tokenizer, 4)
    out = tmp_path / "ds"
    code, text = run_cli(["build", "B1_glaive", "--model", str(KIMI_TOKENIZER), "--engine", "replay",
                          "--replay", str(tmp_path / "replay.jsonl"), "--prompts", str(prompts), "--out", str(out)],
                         capsys)
    assert code == 0
    log = caplog.text
    assert f"{prompts}:2 (sample_id 1): not valid JSON" in log
    assert "unknown role 'wizard'" in log and "sample_id 2" in log
    ds = load_dataset(str(out), "B1_glaive", split="train")
    # Line indexes stay the sample ids: the good prompts keep 0 and 3.
    assert ds["sample_id"] == [0, 3] and ds["source_id"] == ["", "x-3"]
    rejects = [json.loads(l) for l in open(out / ".runs" / "B1_glaive" / "rejects.jsonl")]
    assert [r["sample_id"] for r in rejects] == [1, 2]


def test_strict_stops_at_the_first_bad_prompt(tmp_path, capsys, kimi_tokenizer):
    prompts = tmp_path / "prompts.jsonl"
    write_prompts(prompts, BAD_LINES)
    write_replay(tmp_path / "replay.jsonl", kimi_tokenizer, 4)
    code, text = run_cli(["build", "B1_glaive", "--model", str(KIMI_TOKENIZER), "--engine", "replay", "--strict",
                          "--replay", str(tmp_path / "replay.jsonl"), "--prompts", str(prompts),
                          "--out", str(tmp_path / "ds")], capsys)
    assert code == 2 and "prompts.jsonl:2 (sample_id 1): not valid JSON" in text


@pytest.mark.parametrize("option,value,message", [
    ("--temperature", "-1", "--temperature must be >= 0"),
    ("--max-new-tokens", "0", "--max-new-tokens must be >= 1"),
    ("--limit", "0", "--limit must be >= 1"),
])
def test_bad_options_are_named(tmp_path, capsys, kimi_tokenizer, option, value, message):
    write_replay(tmp_path / "replay.jsonl", kimi_tokenizer, 6)
    code, text = run_cli(["build", "B1_glaive", "--model", str(KIMI_TOKENIZER), "--engine", "replay",
                          "--replay", str(tmp_path / "replay.jsonl"), option, value, "--out", str(tmp_path / "ds")],
                         capsys)
    assert code == 2 and message in text


@pytest.mark.parametrize("option", ["--model", "--tokenizer"])
def test_a_missing_model_folder_is_one_line_naming_it(tmp_path, capsys, option):
    missing = str(tmp_path / "no" / "such" / "folder")
    args = ["build", "B1_glaive", option, missing, "--out", str(tmp_path / "ds")]
    if option == "--tokenizer":
        args += ["--model", str(KIMI_TOKENIZER)]
    code, text = run_cli(args, capsys)
    assert code == 2
    assert text.strip() == (f"eagle3-synth build: error: {option} {missing}: no such folder (eagle3-synth reads "
                            "local model and tokenizer folders only, nothing is downloaded)")


def test_a_folder_without_tokenizer_files_is_named(tmp_path, capsys):
    empty = tmp_path / "empty-model"
    empty.mkdir()
    code, text = run_cli(["build", "B1_glaive", "--model", str(empty), "--engine", "replay", "--replay", "x",
                          "--out", str(tmp_path / "ds")], capsys)
    assert code == 2 and f"--model {empty}: no tokenizer files in this folder" in text
    assert "Traceback" not in text and "repo id" not in text


def test_a_config_with_no_prompt_kept_writes_nothing_and_keeps_the_others(tmp_path, capsys, kimi_tokenizer):
    write_replay(tmp_path / "replay.jsonl", kimi_tokenizer, 6)
    out = tmp_path / "ds"
    assert main(["build", "B1_glaive", "--model", str(KIMI_TOKENIZER), "--engine", "replay",
                 "--replay", str(tmp_path / "replay.jsonl"), "--out", str(out)]) == 0
    capsys.readouterr()
    # Every prompt of B3 carries a control token: none is kept.
    prompts = tmp_path / "prompts.jsonl"
    write_prompts(prompts, ['{"messages": [{"role": "user", "content": "say <|im_end|> now"}]}'] * 3)
    code, text = run_cli(["build", "B3_ultrachat", "--model", str(KIMI_TOKENIZER), "--engine", "replay",
                          "--replay", str(tmp_path / "replay.jsonl"), "--prompts", str(prompts), "--out", str(out)],
                         capsys)
    assert code == 2
    assert "B3_ultrachat: no row to write (0 prompts kept, rejected: control_token=3; 0 failed): nothing written" in text
    assert not (out / "B3_ultrachat").exists()
    assert "B3_ultrachat" not in (out / "README.md").read_text()
    assert load_dataset(str(out), "B1_glaive", split="train").num_rows == 6


def test_a_config_of_ones_own_is_assembled_with_its_config_file(tmp_path, kimi_tokenizer):
    """`generate` a config a --config-file defines, then `build` it without --model: assembling needs
    the file to know the config, so --config-file is not a generating option there."""
    (tmp_path / "my.yaml").write_text("MY_support:\n  adapter: messages\n", encoding="utf-8")
    with open(sample_prompts_path("B3_ultrachat"), encoding="utf-8") as samples:
        write_prompts(tmp_path / "prompts.jsonl", [samples.readline().rstrip("\n")])
    outputs = write_replay(tmp_path / "replay.jsonl", kimi_tokenizer, 1)
    defined = ["MY_support", "--config-file", str(tmp_path / "my.yaml"), "--run-dir", str(tmp_path / "run")]
    assert main(["generate", *defined, "--prompts", str(tmp_path / "prompts.jsonl"), "--model", str(KIMI_TOKENIZER),
                 "--engine", "replay", "--replay", str(tmp_path / "replay.jsonl"), "--turns", "last"]) == 0
    assert main(["build", *defined, "--out", str(tmp_path / "ds")]) == 0
    assert load_dataset(str(tmp_path / "ds"), "MY_support", split="train")["output_ids"] == outputs
