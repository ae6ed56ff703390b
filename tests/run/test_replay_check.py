"""The replay file's check runs in a thread beside prompt preparation (run/replay_check.py), with the
outcomes of a check run first: the same records kept, a bad file refused with its own message before
anything is claimed, whatever else fails after it; preparation stops once the check has failed."""

from __future__ import annotations

import json
import threading

import pytest

from eagle3_synth.engines import SamplingParams
from eagle3_synth.engines.replay import CheckStopped, check_replay_file
from eagle3_synth.errors import ConfigError
from eagle3_synth.run import replay_check as replay_check_module
from eagle3_synth.run.replay_check import ReplayCheck

from ..conftest import KIMI_TOKENIZER
from ..support.cli_runs import run_cli, write_prompts, write_replay

STOP = (2034, 2033)  # <|im_end|>, [EOS] of the kimi fixture tokenizer
PARAMS = SamplingParams(max_new_tokens=8, temperature=0.0, stop_token_ids=STOP, vocab_size=2048)
GOOD = [{"sample_id": 0, "output_ids": [1000, STOP[0]]}, {"sample_id": 1, "output_ids": [5, 6], "finish_reason": "length"}]
BAD = [*GOOD, {"sample_id": 2, "output_ids": [1000, 5_000_000], "finish_reason": "length"}]
REFUSAL = "replay record {path}:3: sample_id 2: output_ids[1] = 5000000 is outside the model's vocabulary"


def write_records(path, records: list[dict]) -> str:
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return str(path)


def test_the_records_kept_are_those_the_check_keeps_run_first(tmp_path):
    path = write_records(tmp_path / "replay.jsonl", GOOD)
    check = ReplayCheck(path, PARAMS, keep=True)
    alone = check_replay_file(path, PARAMS, keep=True)
    try:
        kept = check.result()
        assert kept.records == alone.records
        assert [kept.record(i) for i in (0, 1)] == [alone.record(i) for i in (0, 1)]
    finally:
        check.close()
        alone.close()
    assert kept._spill.closed


def test_without_a_replay_file_nothing_runs():
    check = ReplayCheck(None, PARAMS, keep=True)
    assert check.result() is None
    check.raise_if_refused()
    with pytest.raises(ValueError, match="later"), check.errors_after():
        raise ValueError("later")
    check.close()


def test_an_error_after_the_check_gives_way_to_a_bad_files_refusal(tmp_path):
    path = write_records(tmp_path / "bad.jsonl", BAD)
    check = ReplayCheck(path, PARAMS, keep=True)
    with pytest.raises(ConfigError) as error, check.errors_after():
        raise ValueError("a template that fails, found while the check ran")
    assert str(error.value).startswith(REFUSAL.format(path=path))
    assert error.value.__cause__ is None and error.value.__suppress_context__
    with pytest.raises(ConfigError, match="nothing was generated"):
        check.raise_if_refused()
    with pytest.raises(ConfigError, match="nothing was generated"):
        check.result()
    check.close()


def test_an_error_after_a_good_check_stands(tmp_path):
    check = ReplayCheck(write_records(tmp_path / "replay.jsonl", GOOD), PARAMS, keep=True)
    with pytest.raises(ValueError, match="later"), check.errors_after():
        raise ValueError("later")
    check.close()


def test_ctrl_c_stops_the_check_without_waiting_for_it(tmp_path, monkeypatch):
    started, release = threading.Event(), threading.Event()
    check_file = replay_check_module.check_replay_file

    def held(path, params, *, keep, stop):  # the check, held at its start until the test lets it go
        started.set()
        release.wait(10)
        return check_file(path, params, keep=keep, stop=stop)

    monkeypatch.setattr(replay_check_module, "check_replay_file", held)
    check = ReplayCheck(write_records(tmp_path / "replay.jsonl", GOOD), PARAMS, keep=True)
    started.wait(10)
    with pytest.raises(KeyboardInterrupt), check.errors_after():
        raise KeyboardInterrupt  # returns at once: the check is still held
    release.set()
    with pytest.raises(CheckStopped):
        check.result()  # stopped at its first line
    check.raise_if_refused()  # a stop asked for is no refusal
    check.close()


def test_a_stopped_check_keeps_nothing(tmp_path):
    stop = threading.Event()
    stop.set()
    with pytest.raises(CheckStopped):
        check_replay_file(write_records(tmp_path / "replay.jsonl", GOOD), PARAMS, keep=True, stop=stop)


def replay_build(tmp_path, replay, capsys, *extra: str) -> tuple[int, str]:
    return run_cli(["build", "B1_glaive", "--model", str(KIMI_TOKENIZER), "--engine", "replay", "--replay", str(replay),
                    "--out", str(tmp_path / "ds"), *extra], capsys)


def test_a_bad_replay_file_is_the_error_even_where_a_prompt_fails_too(tmp_path, capsys, kimi_tokenizer):
    prompts = tmp_path / "prompts.jsonl"
    write_prompts(prompts, ['{"messages": [{"role": "user", "content": "Hi"}]}', "{not json"])
    good = tmp_path / "replay.jsonl"
    write_replay(good, kimi_tokenizer, 2)
    code, text = replay_build(tmp_path, good, capsys, "--strict", "--prompts", str(prompts))
    assert code == 2 and "prompts.jsonl:2 (sample_id 1): not valid JSON" in text  # the prompt's error alone
    bad = write_records(tmp_path / "bad.jsonl", BAD)
    code, text = replay_build(tmp_path, bad, capsys, "--strict", "--prompts", str(prompts))
    (line,) = [line for line in text.splitlines() if "error:" in line]
    assert code == 2 and line.startswith(f"eagle3-synth build: error: {REFUSAL.format(path=bad)}")
    assert line.endswith("; nothing was generated: fix the file and run again")
    assert not (tmp_path / "ds" / ".runs" / "B1_glaive").exists()  # nothing claimed, nothing staged left


def test_preparation_stops_once_the_check_has_refused_the_file(tmp_path, capsys, monkeypatch):
    polls: list[int] = []
    refused = ReplayCheck.raise_if_refused

    def after_the_check(self):  # the check has ended before the first prompt is staged
        polls.append(1)
        self._wait()
        refused(self)

    monkeypatch.setattr(ReplayCheck, "raise_if_refused", after_the_check)
    bad = write_records(tmp_path / "bad.jsonl", BAD)
    code, text = replay_build(tmp_path, bad, capsys)
    assert code == 2 and REFUSAL.format(path=bad) in text
    assert polls == [1]  # the bundled B1_glaive prompts: the first one staged stopped preparation
    assert not (tmp_path / "ds" / ".runs" / "B1_glaive").exists()
