"""The run directory: journal files, which result counts, torn lines, fsspec URLs, errors, progress."""

from __future__ import annotations

import io
import json
import logging
from collections import Counter

import fsspec
import pytest

from eagle3_synth.cli import main
from eagle3_synth.engines.base import GenerationResult
from eagle3_synth.errors import ConfigError
from eagle3_synth.run.journal import JOURNAL_DIR, JournalWriter
from eagle3_synth.run.directory import PROMPTS_FILE, RunDirectory
from eagle3_synth.run.shards import Shard
from eagle3_synth.run.progress import Progress, RunSummary
from eagle3_synth.contract.row import PreparedPrompt

from ..support.built_datasets import KIMI_CONFIG
from ..support.cli_processes import SAMPLES, config_rows, replay_inputs


def result(sample_id: int, output_ids: list[int], finish_reason: str = "stop", error: str | None = None,
           cached: int = 0) -> GenerationResult:
    return GenerationResult(sample_id, output_ids, finish_reason, prompt_tokens=10,
                            completion_tokens=len(output_ids), cached_tokens=cached, error=error)


def write_session(run: RunDirectory, session: str, results: list[GenerationResult]) -> str:
    """One journal file with a chosen session name (names decide which duplicate is kept)."""
    header = {"journal": 1, "fingerprint": "f" * 16, "session": session, "shard_index": 0, "num_shards": 1}
    with JournalWriter(run.fs, run._path(JOURNAL_DIR), header, flush_lines=True, roll_seconds=None,
                       roll_bytes=None) as writer:
        for item in results:
            writer.append(item)
    return writer.paths[0]


def chosen(run: RunDirectory) -> dict[int, tuple[str, object]]:
    """sample_id -> (finish_reason, output_ids or error) of the result readers keep."""
    index = run.scan("f" * 16)
    kept = {}
    with index.reader(run.fs) as read:
        for position, sample_id in enumerate(index.sample_ids.tolist()):
            record = read(position)
            kept[sample_id] = (record["finish_reason"], record["error"] or record["output_ids"])
    return kept


def test_first_success_wins_else_the_latest_error(tmp_path):
    run = RunDirectory(tmp_path)
    write_session(run, "20260101T000000Z-a", [
        result(1, [], "abort", "out of memory"), result(2, [5, 6]), result(3, [], "abort", "first failure")])
    write_session(run, "20260102T000000Z-b", [
        result(1, [1, 2], "length"), result(2, [7, 8]), result(3, [], "abort", "second failure"), result(4, [9])])
    assert chosen(run) == {
        1: ("length", [1, 2]),  # a success replaces an error
        2: ("stop", [5, 6]),  # two successes: the first journaled is kept
        3: ("abort", "second failure"),  # only errors: the latest reason is reported
        4: ("stop", [9]),
    }
    index = run.scan("f" * 16)
    assert index.duplicates == 1
    assert index.finish_reasons() == Counter({"stop": 2, "length": 1, "abort": 1})


def test_torn_and_invalid_lines_are_skipped_and_counted(tmp_path, caplog):
    run = RunDirectory(tmp_path)
    path = write_session(run, "20260101T000000Z-a", [result(1, [1]), result(2, [2]), result(3, [3])])
    lines = open(path, "rb").read().splitlines(keepends=True)
    # Line 3 (sample 2) run together with a torn copy of line 4, then a torn last line (sample 3).
    broken = lines[:2] + [lines[3][:20] + lines[2]] + [lines[3][:-10]]
    open(path, "wb").write(b"".join(broken))
    with caplog.at_level(logging.WARNING):
        kept = chosen(run)
    assert kept == {1: ("stop", [1])}
    index = run.scan("f" * 16)
    assert (index.torn, index.corrupt) == (1, 1)
    assert f"{path}:3: not a valid journal result" in caplog.text


def test_claim_refuses_other_settings_naming_the_field(tmp_path):
    run = RunDirectory(tmp_path)
    fields = {"config": "B1_glaive", "sampling": {"temperature": 0.6, "seed": 0}}
    fingerprint = run.claim(fields, {"markers": {}})
    assert run.claim(fields, {"other": "meta"}) == fingerprint  # meta does not decide
    with pytest.raises(ConfigError) as error:
        run.claim({**fields, "sampling": {"temperature": 0.7, "seed": 0}})
    assert "refusing to mix results" in str(error.value)
    assert "sampling.temperature: run has 0.6, this command has 0.7" in str(error.value)
    assert "seed" not in str(error.value)


def test_object_store_segments_roll_and_are_read_back():
    fs = fsspec.filesystem("memory")
    fs.rm("/roll-test", recursive=True) if fs.exists("/roll-test") else None
    run = RunDirectory("memory://roll-test/run")
    assert not run.on_local_disk
    now = [0.0]
    with run.open_journal("f" * 16, Shard(1, 3), clock=lambda: now[0]) as journal:
        for sample_id in range(1, 30, 3):
            journal.append(result(sample_id, [sample_id]))
            now[0] += 250.0  # a segment closes after 600 s (DEFAULT_ROLL_SECONDS)
    files = run.journal_files()
    assert len(files) == 3 and files == journal.paths  # results at 0..750 s, 1000..1750 s, 2000..2250 s
    headers = [json.loads(fs.cat(f).splitlines()[0]) for f in files]
    assert [h["segment"] for h in headers] == [0, 1, 2]
    assert {(h["shard_index"], h["num_shards"]) for h in headers} == {(1, 3)}
    assert run.scan("f" * 16).sample_ids.tolist() == list(range(1, 30, 3))
    with run.open_journal("f" * 16, roll_bytes=1) as journal:  # and by size
        journal.append(result(100, [1]))
        journal.append(result(101, [1]))
    assert len(run.journal_files()) == 5
    fs.rm("/roll-test", recursive=True)


def test_a_run_directory_at_an_fsspec_url_builds_the_same_dataset(tmp_path, kimi_tokenizer):
    generation = replay_inputs(tmp_path / "inputs", kimi_tokenizer, samples=12)
    assert main(["build", KIMI_CONFIG, *generation, "--out", str(tmp_path / "local")]) == 0
    url = "memory://url-test/run"
    try:
        assert main(["generate", KIMI_CONFIG, *generation, "--run-dir", url]) == 0
        assert main(["build", KIMI_CONFIG, "--run-dir", url, "--out", str(tmp_path / "remote")]) == 0
    finally:
        fsspec.filesystem("memory").rm("/url-test", recursive=True)
    assert config_rows(tmp_path / "remote") == config_rows(tmp_path / "local")


def test_errors_are_journaled_reported_and_retried_only_when_asked(tmp_path, kimi_tokenizer, capsys):
    generation = replay_inputs(tmp_path / "inputs", kimi_tokenizer)
    replay = tmp_path / "inputs" / "replay.jsonl"
    replay.write_text("".join(replay.read_text().splitlines(keepends=True)[:-1]))  # no output for the last
    last = SAMPLES - 1
    run_dir, out = tmp_path / "run", tmp_path / "out"
    reason = f"sample_id {last}: replay file {replay} has no record for sample_id {last}"
    build = ["build", KIMI_CONFIG, *generation, "--run-dir", str(run_dir), "--out", str(out)]

    assert main(build) == 1  # built, with a failed sample left out: not a clean success (README, exit status)
    printed = capsys.readouterr().out
    assert "1 sample failed, not in the dataset (exit status 1)" in printed
    assert "errors: 1 (journaled with their reason; retried only with --retry-errors)" in printed
    assert f"    {reason}" in printed
    assert f"{SAMPLES - 1} results" in printed and "1 failed, 0 not generated yet" in printed
    assert [r["sample_id"] for r in config_rows(out)] == list(range(SAMPLES - 1))

    assert main(build) == 1  # not retried unasked
    printed = capsys.readouterr().out
    assert "0 generated" in printed and "1 sample failed in an earlier run, not retried" in printed

    assert main([*build, "--retry-errors"]) == 1  # retried: fails again, journaled again
    assert "1 generated" in capsys.readouterr().out
    lines = [json.loads(line) for f in RunDirectory(run_dir).journal_files() for line in open(f)]
    assert [line["error"] for line in lines if line.get("sample_id") == last] == [reason.split(": ", 1)[1]] * 2


def test_prompts_are_published_once_by_concurrent_preparers(tmp_path):
    first, second = RunDirectory(tmp_path), RunDirectory(f"file://{tmp_path}")
    prompt = PreparedPrompt(0, "a", [1, 2], [{"role": "user", "content": "hi"}], None)
    first.write_prompts([prompt], [{"sample_id": 1, "reason": "too_long"}])
    second.write_prompts([PreparedPrompt(0, "b", [3], [], None)], [])  # late: finds it published
    assert list(first.iter_prompts()) == [prompt]
    assert list(first.iter_rejects()) == [{"sample_id": 1, "reason": "too_long"}]
    assert sorted(p.name for p in tmp_path.iterdir()) == [PROMPTS_FILE, "rejects.jsonl"]


class FakeEngine:
    in_flight = 3


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_reports_rates_cache_in_flight_and_eta(caplog):
    now = [100.0]
    summary = RunSummary(config="B1_glaive", run_dir="runs/B1", shard="shard 1 of 4")
    progress = Progress(summary, total=10, done=2, engine=FakeEngine(), stream=io.StringIO(),
                        log_every=60.0, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="eagle3_synth.run.progress"):
        for sample_id in range(4):
            now[0] += 30.0  # one sample every 30 s, 400 output tokens each, 4 of 10 prompt tokens cached
            progress.update(result(sample_id, [1] * 400, cached=4))
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [  # a log line every 60 s, not per sample
        "B1_glaive shard 1 of 4: 4/10 samples (40.0%) | 0.03 samples/s | 13.3 output tokens/s | prefix cache 40% "
        "| in flight 3 | ETA 3m00s | 1m00s elapsed",
        "B1_glaive shard 1 of 4: 6/10 samples (60.0%) | 0.03 samples/s | 13.3 output tokens/s | prefix cache 40% "
        "| in flight 3 | ETA 2m00s | 2m00s elapsed",
    ]
    progress.update(result(4, [], "abort", "engine died"))
    progress.close()
    assert summary.generation_seconds == 120.0
    summary.seconds = 150.0
    assert summary.lines() == [
        "B1_glaive shard 1 of 4: 0 prompts kept (0 rejected), 0 already in runs/B1, 5 generated in 2m00s "
        "(0.04 samples/s, 13.3 output tokens/s, prefix cache 32%); 2m30s in all",  # 16 of 50 prompt tokens
        "  finish reasons: abort=1, stop=4",
        "  errors: 1 (journaled with their reason; retried only with --retry-errors)",
        "    sample_id 4: engine died",
    ]


def test_progress_redraws_one_line_on_a_terminal():
    now = [0.0]
    terminal = FakeTerminal()
    summary = RunSummary(config="B3_ultrachat", run_dir="r")
    progress = Progress(summary, total=4, done=0, stream=terminal, clock=lambda: now[0])
    for sample_id in range(4):
        now[0] += 1.0
        progress.update(result(sample_id, [1, 2]))
    progress.close()
    frames = terminal.getvalue().split("\r")[1:]
    assert len(frames) == 5  # one per result (a second apart), and the line as it ends
    assert frames[-2] + "\n" == frames[-1] == (
        "[####################] B3_ultrachat: 4/4 samples (100.0%) | 1.00 samples/s | 2.0 output tokens/s "
        "| prefix cache 0% | ETA 0s | 4s elapsed\x1b[K\n")
