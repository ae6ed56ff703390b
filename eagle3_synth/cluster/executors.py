"""datatrove's executors, one builder each (a registry, not an if/elif chain), with a GPU cluster's
defaults: one task per node, all its GPUs, requeued on preemption.

Read from datatrove 0.10.1's source: the Slurm executor writes an sbatch array whose tasks run
`srun -l -n NODES launch_pickled_pipeline executor.pik` (slurm.py `SlurmPipelineExecutor.launch_job`)
with `--requeue` (`SlurmPipelineExecutor.get_sbatch_args`) and `--export=ALL` (`launch_job`), and `run()`
returns once submitted; the Ray executor needs `ray.init` first, gives each rank an actor in a
placement group of `nodes_per_task` bundles (ray.py `RayTaskManager.submit_task`), resubmits a rank
whose worker died (`RayTaskManager.task_done`, up to 3 times) and, when a rank raised, only logs
"Only k/n tasks completed" (`RayPipelineExecutor.run`) and returns: we read the completions ourselves
(`shard_status`). The local executor raises when a rank does (local.py `LocalPipelineExecutor.run`).
"""

from __future__ import annotations

import json
import os
import posixpath
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from eagle3_synth.errors import ConfigError
from eagle3_synth.run.directory import RunDirectory
from eagle3_synth.files import utc_timestamp
from eagle3_synth.cluster.shard_status import (FAILED_STATE, LAUNCH_FILE, PENDING, SCHEDULER_ACTIVE, LaunchStatus,
                                               launch_folder, scheduler_word, shard_statuses)
from eagle3_synth.run.settings import GenerationSettings

EXECUTORS = ("slurm", "ray", "local")


@dataclass
class ExecutorSettings:
    """How the tasks run: the executor and its own settings, with a GPU cluster's defaults."""

    executor: str = "slurm"
    # Shards, one task each (a task is one node, or `nodes_per_task` nodes).
    tasks: int = 1
    # Tasks running at once (-1: all).
    workers: int = -1
    # Nodes per task: >1 for a model that spans nodes (docs/guides/clusters.md, "A model that spans nodes").
    nodes_per_task: int = 1
    # GPUs per node of a task: all of a GPU node's (8), 0 on CPU nodes.
    gpus_per_task: int = 8
    cpus_per_task: int = 32
    mem_per_cpu_gb: float = 8
    # Slurm: partition and time limit are required by the executor (datatrove 0.10.1
    # `SlurmPipelineExecutor.__init__`).
    partition: str | None = None
    time: str = "24:00:00"
    qos: str | None = None
    # Slurm: a task owns its node(s) (sbatch --exclusive): no other job shares the GPUs or the memory.
    exclusive: bool = True
    # Slurm: further #SBATCH lines, e.g. {"account": "proj", "gres": "gpu:8"}.
    sbatch_args: dict[str, Any] = field(default_factory=dict)
    job_name: str = "eagle3-synth"
    # The `bin/activate` the nodes source before running the task (Slurm): where eagle3-synth and
    # datatrove's launch_pickled_pipeline are installed.
    venv: str | None = None
    # Ray: further options of each rank's actor (e.g. {"resources": {"H200": 1}}), and the cluster address.
    ray_remote_kwargs: dict[str, Any] = field(default_factory=dict)
    ray_address: str | None = None

    def __post_init__(self) -> None:
        if self.executor not in EXECUTORS:
            raise ConfigError(f"--executor must be one of {', '.join(EXECUTORS)}, got {self.executor!r}")
        for name in ("tasks", "nodes_per_task", "cpus_per_task"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if self.gpus_per_task < 0:
            raise ConfigError(f"--gpus-per-task must be >= 0, got {self.gpus_per_task}")
        if self.executor == "slurm" and not self.partition:
            raise ConfigError("--executor slurm needs --partition NAME (the partition of your GPU nodes)")
        if self.nodes_per_task != 1:
            # datatrove would run the step on every node of the task (datatrove 0.10.1
            # `SlurmPipelineExecutor.launch_job`: `srun -n NODES`; `RayTaskManager.submit_task`), each
            # generating the same shard with an engine of its own.
            raise ConfigError("--nodes-per-task > 1 is not wired to SGLang's multi-node engine yet: serve the model "
                              "over several nodes and point the shards at it with --engine sglang-http --url "
                              "(docs/guides/clusters.md: a model that spans nodes)")
        if self.executor == "slurm" and not float(self.mem_per_cpu_gb).is_integer():
            raise ConfigError(f"--mem-per-cpu-gb must be whole gigabytes for Slurm, got {self.mem_per_cpu_gb:g}")
        if self.venv and not os.path.isfile(self.venv):
            raise ConfigError(f"--venv {self.venv}: no such file (give the environment's bin/activate)")


def _slurm(pipeline: list, folder: str, s: ExecutorSettings) -> Any:
    from datatrove.executor import SlurmPipelineExecutor

    sbatch_args = {**({"exclusive": ""} if s.exclusive else {}), **s.sbatch_args}
    return SlurmPipelineExecutor(
        pipeline, tasks=s.tasks, time=s.time, partition=s.partition, cpus_per_task=s.cpus_per_task,
        mem_per_cpu_gb=int(s.mem_per_cpu_gb), gpus_per_task=s.gpus_per_task, nodes_per_task=s.nodes_per_task,
        workers=s.workers, job_name=s.job_name, qos=s.qos or "", venv_path=s.venv, sbatch_args=sbatch_args,
        logging_dir=folder, requeue=True, mail_type="NONE",
    )


def _ray(pipeline: list, folder: str, s: ExecutorSettings) -> Any:
    import ray
    from datatrove.executor import RayPipelineExecutor

    if not ray.is_initialized():
        ray.init(address=s.ray_address)
    return RayPipelineExecutor(
        pipeline, tasks=s.tasks, workers=s.workers, logging_dir=folder, cpus_per_task=s.cpus_per_task,
        mem_per_cpu_gb=s.mem_per_cpu_gb, gpus_per_task=s.gpus_per_task, nodes_per_task=s.nodes_per_task,
        ray_remote_kwargs=dict(s.ray_remote_kwargs) or None,
    )


def _local(pipeline: list, folder: str, s: ExecutorSettings) -> Any:
    from datatrove.executor import LocalPipelineExecutor

    return LocalPipelineExecutor(pipeline, tasks=s.tasks, workers=s.workers, logging_dir=folder)


BUILDERS: dict[str, Callable[[list, str, ExecutorSettings], Any]] = {"slurm": _slurm, "ray": _ray, "local": _local}


def make_executor(pipeline: list, run_dir: str, settings: ExecutorSettings) -> Any:
    return BUILDERS[settings.executor](pipeline, launch_folder(run_dir, settings.tasks), settings)


def record_submission(run_dir: str, config: str, settings: ExecutorSettings, executor: Any,
                      finished: bool) -> dict[str, Any]:
    """Add this submission to the launch record (`launch.json` beside datatrove's files): which
    executor, which ranks it ran and, on Slurm, the job id `status` asks the scheduler about."""
    run = RunDirectory(run_dir)
    path = posixpath.join(launch_folder(run.root, settings.tasks), LAUNCH_FILE)
    record: dict[str, Any] = {"config": config, "executor": settings.executor, "tasks": settings.tasks,
                              "settings": asdict(settings), "submissions": []}
    if run.fs.exists(path):
        with run.fs.open(path, "rb") as handle:
            record["submissions"] = json.loads(handle.read()).get("submissions", [])
    job_id = getattr(executor, "job_id", None)
    ranks_file = posixpath.join(posixpath.dirname(path), "ranks_to_run.json")
    ranks = None
    if settings.executor == "slurm" and job_id not in (None, -1) and run.fs.exists(ranks_file):
        with run.fs.open(ranks_file, "rb") as handle:
            ranks = json.loads(handle.read())
    record["submissions"].append({"at": utc_timestamp(), "job_id": None if job_id in (None, -1) else str(job_id),
                                  "ranks": ranks, "finished": finished})
    run.fs.makedirs(posixpath.dirname(path), exist_ok=True)
    with run.fs.open(path, "wb") as handle:
        handle.write((json.dumps(record, indent=2) + "\n").encode("utf-8"))
    return record


def slurm_states(record: dict[str, Any]) -> dict[int, str]:
    """Rank -> Slurm's state of its latest task (`squeue -t all`, which knows finished jobs for
    MinJobAge, 300 s by default); ranks Slurm no longer lists are absent."""
    states: dict[int, str] = {}
    for submission in record.get("submissions", []):
        job_id, ranks = submission.get("job_id"), submission.get("ranks")
        if not job_id or ranks is None:
            continue
        try:
            out = subprocess.run(["squeue", "-h", "-r", "-t", "all", "-j", job_id, "-o", "%K %T"], capture_output=True,
                                 text=True, timeout=60).stdout
        except (OSError, subprocess.TimeoutExpired):
            continue
        for line in out.splitlines():
            index, _, state = line.strip().partition(" ")
            if index.isdigit() and int(index) < len(ranks):
                states[int(ranks[int(index)])] = state
    return states


# Launch a config's shards and follow them: submit through an executor, poll where each shard
# stands (journal + completion markers + the scheduler), say which failed and where to read why.

# Options holding local paths: made absolute, since a task runs elsewhere (another node, or a Ray
# worker whose working directory is not the launcher's).
_PATH_FIELDS = ("model", "tokenizer", "profile_file", "config_file", "prompts", "replay")


def portable(settings: GenerationSettings) -> GenerationSettings:
    """`settings` with every local path absolute (URLs and paths that do not exist are kept)."""

    def absolute(path: str | None) -> str | None:
        if path is None or "://" in path or not Path(path).exists():
            return path
        return str(Path(path).resolve())

    run_dir = settings.run_dir
    if run_dir and "://" not in run_dir:  # made by the first task: absolute though it does not exist yet
        run_dir = str(Path(run_dir).resolve())
    return replace(settings, **{name: absolute(getattr(settings, name)) for name in _PATH_FIELDS}, run_dir=run_dir,
                   source_files=tuple(absolute(path) or path for path in settings.source_files))


def submit(config: str, settings: GenerationSettings, executor_settings: ExecutorSettings) -> dict[str, Any]:
    """Run (local, Ray) or submit (Slurm) every unfinished shard; return the launch record."""
    from eagle3_synth.cluster.step import GenerateShard

    executor = make_executor([GenerateShard(config, settings)], settings.run_dir, executor_settings)
    finished = executor_settings.executor != "slurm"
    try:
        executor.run()
    except Exception:
        # The local executor re-raises a rank's error after the others ran (datatrove
        # `LocalPipelineExecutor.run`); where each shard stands is read from the run directory, like
        # for every other executor.
        if executor_settings.executor != "local":
            raise
    return record_submission(settings.run_dir, config, executor_settings, executor, finished)


def current_status(record: dict[str, Any], run_dir: str) -> LaunchStatus:
    """Where each shard of the launch `record` stands now."""
    scheduler = slurm_states(record) if record["executor"] == "slurm" else None
    finished = bool(record["submissions"]) and record["submissions"][-1].get("finished", False)
    return shard_statuses(run_dir, record["config"], record["tasks"], record["executor"], scheduler, finished)


def follow(record: dict[str, Any], run_dir: str, echo: Callable[[str], None] = print,
           poll_seconds: float = 30.0, sleep: Callable[[float], None] = time.sleep) -> LaunchStatus:
    """Print the status whenever it changes, until no task is left to end: at once for local and
    Ray (their `run` returned), for Slurm once `squeue` lists none of the tasks as still to end."""
    shown: list[str] = []
    while True:
        status = current_status(record, run_dir)
        lines = status.lines()
        if lines != shown:
            for line in lines:
                echo(line)
            shown = lines
        if record["executor"] != "slurm" or not any(scheduler_word(s) in SCHEDULER_ACTIVE for s in status.shards):
            return status
        sleep(poll_seconds)


def failure_message(status: LaunchStatus, record: dict[str, Any]) -> str:
    """One line: which shards failed (or never ran), the log to read, and how to continue."""
    def shards(indices: list[int]) -> str:
        return f"shard{'s' if len(indices) > 1 else ''} {', '.join(map(str, indices))}"

    failed, not_run = status.named(FAILED_STATE), status.named(PENDING)
    parts = []
    if failed:
        where = f"read {status.shards[failed[0]].log}"
        if record["executor"] == "slurm":
            where += f" (Slurm's own output: {launch_folder(status.run_dir, status.tasks)}/slurm_logs/)"
        parts.append(f"{shards(failed)} of {status.tasks} failed; {where}")
    if not_run:
        parts.append(f"{shards(not_run)} did not run (the executor stopped at the first failure)")
    return f"{status.config}: {'; '.join(parts)}; launch the same command again to run only the unfinished shards"
