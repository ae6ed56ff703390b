"""`eagle3-synth launch` and `status` against a real Slurm, a real Ray and local processes: a config
over 4 shards gives the rows of an unsharded build; failed and killed shards are named, and the
same launch again runs only them, generating no sample twice."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from eagle3_synth.cli import main
from eagle3_synth.run.directory import RunDirectory
from eagle3_synth.run.kill_points import KILL_ENV

from ..support.built_datasets import KIMI_CONFIG
from ..support.cli_processes import config_rows, replay_inputs
from ..support.cli_runs import run_cli
from ..support.process_control import finish, start_cli
from .waiting import generating_processes, poll, stopped

TASKS = 4  # 30 samples: shards 0 and 1 get 8, shards 2 and 3 get 7

pytestmark = pytest.mark.slow


def executor_options(executor: str) -> list[str]:
    """Each executor's settings for a 2-core machine: small tasks, no GPU, several at once."""
    small = ["--gpus-per-task", "0", "--cpus-per-task", "1", "--mem-per-cpu-gb", "1"]
    if executor == "slurm":
        return ["--executor", "slurm", "--partition", "tests", "--time", "10:00", "--no-exclusive",
                "--venv", str(Path(sys.prefix) / "bin" / "activate"), "--poll-seconds", "0.5", *small]
    if executor == "ray":
        return ["--executor", "ray", *small[:4], "--mem-per-cpu-gb", "0.25"]
    # One at a time: the local executor stops at the first rank that raises (datatrove 0.10.1
    # `LocalPipelineExecutor.run`), so
    # which shards a failure leaves unrun is then the same on every machine.
    return ["--executor", "local", "--workers", "1"]


@pytest.fixture(params=["local", "slurm", "ray"])
def executor(request):
    """Each executor, with its cluster running (skipped, with the reason, where it cannot be)."""
    if request.param == "slurm":
        request.getfixturevalue("slurm")
    elif request.param == "ray":
        request.getfixturevalue("ray_cluster")
    else:
        pytest.importorskip("datatrove", reason="datatrove is not installed (pip install 'eagle3-synth[cluster]')")
    return request.param


@pytest.fixture
def unsharded(tmp_path, kimi_tokenizer):
    """The generation options and the rows a single-process build writes with them."""
    generation = replay_inputs(tmp_path / "inputs", kimi_tokenizer)
    assert main(["build", KIMI_CONFIG, *generation, "--out", str(tmp_path / "single")]) == 0
    return generation, config_rows(tmp_path / "single")


def launch_argv(generation: list[str], run_dir: Path, executor: str, *extra: str) -> list[str]:
    return ["launch", KIMI_CONFIG, *generation, "--run-dir", str(run_dir), "--tasks", str(TASKS),
            *executor_options(executor), *extra]


def launch(generation: list[str], run_dir: Path, executor: str, capsys, *extra: str) -> tuple[int, str]:
    return run_cli(launch_argv(generation, run_dir, executor, *extra), capsys)


def launch_killing(kill_at: str, generation: list[str], run_dir: Path, executor: str, capsys, monkeypatch,
                   *extra: str) -> tuple[int, str]:
    """`launch` with the kill point armed where the shards generate, the executor's own way: each Ray
    actor's runtime_env, the environment sbatch hands to the Slurm tasks (`--export=ALL`), and for the
    local executor, which runs the tasks in the launching process, a launching process of their own."""
    if executor == "ray":
        runtime_env = json.dumps({"env_vars": {KILL_ENV: kill_at}})
        return launch(generation, run_dir, executor, capsys, "--ray-remote-kwarg", f"runtime_env={runtime_env}", *extra)
    if executor == "slurm":
        with monkeypatch.context() as patched:
            patched.setenv(KILL_ENV, kill_at)
            return launch(generation, run_dir, executor, capsys, *extra)
    output = run_dir.parent / "launch.log"
    code = finish(start_cli(launch_argv(generation, run_dir, executor, *extra), output, kill_at))
    return code, output.read_text()


def sessions_per_shard(run_dir: Path) -> Counter:
    """How many generating sessions each shard had (journal headers of the 4-shard layout)."""
    index = RunDirectory(str(run_dir)).scan()
    return Counter(h["shard_index"] for h in index.sessions if h.get("num_shards") == TASKS)


def assert_each_sample_generated_once(run_dir: Path) -> None:
    index = RunDirectory(str(run_dir)).scan()
    assert index.duplicates == 0 and index.torn == 0
    assert len(index.sample_ids) == 30


def test_four_shards_give_the_rows_of_an_unsharded_build(tmp_path, unsharded, executor, capsys):
    generation, single_rows = unsharded
    run_dir = tmp_path / "run"
    code, printed = launch(generation, run_dir, executor, capsys, "--wait", "--out", str(tmp_path / "sharded"))
    assert code == 0, printed
    assert config_rows(tmp_path / "sharded") == single_rows
    assert f"B1_glaive: 4 shards via {executor} (4 done, 0 running, 0 failed, 0 pending); 30/30 samples" in printed
    assert "B1_glaive: wrote 30 rows to" in printed
    assert_each_sample_generated_once(run_dir)
    assert sessions_per_shard(run_dir) == {0: 1, 1: 1, 2: 1, 3: 1}

    code, printed = run_cli(["status", str(run_dir)], capsys)
    assert code == 0, printed
    assert "  shard 2: done    7/7 samples" in printed


def test_failed_shards_are_named_and_the_same_launch_runs_only_them(tmp_path, unsharded, executor, capsys,
                                                                    monkeypatch):
    """Shards 0 and 1 are stopped (SIGTERM, as a preempted node is) before their 8th and last result;
    shards 2 and 3 have 7 and finish. Ray's executor only logs "Only 2/4 tasks completed" and
    returns: launch must still see it."""
    generation, single_rows = unsharded
    run_dir = tmp_path / "run"
    code, printed = launch_killing("journal.before_write:8:TERM", generation, run_dir, executor, capsys, monkeypatch,
                                   "--wait", "--out", str(tmp_path / "sharded"))
    assert code == 1, printed
    log = run_dir / "launch" / "tasks-4" / "logs" / "task_00000.log"
    # datatrove's local executor stops at the first rank that raised (`LocalPipelineExecutor.run`): shard 0
    # fails, shards 1-3 never start, and launch says so; Slurm and Ray run every shard.
    local = executor == "local"
    failed = "shard 0 of 4 failed" if local else "shards 0, 1 of 4 failed"
    assert f"eagle3-synth launch: error: B1_glaive: {failed}; read {log}" in printed
    assert ("shards 1, 2, 3 did not run (the executor stopped at the first failure)" in printed) == local
    assert "launch the same command again to run only the unfinished shards" in printed
    assert "B1_glaive shard 0 of 4: 1 of 8 samples have no result yet (terminated)" in log.read_text()
    assert not (tmp_path / "sharded").exists()

    code, printed = run_cli(["status", str(run_dir)], capsys)
    assert code == 1
    if local:
        assert "(0 done, 0 running, 1 failed, 3 pending); 7/30 samples" in printed
    else:
        assert "(2 done, 0 running, 2 failed, 0 pending); 28/30 samples" in printed
        assert "  shard 1: failed  7/8 samples" in printed
        assert f"log: {run_dir}/launch/tasks-4/logs/task_00001.log" in printed

    code, printed = launch(generation, run_dir, executor, capsys, "--wait", "--out", str(tmp_path / "sharded"))
    assert code == 0, printed
    assert config_rows(tmp_path / "sharded") == single_rows
    assert_each_sample_generated_once(run_dir)
    # The finished shards did not run again (local: shards 1-3 ran for the first time).
    assert sessions_per_shard(run_dir) == ({0: 2, 1: 1, 2: 1, 3: 1} if local else {0: 2, 1: 2, 2: 1, 3: 1})


def test_a_slurm_array_cancelled_mid_run_resumes_with_the_same_rows(tmp_path, unsharded, slurm, capsys, monkeypatch):
    """Each task stops itself (SIGSTOP) after its 2nd result (two run at once on 2 cores, two wait);
    `status` sees them; scancel
    kills the array mid-run; the same launch again finishes with the rows of an unsharded build."""
    generation, single_rows = unsharded
    run_dir = tmp_path / "run"
    monkeypatch.setenv(KILL_ENV, "journal.after_write:2:STOP")
    code, printed = launch(generation, run_dir, "slurm", capsys)
    assert code == 0, printed
    job = json.loads((run_dir / "launch" / "tasks-4" / "launch.json").read_text())["submissions"][-1]["job_id"]
    assert f"B1_glaive: 4 shards launched via slurm (Slurm job {job}); eagle3-synth status {run_dir}" in printed

    poll(lambda: len(stopped(generating_processes(run_dir))) == 2, "two tasks stopped after 2 results")
    code, printed = run_cli(["status", str(run_dir)], capsys)
    assert code == 3, printed
    assert "(0 done, 2 running, 0 failed, 2 pending); 4/30 samples" in printed
    assert "running 2/" in printed and "[RUNNING]" in printed and "[PENDING]" in printed

    subprocess.run(["scancel", job], check=True)
    poll(lambda: not generating_processes(run_dir), "the cancelled tasks exiting")
    poll(lambda: run_cli(["status", str(run_dir)], capsys)[0] == 1, "status seeing the cancelled shards as failed")

    monkeypatch.delenv(KILL_ENV)
    code, printed = launch(generation, run_dir, "slurm", capsys, "--wait", "--out", str(tmp_path / "sharded"))
    assert code == 0, printed
    assert config_rows(tmp_path / "sharded") == single_rows
    assert_each_sample_generated_once(run_dir)
