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
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from eagle3_synth.errors import ConfigError
from eagle3_synth.run.directory import RunDirectory
from eagle3_synth.timestamps import utc_timestamp

from eagle3_synth.cluster.shard_status import LAUNCH_FILE, launch_folder

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
