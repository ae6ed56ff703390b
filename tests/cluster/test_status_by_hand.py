"""`status RUN_DIR` for shards started by hand (`generate --shard-index I --num-shards N`, as a
Slurm array does), with no launch record: where each shard stands, from the journal and its locks."""

from __future__ import annotations

import re

from eagle3_synth.run.directory import RunDirectory
from eagle3_synth.run.shards import Shard

from ..support.built_datasets import KIMI_CONFIG
from ..support.cli_processes import replay_inputs, run_cli_process
from ..support.cli_runs import run_cli

EXIT_RESUMABLE = 75


def shard_lines(printed: str) -> list[str]:
    """The status lines with their rates blanked (they depend on the machine's speed)."""
    return [re.sub(r"\d+\.\d+ samples/s", "R samples/s", line) for line in printed.strip().splitlines()]


def test_status_of_shards_started_by_hand_reads_the_journal_and_the_locks(tmp_path, kimi_tokenizer, capsys):
    generation = replay_inputs(tmp_path / "inputs", kimi_tokenizer)
    run = tmp_path / "run"
    shard = ["generate", KIMI_CONFIG, *generation, "--run-dir", str(run), "--num-shards", "2", "--shard-index"]
    assert run_cli([*shard, "0"], capsys)[0] == 0

    code, printed = run_cli(["status", str(run)], capsys)
    lines = shard_lines(printed)
    assert code == 3 and lines[0].startswith(f"{KIMI_CONFIG}: 2 shards started by hand (1 done, 0 running, 0 stopped, "
                                             "1 pending); ")
    assert lines[1].startswith("  shard 0: done ") and lines[2].startswith("  shard 1: pending 0/")

    with RunDirectory(str(run)).lock(Shard(1, 2)):  # a live generator of shard 1 holds its lock
        code, printed = run_cli(["status", str(run)], capsys)
    assert code == 3 and shard_lines(printed)[2].startswith("  shard 1: running 0/")

    # Shard 1 stopped after its first result (SIGTERM: exit 75, its lock released).
    assert run_cli_process([*shard, "1"], "journal.after_write:1:TERM") == EXIT_RESUMABLE
    code, printed = run_cli(["status", str(run)], capsys)
    lines = shard_lines(printed)
    assert code == 1 and "(1 done, 0 running, 1 stopped, 0 pending)" in lines[0]
    stopped = re.fullmatch(r"  shard 1: stopped (\d+)/(\d+) samples, R samples/s; no process holds it: run its "
                           r"generate command again to resume", lines[2])
    assert stopped and 0 < int(stopped[1]) < int(stopped[2])  # what was in flight at the signal may be journaled too

    assert run_cli([*shard, "1"], capsys)[0] == 0
    code, printed = run_cli(["status", str(run)], capsys)
    assert code == 0 and "(2 done, 0 running, 0 stopped, 0 pending)" in printed
    # Any shard count can be asked for: the journal is one, so one shard of all samples is done too.
    code, printed = run_cli(["status", str(run), "--tasks", "1"], capsys)
    assert code == 0 and "1 shard started by hand (1 done, 0 running, 0 stopped, 0 pending)" in printed


def test_status_of_a_folder_with_no_run(tmp_path, capsys):
    code, printed = run_cli(["status", str(tmp_path)], capsys)
    assert code == 2
    assert (f"eagle3-synth status: error: {tmp_path}: nothing was launched or generated here (no "
            "launch/tasks-N/launch.json, no run.json); eagle3-synth launch CONFIG --run-dir RUN_DIR starts it") in printed


def test_status_counts_rollouts_where_a_prompt_has_several(tmp_path, kimi_tokenizer, capsys):
    generation = replay_inputs(tmp_path / "inputs", kimi_tokenizer)  # its replay has half the rollouts: the rest fail
    run = tmp_path / "run"
    run_cli(["generate", KIMI_CONFIG, *generation, "--run-dir", str(run), "--samples-per-prompt", "2"], capsys)
    lines = shard_lines(run_cli(["status", str(run)], capsys)[1])
    assert lines[0].startswith(f"{KIMI_CONFIG}: 1 shard started by hand (1 done, ") and "60/60 rollouts, " in lines[0]
    assert lines[1] == "  shard 0: done    60/60 rollouts, R samples/s, 30 failed samples"
