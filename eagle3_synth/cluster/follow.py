"""Launch a config's shards and follow them: submit through an executor, poll where each shard
stands (journal + completion markers + the scheduler), say which failed and where to read why."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from eagle3_synth.run.settings import GenerationSettings

from eagle3_synth.cluster.executors import ExecutorSettings, make_executor, record_submission, slurm_states
from eagle3_synth.cluster.shard_status import (FAILED_STATE, PENDING, SCHEDULER_ACTIVE, LaunchStatus, launch_folder,
                                               scheduler_word, shard_statuses)

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
