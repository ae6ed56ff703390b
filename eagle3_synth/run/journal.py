"""The run directory: everything generated so far, append-only, keyed by a fingerprint.

A run directory is any fsspec URL (a local path by default, `s3://bucket/run`, `gs://...`):

  run.json                        fingerprint, the fields it was computed from, and meta (markers...)
  prompts.jsonl                   prepared prompts, one per line: sample_id, source_id, prompt_ids, ...
  rejects.jsonl                   prompts that could not be prepared, with the reason
  journal/<session>-<seg>.jsonl   engine results: one header line, then one JSON object per result

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

import hashlib
import json
import logging
import os
import posixpath
import re
import secrets
import signal
import socket
import tempfile
import time
from array import array
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import IO, Any

import fsspec
import numpy as np
import orjson

from eagle3_synth.engines.base import GenerationResult
from eagle3_synth.errors import ConfigError
from eagle3_synth.contract.profiles import MarkerIds
from eagle3_synth.contract.row import FINISH_REASONS, PreparedPrompt

log = logging.getLogger(__name__)

RUN_FILE = "run.json"
PROMPTS_FILE = "prompts.jsonl"
REJECTS_FILE = "rejects.jsonl"
JOURNAL_DIR = "journal"
JOURNAL_FORMAT = 1
DEFAULT_ROLL_SECONDS = 600.0
DEFAULT_ROLL_BYTES = 256 << 20

# A result line starts with these two keys (see `encode_result`), so the index reads them without
# parsing the thousands of output ids behind them.
_RESULT_HEAD = re.compile(rb'\{"sample_id":(\d+),"finish_reason":"([a-z]+)"')
_HEADER_PREFIX = b'{"journal":'
_PROMPT_ID = re.compile(rb'\{"sample_id":\s*(\d+)')
_REASON_CODES = {reason.encode(): code for code, reason in enumerate(FINISH_REASONS)}
_ABORT = FINISH_REASONS.index("abort")

# -- crash-test hook ------------------------------------------------------------------------------

KILL_ENV = "EAGLE3_SYNTH_KILL_AT"
_kill_hits: Counter = Counter()


def kill_point(name: str, before: Callable[[], object] | None = None) -> None:
    """Crash-test hook: `EAGLE3_SYNTH_KILL_AT=NAME:N[:SIGNAL]` signals this process (default
    SIGKILL) the N-th time it reaches NAME.

    Tests use it to kill a run at exact places, mid-write of a journal line included, instead of
    racing a timer. `before` runs first (e.g. a flush, so the torn half-line reaches the file).
    Unset, it costs one environment lookup.
    """
    spec = os.environ.get(KILL_ENV)
    if not spec or not spec.startswith(name + ":"):
        return
    _, count, *sig = spec.split(":")
    _kill_hits[name] += 1
    if _kill_hits[name] == int(count):
        if before is not None:
            before()
        os.kill(os.getpid(), getattr(signal, "SIG" + (sig[0] if sig else "KILL")))


# -- fingerprint and shards -----------------------------------------------------------------------


def fingerprint(fields: dict[str, Any]) -> str:
    canonical = json.dumps(fields, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def _differences(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[str]:
    """Each differing field by its dotted path (`sampling.temperature`), nested dicts opened."""
    lines = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            lines += _differences(a, b, f"{prefix}{key}.")
        elif a != b:
            lines.append(f"{prefix}{key}: run has {a!r}, this command has {b!r}")
    return lines


@dataclass(frozen=True)
class Shard:
    """Which samples one process generates: those with `sample_id % count == index`.

    Round-robin rather than contiguous ranges, so every shard gets the same mix of short and long
    prompts (sources are often ordered) and the shards finish together. Any number of shards may
    share a run directory, even with different counts: a shard skips whatever is already done.
    """

    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ConfigError(f"--num-shards must be >= 1, got {self.count}")
        if not 0 <= self.index < self.count:
            raise ConfigError(f"--shard-index must be in 0..{self.count - 1} for --num-shards {self.count}, got {self.index}")

    def owns(self, sample_id: int) -> bool:
        return sample_id % self.count == self.index

    def __str__(self) -> str:
        return "all samples" if self.count == 1 else f"shard {self.index} of {self.count}"


# -- journal lines --------------------------------------------------------------------------------


def encode_result(result: GenerationResult) -> bytes:
    """One journal line; `sample_id` and `finish_reason` first, `output_ids` last (see the index).

    orjson writes the same bytes as `json.dumps(record, ensure_ascii=False, separators=(",", ":"))`
    for these types (ints, strings, null), about ten times faster: thousands of ids a line.
    """
    record = {
        "sample_id": result.sample_id,
        "finish_reason": result.finish_reason,
        "prompt_tokens": result.prompt_tokens,
        "completion_tokens": result.completion_tokens,
        "cached_tokens": result.cached_tokens,
        "error": result.error,
        "output_ids": result.output_ids,
    }
    return orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)


def new_session_id() -> str:
    """UTC start first, so sorting file names sorts sessions by start; the tag keeps names unique."""
    host = re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname())[:40] or "host"
    return f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{host}-{os.getpid()}-{secrets.token_hex(3)}"


class JournalWriter:
    """Appends results to this session's own journal files, never to anyone else's.

    Local disk: one file per session, flushed per line. Elsewhere (object stores) lines only become
    visible when a file is closed, so segments roll every `roll_seconds` or `roll_bytes`.
    """

    def __init__(
        self,
        fs: Any,
        directory: str,
        header: dict[str, Any],
        *,
        flush_lines: bool,
        roll_seconds: float | None,
        roll_bytes: int | None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.fs = fs
        self.directory = directory
        self.header = header
        self.flush_lines = flush_lines
        self.roll_seconds = roll_seconds
        self.roll_bytes = roll_bytes
        self.clock = clock
        self.segment = -1
        self.paths: list[str] = []
        self._handle: IO[bytes] | None = None
        self._opened = 0.0
        self._bytes = 0

    def _open_segment(self) -> IO[bytes]:
        self.segment += 1
        path = posixpath.join(self.directory, f"{self.header['session']}-{self.segment:05d}.jsonl")
        self.fs.makedirs(self.directory, exist_ok=True)
        handle = self.fs.open(path, "wb")
        handle.write(json.dumps({**self.header, "segment": self.segment}, separators=(",", ":")).encode() + b"\n")
        if self.flush_lines:
            handle.flush()
        self.paths.append(path)
        self._handle, self._opened, self._bytes = handle, self.clock(), 0
        return handle

    def append(self, result: GenerationResult) -> None:
        handle = self._handle or self._open_segment()
        line = encode_result(result)
        kill_point("journal.before_write")
        half = len(line) // 2
        handle.write(line[:half])
        kill_point("journal.mid_write", handle.flush)
        handle.write(line[half:])
        if self.flush_lines:
            handle.flush()
        kill_point("journal.after_write")
        self._bytes += len(line)
        if (self.roll_bytes is not None and self._bytes >= self.roll_bytes) or (
            self.roll_seconds is not None and self.clock() - self._opened >= self.roll_seconds
        ):
            self._close_segment()

    def _close_segment(self) -> None:
        handle, self._handle = self._handle, None
        if handle is None:
            return
        handle.flush()
        if self.flush_lines:  # local disk: make the finished file survive a power cut too
            os.fsync(handle.fileno())
        handle.close()

    def close(self) -> None:
        self._close_segment()

    def __enter__(self) -> "JournalWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- journal index --------------------------------------------------------------------------------


@dataclass
class JournalIndex:
    """The chosen result of every journaled sample, as arrays sorted by `sample_id`.

    About 25 bytes a sample (not a dict of Python objects), so memory stays small next to the
    ~8 KB of ids each sample carries; results themselves are read one at a time by offset.
    """

    files: list[str]
    sample_ids: np.ndarray  # int64, ascending, unique
    file_index: np.ndarray  # int32 into `files`
    offsets: np.ndarray  # int64 byte offset of the line
    reasons: np.ndarray  # int8 index into FINISH_REASONS; abort = every attempt failed
    sessions: list[dict[str, Any]]  # header of every journal file
    duplicates: int = 0  # samples with more than one successful result (one is kept)
    torn: int = 0  # lines cut short by a crash (skipped; those samples are generated again)
    corrupt: int = 0  # complete lines that are not valid results (skipped, warned about)

    @property
    def ok(self) -> np.ndarray:
        return self.reasons != _ABORT

    def positions(self, sample_ids: np.ndarray) -> np.ndarray:
        """Index position of each id, -1 where the id has no result."""
        if not len(self.sample_ids):
            return np.full(len(sample_ids), -1, dtype=np.int64)
        where = np.minimum(np.searchsorted(self.sample_ids, sample_ids), len(self.sample_ids) - 1)
        return np.where(self.sample_ids[where] == sample_ids, where, -1)

    def position(self, sample_id: int) -> int:
        """`positions` of one id, without building arrays (called once or twice per sample)."""
        where = int(self.sample_ids.searchsorted(sample_id))
        return where if where < len(self.sample_ids) and self.sample_ids[where] == sample_id else -1

    def finish_reasons(self) -> Counter:
        counts = np.bincount(self.reasons, minlength=len(FINISH_REASONS))
        return Counter({reason: int(n) for reason, n in zip(FINISH_REASONS, counts) if n})

    def layouts(self) -> dict[int, set[int]]:
        """Shard layouts that wrote here: num_shards -> the shard indices seen."""
        seen: dict[int, set[int]] = {}
        for header in self.sessions:
            seen.setdefault(int(header.get("num_shards", 1)), set()).add(int(header.get("shard_index", 0)))
        return seen

    @contextmanager
    def reader(self, fs: Any) -> Iterator[Callable[[int], dict[str, Any]]]:
        """`read(position) -> result dict`, keeping a few files open (results are scattered)."""
        handles: OrderedDict[int, IO[bytes]] = OrderedDict()

        def read(position: int) -> dict[str, Any]:
            file_index = int(self.file_index[position])
            handle = handles.pop(file_index, None) or fs.open(self.files[file_index], "rb")
            handles[file_index] = handle
            if len(handles) > 32:
                handles.popitem(last=False)[1].close()
            handle.seek(int(self.offsets[position]))
            line = handle.readline()
            try:
                return orjson.loads(line)  # ~3x json.loads on a line of thousands of ids
            except orjson.JSONDecodeError as exc:
                raise ConfigError(
                    f"{self.files[file_index]} at byte {int(self.offsets[position])}: journal line is not "
                    f"valid JSON ({exc.msg}); was the file edited? Move it away to generate those samples again"
                ) from exc

        try:
            yield read
        finally:
            for handle in handles.values():
                handle.close()


def scan_journal(fs: Any, files: list[str], expected_fingerprint: str | None) -> JournalIndex:
    """Index every journal file; refuse files written for another fingerprint."""
    ids, file_index, offsets, reasons = array("q"), array("i"), array("q"), array("b")
    sessions: list[dict[str, Any]] = []
    foreign: list[str] = []
    torn = corrupt = 0
    for number, path in enumerate(files):
        with fs.open(path, "rb") as handle:
            offset = 0
            for line_number, line in enumerate(handle, start=1):
                if not line.endswith(b"\n"):
                    torn += 1  # only a file's last line can lack its newline: a crash mid-write
                elif line.startswith(_HEADER_PREFIX):
                    header = json.loads(line)
                    sessions.append(header)
                    if expected_fingerprint is not None and header.get("fingerprint") != expected_fingerprint:
                        foreign.append(f"{path} (fingerprint {header.get('fingerprint')})")
                else:
                    head = _RESULT_HEAD.match(line)
                    code = _REASON_CODES.get(head.group(2)) if head else None
                    # A whole result ends with its output_ids list and names one sample; anything
                    # else (a torn line run together with the next, a hand edit) is not trusted.
                    if code is None or not line.endswith(b"]}\n") or line.count(b'"sample_id"') != 1:
                        corrupt += 1
                        log.warning("%s:%d: not a valid journal result; skipped (that sample is generated again)",
                                    path, line_number)
                    else:
                        ids.append(int(head.group(1)))
                        file_index.append(number)
                        offsets.append(offset)
                        reasons.append(code)
                offset += len(line)
    if foreign:
        raise ConfigError(
            f"journal files from another run (fingerprint {expected_fingerprint} expected, see run.json); "
            "results of different settings are never mixed. Move them out of the journal folder:\n  "
            + "\n  ".join(foreign)
        )
    ids_a, reasons_a = _numpy(ids, np.int64), _numpy(reasons, np.int8)
    chosen, duplicates = _choose(ids_a, reasons_a != _ABORT)
    return JournalIndex(
        files=files,
        sample_ids=ids_a[chosen],
        file_index=_numpy(file_index, np.int32)[chosen],
        offsets=_numpy(offsets, np.int64)[chosen],
        reasons=reasons_a[chosen],
        sessions=sessions,
        duplicates=duplicates,
        torn=torn,
        corrupt=corrupt,
    )


def _numpy(values: array, dtype: type) -> np.ndarray:
    return np.frombuffer(values, dtype=dtype) if len(values) else np.zeros(0, dtype)


def _choose(ids: np.ndarray, ok: np.ndarray) -> tuple[np.ndarray, int]:
    """Positions of one result per sample (the first success in file order, else the latest
    error), sorted by sample_id; and how many samples had more than one success."""
    order_in_files = np.arange(len(ids), dtype=np.int64)
    tie = np.where(ok, order_in_files, -order_in_files)  # successes: earliest first; errors: latest first
    order = np.lexsort((tie, ~ok, ids))
    sorted_ids = ids[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = sorted_ids[1:] != sorted_ids[:-1]
    _, success_counts = np.unique(ids[ok], return_counts=True)
    return order[first], int((success_counts > 1).sum())


# -- the run directory ----------------------------------------------------------------------------

_PROMPT_FIELDS = tuple(field.name for field in dataclass_fields(PreparedPrompt))


def _prompt_record(prompt: PreparedPrompt) -> dict[str, Any]:
    """`asdict(prompt)` without the deep copy (same keys, same order, same values)."""
    return {name: getattr(prompt, name) for name in _PROMPT_FIELDS}



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

    def _read_json(self, name: str) -> dict[str, Any]:
        with self.fs.open(self._path(name), "rb") as handle:
            return json.loads(handle.read())

    def _write_new(self, name: str, write: Callable[[IO[bytes]], None]) -> str:
        """Write a uniquely named temporary file beside `name`; return its path (see `_install`).
        Should `write` fail, the temporary file is removed."""
        tmp = self._path(f".{name}.{secrets.token_hex(4)}.tmp")
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
        old = self._read_json(RUN_FILE)
        if old["fingerprint"] != new["fingerprint"]:
            diffs = "\n  ".join(_differences(old["fields"], fields))
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
        """Publish the prepared prompts once: written aside, then moved in (rejects first, so a
        reader that sees prompts.jsonl sees its rejects too).

        `prompts` is consumed before `rejects` is read, so both may be filled by one stream as it
        goes (`prompts.prepare.iter_prepared_prompts`): the prompt list is never held in memory.

        Shards starting together may all prepare; preparation is deterministic for a fingerprint,
        so their files are identical and whichever lands is right. One that finds the file already
        there drops its own copy rather than replace a file other nodes may be reading.
        """

        def lines(items: Iterable[Any]) -> Callable[[IO[bytes]], None]:
            def write(handle: IO[bytes]) -> None:
                for item in items:
                    # A shallow dict: `asdict` would deep-copy every message and id list first.
                    record = _prompt_record(item) if isinstance(item, PreparedPrompt) else item
                    handle.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n")

            return write

        prompts_tmp = self._write_new(PROMPTS_FILE, lines(prompts))
        try:
            rejects_tmp = self._write_new(REJECTS_FILE, lines(rejects))
        except BaseException:
            self.fs.rm(prompts_tmp)
            raise
        kill_point("prompts.written")
        if self.prompts_ready:
            self.fs.rm([rejects_tmp, prompts_tmp])
            return
        self._install(rejects_tmp, REJECTS_FILE)
        self._install(prompts_tmp, PROMPTS_FILE)

    def iter_prompts(self, keep: Callable[[int], bool] | None = None) -> Iterator[PreparedPrompt]:
        """Prepared prompts in sample_id order; `keep(sample_id)` skips others without parsing them."""
        with self.fs.open(self._path(PROMPTS_FILE), "rb") as handle:
            for line in handle:
                if keep is not None:
                    head = _PROMPT_ID.match(line)
                    if head is not None and not keep(int(head.group(1))):
                        continue
                yield PreparedPrompt(**json.loads(line))

    def prompt_ids(self) -> np.ndarray:
        """All prepared sample_ids (int64), read without parsing the prompts."""
        ids = array("q")
        with self.fs.open(self._path(PROMPTS_FILE), "rb") as handle:
            for line in handle:
                head = _PROMPT_ID.match(line)
                ids.append(int(head.group(1)) if head else json.loads(line)["sample_id"])
        return np.frombuffer(ids, dtype=np.int64) if len(ids) else np.zeros(0, np.int64)

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
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
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
