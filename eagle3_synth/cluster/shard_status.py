"""Where each shard of a launched run stands, read from the run directory alone.

A shard is done only when datatrove marked its rank complete (`completions/<rank>` in the launch
folder, datatrove 0.10.1 executor/base.py `PipelineExecutor.mark_rank_as_completed`) AND our journal
has a result for every one of its rollouts: the marker alone says the task returned, the journal
says the work is there. A marker without the results (a task that returned early) counts as failed,
never as done.

A run whose shards were started by hand (`generate --shard-index I --num-shards N` from an sbatch
array or a shell loop) has no launch record, markers or scheduler: there the journal and the shard
locks say it all (`journal_record`): done = every rollout of the shard has its result; running = a
live lock holds the shard (`run/lock.py`: a process of this host that is alive, or one elsewhere
whose lease has not expired); stopped = results but neither (killed, out of time: run it again to
resume); pending = nothing yet.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass, field
from datetime import datetime, timezone

import numpy as np

from eagle3_synth.errors import ConfigError
from eagle3_synth.run.conversations import FAILED, rollout_states
from eagle3_synth.run.directory import RunDirectory
from eagle3_synth.run.progress import PromptCounts, counted, format_duration
from eagle3_synth.run.shards import Shard

LAUNCH_DIR = "launch"  # under the run directory: one datatrove logging folder per shard count
LAUNCH_FILE = "launch.json"  # ours, in that folder: the config, executor and every submission
DONE, RUNNING, FAILED_STATE, PENDING = "done", "running", "failed", "pending"
STOPPED = "stopped"  # a shard started by hand with results, unfinished, that no live process holds
BY_HAND = "by hand"  # the executor of a run whose shards were started without `launch`


def launch_folder(run_dir: str, tasks: int) -> str:
    """datatrove's logging folder of a launch over `tasks` shards: its completion markers mean
    "rank R of `tasks`", so another shard count gets a folder of its own."""
    return posixpath.join(run_dir.rstrip("/"), LAUNCH_DIR, f"tasks-{tasks}")


def completion_marker(rank: int) -> str:
    return f"completions/{rank:05d}"  # datatrove/executor/base.py PipelineExecutor.is_rank_completed


def task_log(rank: int) -> str:
    return f"logs/task_{rank:05d}.log"  # datatrove/utils/logging.py add_task_logger


@dataclass
class ShardStatus:
    """One shard (= one datatrove rank) of a launch."""

    index: int
    rollouts: int  # this shard's prompts x samples per prompt
    done: int  # rollouts with a final result (failed samples included: they are journaled with their reason)
    failed_samples: int
    results: int  # journaled results of this shard's sessions (every turn)
    seconds: float  # generating time of those sessions, summed
    marked: bool  # datatrove's completion marker exists
    span: tuple[float, float] | None = None  # first session's start, last journal write (epoch seconds)
    scheduler: str | None = None  # the scheduler's word for the task (Slurm: RUNNING, FAILED ...), if known
    locked: bool = False  # a live shard lock holds it (read for shards started by hand only)
    state: str = PENDING
    log: str = ""  # the file to read about this task

    @property
    def covered(self) -> bool:
        return self.done == self.rollouts

    @property
    def rate(self) -> float:
        return self.results / self.seconds if self.seconds else 0.0


@dataclass
class LaunchStatus:
    config: str
    run_dir: str
    tasks: int
    executor: str
    shards: list[ShardStatus] = field(default_factory=list)
    prepared: bool = True  # prompts.jsonl is there (before it, no shard knows its samples)
    unit: str = "rollouts"  # what a shard's count of rollouts is (`PromptCounts.unit`)

    def named(self, state: str) -> list[int]:
        return [s.index for s in self.shards if s.state == state]

    @property
    def all_done(self) -> bool:
        return all(s.state == DONE for s in self.shards)

    def lines(self) -> list[str]:
        total = sum(s.rollouts for s in self.shards)
        done = sum(s.done for s in self.shards)
        # All shards together: results over the wall time from the first start to the last write.
        spans = [s.span for s in self.shards if s.span]
        wall = max(end for _, end in spans) - min(start for start, _ in spans) if spans else 0.0
        rate = sum(s.results for s in self.shards) / wall if wall > 0 else 0.0
        states = (DONE, RUNNING, STOPPED, PENDING) if self.executor == BY_HAND else (DONE, RUNNING, FAILED_STATE, PENDING)
        counts = ", ".join(f"{len(self.named(state))} {state}" for state in states)
        eta = format_duration((total - done) / rate) if rate and done < total else ("0s" if done >= total else "unknown")
        progress = (f"{done}/{counted(total, self.unit)}, {rate:.2f} samples/s, ETA {eta}" if self.prepared
                    else "prompts not prepared yet (the first tasks prepare them)")
        how = "started by hand" if self.executor == BY_HAND else f"via {self.executor}"
        lines = [f"{self.config}: {counted(self.tasks, 'shards')} {how} ({counts}); {progress}"]
        width = len(str(self.tasks - 1))
        for s in self.shards:
            extra = f", {counted(s.failed_samples, 'failed samples')}" if s.failed_samples else ""
            scheduler = f" [{s.scheduler}]" if s.scheduler else ""
            line = (f"  shard {s.index:>{width}}: {s.state:<7} {s.done}/{counted(s.rollouts, self.unit)}, "
                    f"{s.rate:.2f} samples/s{extra}{scheduler}")
            if s.state == FAILED_STATE:
                line += f"; log: {s.log}"
            elif s.state == STOPPED:
                line += "; no process holds it: run its generate command again to resume"
            lines.append(line)
        return lines


def read_launch_record(run_dir: str, tasks: int | None = None) -> dict | None:
    """The launch record of `run_dir` (the one of `tasks` shards, else the latest launched); None
    where `launch` never ran (see `journal_record`)."""
    run = RunDirectory(run_dir)
    folders = sorted(run.fs.glob(posixpath.join(run.root, LAUNCH_DIR, "tasks-*", LAUNCH_FILE)),
                     key=lambda path: run.fs.modified(path))
    if tasks is not None:
        folders = [path for path in folders if posixpath.basename(posixpath.dirname(path)) == f"tasks-{tasks}"]
    if not folders:
        return None
    with run.fs.open(folders[-1], "rb") as handle:
        return json.loads(handle.read())


def journal_record(run_dir: str, tasks: int | None = None) -> dict:
    """A record like `launch`'s for a run whose shards were started by hand: the config from
    run.json; the shard count `tasks`, else that of the live shard locks, else that of the journal's
    latest session (1 where nothing was generated yet)."""
    run = RunDirectory(run_dir)
    if not run.exists():
        raise ConfigError(f"{run_dir}: nothing was launched or generated here (no {LAUNCH_DIR}/tasks-N/{LAUNCH_FILE}, "
                          "no run.json); eagle3-synth launch CONFIG --run-dir RUN_DIR starts it")
    config = run.read_run_file()["fields"]["config"]
    if tasks is None:
        live = sorted({shard.count for shard, _, _ in run.generators()})
        if live:
            tasks = live[-1]
        else:
            sessions = [h for h in _headers(run, run.journal_files()) if h]  # first lines only: no scan
            latest = max(sessions, key=lambda h: h.get("started", ""), default=None)
            tasks = int(latest.get("num_shards", 1)) if latest else 1
    return {"config": config, "tasks": tasks, "executor": BY_HAND, "submissions": []}


def _parse_time(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()


def shard_statuses(run_dir: str, config: str, tasks: int, executor: str,
                   scheduler: dict[int, str] | None = None, finished: bool = False) -> LaunchStatus:
    """Each shard's state: done (marker + journal), failed (the scheduler says so, a marker without
    the results, or the executor `finished` without it), running (the scheduler says so, or it has
    results but is not done), pending."""
    run = RunDirectory(run_dir)
    folder = launch_folder(run_dir, tasks)
    fs, root = run.fs, posixpath.join(run.root, LAUNCH_DIR, f"tasks-{tasks}")
    status = LaunchStatus(config=config, run_dir=run_dir, tasks=tasks, executor=executor)
    ready = run.exists() and run.prompts_ready
    status.prepared = ready
    index = run.scan() if ready else None
    slots = run.prompt_slots() if ready else None
    if slots is not None:
        status.unit = PromptCounts.of(slots.conversation, int(slots.turns.sum()), run.iter_rejects()).unit
    by_hand = executor == BY_HAND
    locked = {shard.index for shard, _, _ in run.generators() if shard.count == tasks} if by_hand else set()
    per_file = (np.bincount(index.file_index, minlength=len(index.files)) if index is not None and len(index.files)
                else np.zeros(0, dtype=np.int64))
    files_by_shard: dict[int, list[int]] = {}
    headers = _headers(run, index.files) if index is not None else []
    for number, header in enumerate(headers):
        if header and int(header.get("num_shards", 1)) == tasks:
            files_by_shard.setdefault(int(header.get("shard_index", 0)), []).append(number)
    for rank in range(tasks):
        rollouts = done = failed = results = 0
        seconds, span = 0.0, None
        if ready:
            states = rollout_states(slots, index, Shard(index=rank, count=tasks), retry_errors=False)
            rollouts, done, failed = len(states.state), int((~states.unfinished).sum()), states.count(FAILED)
            spans: dict[str, list[float]] = {}
            for number in files_by_shard.get(rank, []):
                results += int(per_file[number]) if number < len(per_file) else 0
                header = headers[number]
                modified = fs.modified(index.files[number]).replace(tzinfo=timezone.utc).timestamp()
                span = spans.setdefault(header["session"], [_parse_time(header["started"]), modified])
                span[1] = max(span[1], modified)
            seconds = sum(max(end, start + 1e-9) - start for start, end in spans.values())
            span = (min(a for a, _ in spans.values()), max(b for _, b in spans.values())) if spans else None
        marked = fs.exists(posixpath.join(root, completion_marker(rank)))
        shard = ShardStatus(index=rank, rollouts=rollouts, done=done, failed_samples=failed, results=results,
                            seconds=seconds, span=span, marked=marked, scheduler=(scheduler or {}).get(rank),
                            locked=rank in locked, log=posixpath.join(folder, task_log(rank)))
        shard.state = _by_hand_state(shard, ready) if by_hand else _state(shard, ready, finished)
        status.shards.append(shard)
    return status


_SCHEDULER_FAILED = ("FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL",
                     "DEADLINE")
# Slurm states of a task that is still to end (squeue(1) "JOB STATE CODES").
SCHEDULER_ACTIVE = ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
                    "RESIZING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT")


def scheduler_word(shard: ShardStatus) -> str:
    return shard.scheduler.split()[0] if shard.scheduler else ""


def _state(shard: ShardStatus, ready: bool, finished: bool) -> str:
    """done: marker + journal; failed: the scheduler says so, a marker without the results, or the
    executor ended with the shard started but unfinished; running: the scheduler says so, or results
    and no word from a scheduler; else pending (after an executor that ended: it never ran)."""
    if shard.marked and ready and shard.covered:
        return DONE
    word = scheduler_word(shard)
    if shard.marked or word in _SCHEDULER_FAILED:
        return FAILED_STATE
    if word in SCHEDULER_ACTIVE and word != "PENDING":
        return RUNNING
    if word == "PENDING":
        return PENDING
    if finished or (word and word not in SCHEDULER_ACTIVE):  # ended (COMPLETED without the results counts too)
        return FAILED_STATE if shard.results or word else PENDING
    return RUNNING if shard.results else PENDING


def _by_hand_state(shard: ShardStatus, ready: bool) -> str:
    """done: every rollout has its result; running: a live lock holds it; stopped: results and no
    live lock; else pending."""
    if ready and shard.covered:
        return DONE
    if shard.locked:
        return RUNNING
    return STOPPED if shard.results else PENDING


def _headers(run: RunDirectory, files: list[str]) -> list[dict | None]:
    """The header line of each journal file (its session, shard and start)."""
    headers: list[dict | None] = []
    for path in files:
        with run.fs.open(path, "rb") as handle:
            first = handle.readline()
        try:
            headers.append(json.loads(first) if first.endswith(b"\n") else None)
        except json.JSONDecodeError:
            headers.append(None)
    return headers
