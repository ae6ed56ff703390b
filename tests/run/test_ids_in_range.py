"""A run refuses what would put an id outside the model's vocabulary into a row, before it generates:
a tokenizer of another model, a replay file that breaks the contract. What was journaled or built
before stays; the vocabulary size is recorded for `validate` and `publish`."""

from __future__ import annotations

import json

import pytest
from datasets import load_dataset

from eagle3_synth.run.directory import RunDirectory

from ..conftest import KIMI_TOKENIZER, QWEN_TOKENIZER, TINY_MODEL
from ..support.cli_runs import marker_ids, run_cli, write_prompts, write_replay


def replay_build(replay, out, capsys, *extra: str, config: str = "B1_glaive", model=KIMI_TOKENIZER) -> tuple[int, str]:
    return run_cli(["build", config, "--model", str(model), "--engine", "replay", "--replay", str(replay),
                    "--out", str(out), *extra], capsys)


def rewrite_line(path, number: int, record: dict) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[number - 1] = json.dumps(record)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def journaled(run_dir) -> list[int]:
    index = RunDirectory(str(run_dir)).scan()
    assert index.duplicates == 0
    return index.sample_ids[index.ok].tolist()


@pytest.mark.parametrize("record, message", [
    ({"sample_id": 2, "output_ids": [1000, 5_000_000], "finish_reason": "length"},
     ":3: sample_id 2: output_ids[1] = 5000000 is outside the model's vocabulary (0 <= id < 2048)"),
    ({"sample_id": 2, "output_ids": [-7, 1000], "finish_reason": "length"},
     ":3: sample_id 2: output_ids[0] = -7 is outside the model's vocabulary (0 <= id < 2048)"),
    ({"sample_id": 2, "output_ids": [1000] * 96, "finish_reason": "length"},  # three times --max-new-tokens
     ":3: sample_id 2: 96 output ids, more than max_new_tokens = 32"),
    ({"sample_id": 2, "output_ids": [], "finish_reason": "stop"},
     ":3: sample_id 2: finish_reason stop with no output ids"),
    ({"sample_id": 2, "output_ids": [1000, 1001], "finish_reason": "stop"},
     ":3: sample_id 2: finish_reason stop but the output ends with 1001, not a stop id"),
    ({"sample_id": 1, "output_ids": [1000], "finish_reason": "length"},
     ":3: sample_id 1 is recorded again (first at line 2); keep one record per sample"),
])
def test_a_bad_replay_file_is_refused_before_the_run_and_the_fixed_one_builds(tmp_path, kimi_tokenizer, capsys,
                                                                               record, message):
    good = tmp_path / "replay.jsonl"
    outputs = write_replay(good, kimi_tokenizer, 6)
    out = tmp_path / "ds"
    assert replay_build(good, out, capsys, config="B3_ultrachat")[0] == 0  # a config built before
    bad = tmp_path / "bad.jsonl"
    bad.write_text(good.read_text(encoding="utf-8"), encoding="utf-8")
    rewrite_line(bad, 3, record)

    code, text = replay_build(bad, out, capsys, "--max-new-tokens", "32")
    assert code == 2
    (line,) = [line for line in text.splitlines() if "error:" in line]
    assert line.startswith(f"eagle3-synth build: error: replay record {bad}{message}")
    assert line.endswith("; nothing was generated: fix the file and run again")
    assert not (out / ".runs" / "B1_glaive").exists()  # nothing claimed: the fixed file starts the run
    assert len(load_dataset(str(out), "B3_ultrachat", split="train")) == 3  # what was built stays

    rewrite_line(bad, 3, {"sample_id": 2, "output_ids": outputs[2], "finish_reason": "length"})
    assert replay_build(bad, out, capsys, "--max-new-tokens", "32")[0] == 0
    assert load_dataset(str(out), "B1_glaive", split="train")["output_ids"] == outputs


def test_a_bad_replay_file_is_the_error_even_where_a_prompt_fails_too(tmp_path, kimi_tokenizer, capsys):
    prompts = tmp_path / "prompts.jsonl"
    write_prompts(prompts, ['{"messages": [{"role": "user", "content": "Hi"}]}', "{not json"])
    good = tmp_path / "replay.jsonl"
    write_replay(good, kimi_tokenizer, 2)
    code, text = replay_build(good, tmp_path / "ds", capsys, "--strict", "--prompts", str(prompts))
    assert code == 2 and "prompts.jsonl:2 (sample_id 1): not valid JSON" in text  # the prompt's error alone
    bad = tmp_path / "bad.jsonl"
    bad.write_text(good.read_text(encoding="utf-8"), encoding="utf-8")
    rewrite_line(bad, 2, {"sample_id": 1, "output_ids": [1000, 5_000_000], "finish_reason": "length"})
    code, text = replay_build(bad, tmp_path / "ds", capsys, "--strict", "--prompts", str(prompts))
    (line,) = [line for line in text.splitlines() if "error:" in line]
    assert code == 2 and line.startswith(f"eagle3-synth build: error: replay record {bad}:2: sample_id 1: ")
    assert not (tmp_path / "ds" / ".runs" / "B1_glaive").exists()  # nothing claimed, nothing staged left

def test_a_leaked_prompt_is_refused_before_the_run(tmp_path, kimi_tokenizer, capsys):
    """An outside engine that echoed the prompt: the prompt's own end-of-turn ids are stop ids inside."""
    good = tmp_path / "replay.jsonl"
    write_replay(good, kimi_tokenizer, 6)
    assert replay_build(good, tmp_path / "probe", capsys)[0] == 0
    prompt = next(p for p in RunDirectory(str(tmp_path / "probe" / ".runs" / "B1_glaive")).iter_prompts()
                  if p.sample_id == 3).prompt_ids
    rewrite_line(good, 4, {"sample_id": 3, "output_ids": prompt + marker_ids(kimi_tokenizer, "Hi", "<|im_end|>")})
    code, text = replay_build(good, tmp_path / "ds", capsys)
    assert code == 2 and f"replay record {good}:4: sample_id 3: stop id " in text
    assert "(the engine should have stopped there); nothing was generated" in text


def test_a_run_stopped_by_a_bad_record_keeps_what_it_journaled(tmp_path, kimi_tokenizer, capsys, monkeypatch):
    """A record only playback finds bad (here the file check is skipped, so playback parses the file and
    meets the bad record): the run stops naming the sample and line, and keeps what it journaled before."""
    import eagle3_synth.run.generate as generate_module

    monkeypatch.setattr(generate_module, "check_replay_file", lambda path, params: None)
    replay = tmp_path / "replay.jsonl"
    outputs = write_replay(replay, kimi_tokenizer, 6)
    rewrite_line(replay, 4, {"sample_id": 3, "output_ids": [1000, 5_000_000], "finish_reason": "length"})
    out, run = tmp_path / "ds", tmp_path / "ds" / ".runs" / "B1_glaive"
    for attempt in range(2):  # the same command again: the journaled samples are not replayed again
        code, text = replay_build(replay, out, capsys)
        assert code == 2
        assert (f"sample_id 3: {replay}:4 returned a result that breaks the contract: output_ids[1] = 5000000 is "
                "outside the model's vocabulary (0 <= id < 2048)") in text
        assert journaled(run) == [0, 1, 2]
    # The fixed file is another replay file (part of the run's fingerprint): refused here, a run of its own.
    rewrite_line(replay, 4, {"sample_id": 3, "output_ids": outputs[3]})
    code, text = replay_build(replay, out, capsys)
    assert code == 2 and "model.replay_file" in text and journaled(run) == [0, 1, 2]
    assert replay_build(replay, out, capsys, "--run-dir", str(tmp_path / "fixed"))[0] == 0
    assert load_dataset(str(out), "B1_glaive", split="train")["output_ids"] == outputs


@pytest.mark.parametrize("model, source", [
    (TINY_MODEL, "vocab_size of the model's config.json"),  # the embedding rows, of the folder meta.model names
    (KIMI_TOKENIZER, "len(tokenizer): no config.json with a vocab_size"),
])
def test_the_vocabulary_size_and_its_source_travel_with_the_data(tmp_path, kimi_tokenizer, capsys, model, source):
    replay = tmp_path / "replay.jsonl"
    write_replay(replay, kimi_tokenizer, 6)
    out = tmp_path / "ds"
    assert replay_build(replay, out, capsys, model=model)[0] == 0
    for info in (out / ".runs" / "B1_glaive" / "run.json", out / "B1_glaive" / "run_info.json"):
        meta = json.loads(info.read_text())["meta"]
        assert meta["vocab_size"] == {"size": 2048, "from": source} and meta["model"] == str(model.resolve())


def test_a_tokenizer_of_another_model_is_refused_before_the_model_loads(tmp_path, capsys, monkeypatch):
    import eagle3_synth.engines.transformers_engine as transformers_engine

    loads = []
    monkeypatch.setattr(transformers_engine, "create", lambda options: loads.append(options))
    out = tmp_path / "ds"
    code, text = run_cli(["build", "B1_glaive", "--model", str(TINY_MODEL), "--tokenizer", str(QWEN_TOKENIZER),
                          "--engine", "transformers", "--out", str(out)], capsys)
    assert code == 2 and loads == []
    (line,) = [line for line in text.splitlines() if "error:" in line]
    assert line.startswith(f"eagle3-synth build: error: the tokenizer {QWEN_TOKENIZER} does not belong to the "
                           f"model {TINY_MODEL}: ")
    for difference in ("the model's bos_token_id 2032 is no token of the tokenizer (1536 tokens)",
                       "the model's eos_token_id is [2033, 2034], the tokenizer's eos_token '<|im_end|>' is 1529",
                       "the model's pad_token_id is 2047, the tokenizer's pad_token '<|endoftext|>' is 1527",
                       "it is not the model folder's own tokenizer (1536 tokens against the model's tokenizer's 2048"):
        assert difference in line
    assert not (out / ".runs" / "B1_glaive").exists()


def test_the_model_folders_own_tokenizer_given_again_is_accepted(tmp_path, kimi_tokenizer, capsys):
    """The Kimi fixture tokenizer is the tiny model's own (same vocabulary and special tokens)."""
    replay = tmp_path / "replay.jsonl"
    write_replay(replay, kimi_tokenizer, 6)
    code, _ = run_cli(["build", "B1_glaive", "--model", str(TINY_MODEL), "--tokenizer", str(KIMI_TOKENIZER),
                       "--engine", "replay", "--replay", str(replay), "--out", str(tmp_path / "ds")], capsys)
    assert code == 0

