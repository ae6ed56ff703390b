"""The run directory: everything generated so far, append-only, keyed by a fingerprint.

A run directory is any fsspec URL (a local path by default, `s3://bucket/run`, `gs://...`):

  run.json                        fingerprint, the fields it was computed from, and meta (markers...)
  prompts.jsonl                   prepared prompts, one per line: sample_id, source_id, prompt_ids, ...
  rejects.jsonl                   prompts that could not be prepared, with the reason
  journal/<session>-<seg>.jsonl   engine results: one header line, then one JSON object per result
  .shard-<I>-of-<N>.lock          while shard I of N generates: who (host, pid, since); see lock.py

Every process that generates ("session": UTC start, host, pid, random tag) writes its own journal
files and never touches anyone else's, and no file is ever rewritten. That is what makes the same
layout work on a local disk and on object stores, which cannot append, with many shards writing
at once. On a local disk a session keeps one file and flushes every line, so a crash (SIGKILL, OOM,
preemption) tears at most the line being written; a line without its newline is skipped by
readers and that sample is generated again. On an object store a file only appears when it is
closed, so a session closes its segment and starts the next every `roll_seconds` (default 10 min)
or `roll_bytes`: a crash there loses at most that much work, never anything already closed.

Exactly once: a sample may have several results (a retry after an error, overlapping shards, two
nodes given the same shard). Readers keep the first success in (file name, line) order -- names
begin with the session's UTC start, so that is the earliest -- or, when every attempt failed, the
latest error. The choice depends only on the files, so every reader picks the same result.
"""

from __future__ import annotations

import heapq
import json
import logging
import os
import posixpath
import re
import socket
import tempfile
import time
from array import array
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields as dataclass_fields
from pathlib import Path
from typing import IO, Any

import fsspec
import numpy as np

from eagle3_synth.files import temporary_name, utc_timestamp
from eagle3_synth.errors import ConfigError
from eagle3_synth.contract.profiles import MarkerIds
from eagle3_synth.contract.row import PreparedPrompt
from eagle3_synth.run.spec import _differences, fingerprint
from eagle3_synth.run.journal import (DEFAULT_ROLL_BYTES, DEFAULT_ROLL_SECONDS, JOURNAL_DIR, JOURNAL_FORMAT,
                                      JournalIndex, JournalWriter, new_session_id, scan_journal)
from eagle3_synth.run.kill_points import kill_point
from eagle3_synth.run.lock import Holder, ShardLock, shard_locks
from eagle3_synth.run.shards import Shard

log = logging.getLogger(__name__)

RUNS_DIR = ".runs"  # under a dataset folder: OUT/.runs/CONFIG is a config's default run directory
RUN_FILE = "run.json"
PROMPTS_FILE = "prompts.jsonl"
REJECTS_FILE = "rejects.jsonl"
_PROMPT_ID = re.compile(rb'\{"sample_id":\s*(\d+)')
# The head of a rollout's line: its first sample id, conversation and turn count (`_prompt_record`).
_PROMPT_SLOTS = re.compile(rb'\{"sample_id":(\d+),"conversation_id":(-?\d+),"turns":(\d+)')

def run_dir_under(folder: str | Path, config: str) -> str:
    """The default run directory of `config` built into dataset folder `folder`: FOLDER/.runs/CONFIG."""
    return str(Path(folder) / RUNS_DIR / config)


# -- the run directory ----------------------------------------------------------------------------

_PROMPT_FIELDS = tuple(field.name for field in dataclass_fields(PreparedPrompt))


_PROMPT_HEAD = ("sample_id", "conversation_id", "turns")  # first, so `prompt_slots` reads them from the head


def _prompt_record(prompt: PreparedPrompt) -> dict[str, Any]:
    """`asdict(prompt)` without the deep copy (same keys and values; the head keys first)."""
    record = {name: getattr(prompt, name) for name in _PROMPT_HEAD}
    record.update((name, getattr(prompt, name)) for name in _PROMPT_FIELDS if name not in record)
    return record



@dataclass(frozen=True)
class PromptSlots:
    """The rollouts of prompts.jsonl as arrays: rollout r owns sample ids first[r] .. first[r] + turns[r] - 1."""

    first: np.ndarray
    conversation: np.ndarray
    turns: np.ndarray

    def __len__(self) -> int:
        return len(self.first)


@dataclass(frozen=True)
class StagedPrompts:
    """Prepared prompts and rejects written aside, not yet published (`RunDirectory.stage_prompts`)."""

    prompts: str
    rejects: str


def _lines(items: Iterable[Any]) -> Callable[[IO[bytes]], None]:
    """A writer of JSON lines: prompts as their records (a shallow dict: `asdict` would deep-copy
    every message and id list first), anything else as it is."""
    def write(handle: IO[bytes]) -> None:
        for item in items:
            record = _prompt_record(item) if isinstance(item, PreparedPrompt) else item
            handle.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n")

    return write


class RunDirectory:
    """A run directory at any fsspec URL (local path by default)."""

    def __init__(self, url: str | Path):
        self.url = str(url)
        self.fs, self.root = fsspec.core.url_to_fs(self.url)

    @property
    def on_local_disk(self) -> bool:
        protocols = self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,)
        return "file" in protocols

    def _path(self, *parts: str) -> str:
        return posixpath.join(self.root, *parts)

    # -- locks ---------------------------------------------------------------------------------
    def lock(self, shard: Shard = Shard()) -> ShardLock:
        """The lock a generator of `shard` holds (`with run.lock(shard): ...`): a second generator of
        the same shard is refused naming the holder (`lock.py`)."""
        if not self.on_local_disk:
            self.fs.makedirs(self.root, exist_ok=True)
        return ShardLock(self.fs, self.root, self.url, shard)

    def generators(self) -> list[tuple[Shard, Holder, str]]:
        """The shards being generated now, as their locks say: (shard, holder, state), state "alive"
        or "unknown" (a holder on another host, which this one cannot check)."""
        return shard_locks(self.fs, self.root)

    def _read_json(self, name: str) -> dict[str, Any]:
        """A JSON file of the run; a damaged one (a torn copy, an edit) is a one-line ConfigError naming it."""
        with self.fs.open(self._path(name), "rb") as handle:
            data = handle.read()
        try:
            value = json.loads(data)
        except ValueError as exc:
            value = exc
        if not isinstance(value, dict):
            why = value if isinstance(value, Exception) else "not a JSON object"
            raise ConfigError(f"{posixpath.join(self.url, name)}: not a valid {name} ({why}); the run directory "
                              "is damaged: restore the file, or use another --run-dir")
        return value

    def _write_new(self, name: str, write: Callable[[IO[bytes]], None]) -> str:
        """Write a uniquely named temporary file beside `name`; return its path (see `_install`).
        Should `write` fail, the temporary file is removed."""
        tmp = self._path(temporary_name(name))
        try:
            with self.fs.open(tmp, "wb") as handle:
                write(handle)
        except BaseException:
            if self.fs.exists(tmp):
                self.fs.rm(tmp)
            raise
        return tmp

    def _install(self, tmp: str, name: str) -> None:
        self.fs.mv(tmp, self._path(name))

    # -- fingerprint ---------------------------------------------------------------------------
    def claim(self, fields: dict[str, Any], meta: dict[str, Any] | None = None) -> str:
        """Create the run or check that it was made by the same settings; refuse any difference.

        `fields` are fingerprinted; `meta` (resolved marker ids, engine, versions) is recorded
        for assembly and the dataset card but does not decide whether results may be mixed.
        Nodes that start together may both write run.json; with the same fields either copy is
        right, and reading it back catches a node that raced in with other settings.
        """
        self.fs.makedirs(self.root, exist_ok=True)
        new = {"fingerprint": fingerprint(fields), "fields": fields, "meta": meta or {}}
        if not self.fs.exists(self._path(RUN_FILE)):
            data = (json.dumps(new, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
            self._install(self._write_new(RUN_FILE, lambda handle: handle.write(data)), RUN_FILE)
        return self.check_settings(fields)

    def check_settings(self, fields: dict[str, Any]) -> str:
        """The run's fingerprint, if run.json was made by the same `fields`; a ConfigError listing
        the differences otherwise (read only: a dry run checks a run without claiming it)."""
        old = self._read_json(RUN_FILE)
        if old["fingerprint"] != fingerprint(fields):
            # Compared in JSON form, as run.json holds them (a tuple is a list there).
            diffs = "\n  ".join(_differences(old["fields"], json.loads(json.dumps(fields))))
            raise ConfigError(
                f"run directory {self.url} was started with different settings; refusing to mix "
                f"results. Use another --run-dir, or the original settings. Differences:\n  {diffs}"
            )
        return old["fingerprint"]

    def exists(self) -> bool:
        """Whether a run was started here (run.json written)."""
        return self.fs.exists(self._path(RUN_FILE))

    def read_run_file(self) -> dict[str, Any]:
        if not self.exists():
            raise ConfigError(f"{self.url} is not a run directory (no {RUN_FILE}); run generate or build first")
        return self._read_json(RUN_FILE)

    def markers(self) -> MarkerIds:
        """The marker ids the run was generated with, so assembly needs no tokenizer."""
        return MarkerIds.from_dict(self.read_run_file()["meta"]["markers"])

    # -- prompts -------------------------------------------------------------------------------
    @property
    def prompts_ready(self) -> bool:
        return self.fs.exists(self._path(PROMPTS_FILE))

    def write_prompts(self, prompts: Iterable[PreparedPrompt], rejects: Iterable[dict[str, Any]]) -> None:
        """Publish the prepared prompts once: `stage_prompts`, then `install_prompts`."""
        self.install_prompts(self.stage_prompts(prompts, rejects))

    def stage_prompts(self, prompts: Iterable[PreparedPrompt], rejects: Iterable[dict[str, Any]]) -> StagedPrompts:
        """Write the prepared prompts and their rejects aside (temporary files beside their names);
        nothing is published until `install_prompts` (or removed by `discard_staged`).

        `prompts` is consumed before `rejects` is read, so both may be filled by one stream as it
        goes (`prompts.prepare.iter_prepared_prompts`): the prompt list is never held in memory.
        """
        self.fs.makedirs(self.root, exist_ok=True)
        prompts_tmp = self._write_new(PROMPTS_FILE, _lines(prompts))
        try:
            rejects_tmp = self._write_new(REJECTS_FILE, _lines(rejects))
        except BaseException:
            self.fs.rm(prompts_tmp)
            raise
        return StagedPrompts(prompts_tmp, rejects_tmp)

    def restage_prompts(self, staged: StagedPrompts, rejected: Callable[[int, dict[str, Any]], dict[str, Any]],
                        over: Callable[[int], bool]) -> StagedPrompts:
        """The staged files again, with the prompts on the lines `over(line index)` moved to the
        rejects as `rejected(line index, prompt record)`, merged in sample_id order; the other lines
        are copied byte for byte (only moved lines are parsed). The old staged files are removed."""
        moved: list[dict[str, Any]] = []

        def kept(handle: IO[bytes]) -> None:
            with self.fs.open(staged.prompts, "rb") as source:
                for index, line in enumerate(source):
                    if over(index):
                        moved.append(rejected(index, json.loads(line)))
                    else:
                        handle.write(line)

        prompts_tmp = self._write_new(PROMPTS_FILE, kept)
        try:
            with self.fs.open(staged.rejects, "rb") as source:
                earlier = [json.loads(line) for line in source]
            merged = heapq.merge(earlier, moved, key=lambda record: record["sample_id"])
            rejects_tmp = self._write_new(REJECTS_FILE, _lines(merged))
        except BaseException:
            self.fs.rm(prompts_tmp)
            raise
        self.discard_staged(staged)
        return StagedPrompts(prompts_tmp, rejects_tmp)

    def install_prompts(self, staged: StagedPrompts) -> None:
        """Move staged prompts in (rejects first, so a reader that sees prompts.jsonl sees its
        rejects too).

        Shards starting together may all prepare; preparation is deterministic for a fingerprint,
        so their files are identical and whichever lands is right. One that finds the file already
        there drops its own copy rather than replace a file other nodes may be reading.
        """
        kill_point("prompts.written")
        if self.prompts_ready:
            self.discard_staged(staged)
            return
        self._install(staged.rejects, REJECTS_FILE)
        self._install(staged.prompts, PROMPTS_FILE)

    def discard_staged(self, staged: StagedPrompts) -> None:
        """Remove staged files that were not installed (a failed start, a dry run)."""
        self.fs.rm([path for path in (staged.rejects, staged.prompts) if self.fs.exists(path)])

    def iter_prompts(self, keep: Callable[[int], bool] | None = None) -> Iterator[PreparedPrompt]:
        """Prepared prompts in sample_id order; `keep(sample_id)` skips others without parsing them."""
        with self.fs.open(self._path(PROMPTS_FILE), "rb") as handle:
            for line in handle:
                if keep is not None:
                    head = _PROMPT_ID.match(line)
                    if head is not None and not keep(int(head.group(1))):
                        continue
                yield PreparedPrompt(**json.loads(line))

    def prompt_slots(self) -> "PromptSlots":
        """Every rollout's first sample id, conversation and turn count (int64 arrays), read from
        the head of each line; a line written before rollouts is one turn of its own conversation."""
        firsts, conversations, turns = array("q"), array("q"), array("q")
        with self.fs.open(self._path(PROMPTS_FILE), "rb") as handle:
            for line in handle:
                head = _PROMPT_SLOTS.match(line)
                if head is not None:
                    first, conversation, count = (int(group) for group in head.groups())
                else:
                    record = json.loads(line)
                    first, conversation, count = (record["sample_id"], record.get("conversation_id", -1),
                                                  record.get("turns", 1))
                firsts.append(first)
                conversations.append(first if conversation < 0 else conversation)
                turns.append(count)
        return PromptSlots(*(np.frombuffer(a, dtype=np.int64) if len(a) else np.zeros(0, np.int64)
                             for a in (firsts, conversations, turns)))

    def iter_rejects(self) -> Iterator[dict[str, Any]]:
        if self.fs.exists(self._path(REJECTS_FILE)):
            with self.fs.open(self._path(REJECTS_FILE), "rb") as handle:
                for line in handle:
                    yield json.loads(line)

    # -- journal -------------------------------------------------------------------------------
    def journal_files(self) -> list[str]:
        return sorted(self.fs.glob(self._path(JOURNAL_DIR, "*.jsonl")))

    def open_journal(
        self,
        fingerprint: str,
        shard: Shard = Shard(),
        *,
        roll_seconds: float | None = None,
        roll_bytes: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> JournalWriter:
        """A writer for a new session; segments roll only off local disk unless told otherwise."""
        local = self.on_local_disk
        header = {
            "journal": JOURNAL_FORMAT,
            "fingerprint": fingerprint,
            "session": new_session_id(),
            "shard_index": shard.index,
            "num_shards": shard.count,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started": utc_timestamp(),
        }
        return JournalWriter(
            self.fs,
            self._path(JOURNAL_DIR),
            header,
            flush_lines=local,
            roll_seconds=roll_seconds if roll_seconds is not None or local else DEFAULT_ROLL_SECONDS,
            roll_bytes=roll_bytes if roll_bytes is not None or local else DEFAULT_ROLL_BYTES,
            clock=clock,
        )

    def scan(self, expected_fingerprint: str | None = None) -> JournalIndex:
        """Index the journal; files of another fingerprint than run.json's are refused."""
        expected = expected_fingerprint or self.read_run_file()["fingerprint"]
        return scan_journal(self.fs, self.journal_files(), expected)

    @contextmanager
    def local_copy(self) -> Iterator["RunDirectory"]:
        """This run directory as a plain local path: itself, or a temporary download (under $TMPDIR).

        Assembly reads results in sample_id order, i.e. at scattered offsets of many files; on an
        object store that would be one request per sample, so the files are fetched once instead.
        """
        if self.on_local_disk:
            yield RunDirectory(self.root)
            return
        with tempfile.TemporaryDirectory(prefix="eagle3-synth-run-") as tmp:
            for name in (RUN_FILE, PROMPTS_FILE, REJECTS_FILE):
                if self.fs.exists(self._path(name)):
                    self.fs.get(self._path(name), os.path.join(tmp, name))
            os.makedirs(os.path.join(tmp, JOURNAL_DIR))
            for path in self.journal_files():
                self.fs.get(path, os.path.join(tmp, JOURNAL_DIR, posixpath.basename(path)))
            yield RunDirectory(tmp)
