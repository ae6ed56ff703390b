"""The journal: engine results as append-only JSONL segments, and the index that reads them back.

Layout and guarantees are in `directory.py`'s module doc. Each process that generates writes its
own segments (`journal/<session>-<seg>.jsonl`: a header line, then one result per line) and never
touches another's; the index keeps a few numbers a result (sample id, finish reason, byte offset).
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import re
import secrets
import socket
import time
from array import array
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any

import numpy as np
import orjson

from eagle3_synth.files import utc_timestamp
from eagle3_synth.engines.base import GenerationResult
from eagle3_synth.errors import ConfigError
from eagle3_synth.contract.row import FINISH_REASONS
from eagle3_synth.run.kill_points import kill_point

# A JSON line's `"output_ids"` array read straight into numpy, where that is provably what a JSON
# parser would read; None otherwise, and the caller parses the line as it always did.
#
# Why: assembly reads every journal line again, and its thousands of ids went from JSON to Python
# ints (orjson) to Arrow and through the marker search as Python objects; as one numpy array they
# are joined into the Arrow column and searched without a Python object per id. Reading them from
# the digits is as fast as orjson plus packing, and exact where packing orjson's list would not be
# (a `true` in the list would pack as 1): `split_ids` only accepts text whose meaning is beyond doubt:
#   - the key `"output_ids"` occurs once in the line (a `"` inside a JSON string is escaped, so the
#     key's bytes cannot come from a string's text), and the caller checks that the rest of the line
#     parses to an object whose `output_ids` is the emptied `[]` (so the array was the top-level value);
#   - the array's text is plain JSON integers, commas and spaces (`parse_int_array`);
#   - every id is below 2**31: the same number as an int32, the contract's column type.
# Nothing is decoded and no id is re-encoded: the digits are the ids.

_KEY = b'"output_ids"'
_DIGITS = b"0123456789"
_TENS = np.array([10 ** k for k in range(1, 19)], np.int64)  # a number's digits: 1 + how many of these it reaches
_LIMIT = 2 ** 31


def split_ids(line: bytes) -> tuple[bytes, np.ndarray] | None:
    """(the line with its `"output_ids"` array emptied, the ids as int64), or None where the fast
    reading is not certain to equal a JSON parser's (see the module doc; the caller then parses
    the whole line, with its usual errors). The caller must check that the emptied line parses to
    an object whose `output_ids` is `[]`."""
    at = line.find(_KEY)
    if at < 0 or line.find(_KEY, at + len(_KEY)) >= 0:
        return None
    colon = at + len(_KEY)
    while line[colon:colon + 1] in (b" ", b":"):  # `"output_ids":[` or `"output_ids": [`
        colon += 1
    if line[colon:colon + 1] != b"[" or line[at + len(_KEY):colon].count(b":") != 1:
        return None
    begin = colon + 1
    end = line.find(b"]", begin)
    if end < 0:
        return None
    ids = parse_int_array(line[begin:end])
    if ids is None:
        return None
    return line[:begin] + line[end:], ids


def parse_int_array(body: bytes) -> np.ndarray | None:
    """The ids of an int array's text between its brackets (int64), None unless it is certain.

    Three checks in C make numpy's reading (strtoll per number, whitespace around a comma skipped,
    ValueError at anything else) the JSON reading: only digits, commas and spaces (JSON whitespace)
    are there; numpy read one number more than there are commas (so no element is empty or holds
    two numbers); and the numbers read have, written out, exactly the digits of the text (so none
    has a leading zero, which JSON forbids, and none saturated past int64). Every id < 2**31."""
    if not body:
        return np.zeros(0, np.int64)
    separators = body.translate(None, _DIGITS)
    if separators.translate(None, b", "):  # anything but digits, commas and spaces (signs, fractions ...)
        return None
    try:
        ids = np.fromstring(body, dtype=np.int64, sep=",")
    except ValueError:  # text numpy could not read to its end
        return None
    if len(ids) != separators.count(b",") + 1 or ids.max() >= _LIMIT:
        return None
    if int(np.searchsorted(_TENS, ids, side="right").sum()) + len(ids) != len(body) - len(separators):
        return None  # a leading zero (or whitespace read as a number)
    return ids


log = logging.getLogger(__name__)

JOURNAL_DIR = "journal"
JOURNAL_FORMAT = 1
DEFAULT_ROLL_SECONDS = 600.0
DEFAULT_ROLL_BYTES = 256 << 20

_HEADER_PREFIX = b'{"journal":'
_REASON_CODES = {reason: code for code, reason in enumerate(FINISH_REASONS)}
_ABORT = FINISH_REASONS.index("abort")

def encode_result(result: GenerationResult, *, continues: bool = False, prompt: TurnPrompt | None = None) -> bytes:
    """One journal line; `sample_id` and `finish_reason` first, `output_ids` last.

    A turn of an on-policy conversation (`run/conversations.py`) adds `"continues": true` to the
    head when its rollout has a next turn, and, past the first turn, the prompt it was generated
    from (`prompt_ids`, `messages`): later turns' prompts exist nowhere else.

    orjson writes the same bytes as `json.dumps(record, ensure_ascii=False, separators=(",", ":"))`
    for these types (ints, strings, null), and far faster on lines of thousands of ids.
    """
    record: dict[str, Any] = {"sample_id": result.sample_id, "finish_reason": result.finish_reason}
    if continues:
        record["continues"] = True
    record.update({
        "prompt_tokens": result.prompt_tokens,
        "completion_tokens": result.completion_tokens,
        "cached_tokens": result.cached_tokens,
        "error": result.error,
    })
    if result.retractions:
        record["retractions"] = result.retractions
    if prompt is not None:
        record["prompt_ids"] = prompt.prompt_ids
        record["messages"] = prompt.messages
    record["output_ids"] = result.output_ids
    return orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)


@dataclass(frozen=True)
class TurnPrompt:
    """The prompt of a turn past a rollout's first, journaled with its result."""

    prompt_ids: list[int]
    messages: list[dict[str, Any]]


def new_session_id() -> str:
    """UTC start first, so sorting file names sorts sessions by start; the tag keeps names unique."""
    host = re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname())[:40] or "host"
    return f"{utc_timestamp(compact=True)}-{host}-{os.getpid()}-{secrets.token_hex(3)}"


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

    def append(self, result: GenerationResult, *, continues: bool = False, prompt: TurnPrompt | None = None) -> None:
        handle = self._handle or self._open_segment()
        line = encode_result(result, continues=continues, prompt=prompt)
        kill_point("journal.before_write")
        half = len(line) // 2
        with self._naming_the_file():
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
        with self._naming_the_file():
            try:
                handle.flush()
                if self.flush_lines:  # local disk: make the finished file survive a power cut too
                    os.fsync(handle.fileno())
            finally:
                handle.close()

    @contextmanager
    def _naming_the_file(self) -> Iterator[None]:
        """A failed write (a full or read-only disk) names the journal file: an OSError from a
        write on an open file carries no file name. Every line before it stays journaled."""
        try:
            yield
        except OSError as exc:
            if exc.filename is not None or not self.paths:
                raise
            raise OSError(exc.errno, exc.strerror or str(exc), self.paths[-1]) from exc

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

    About 30 bytes a sample (not a dict of Python objects), so memory stays small next to the
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
    continues: np.ndarray | None = None  # bool: the result's rollout has a next turn (None: none has)
    completion_tokens: np.ndarray | None = None  # int32 output ids of each result, from its head (None: 0)

    def __post_init__(self) -> None:
        if self.continues is None:
            self.continues = np.zeros(len(self.sample_ids), dtype=bool)
        if self.completion_tokens is None:
            self.completion_tokens = np.zeros(len(self.sample_ids), dtype=np.int32)

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
    def reader(self, fs: Any, *, array_ids: bool = False) -> Iterator[Callable[[int], dict[str, Any]]]:
        """`read(position) -> result dict`, keeping a few files open (results are scattered).

        With `array_ids` the dict's `output_ids` is a numpy int64 array (for assembly: its ids go to
        Arrow and the marker search as arrays) where it can be read straight from the line's digits
        (below: no Python int per id, every id below 2**31); otherwise the parsed
        list, as without it."""
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
                if array_ids:
                    return _with_array_ids(line)
                return orjson.loads(line)  # orjson: far quicker than json.loads on a line of thousands of ids
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


def _with_array_ids(line: bytes) -> dict[str, Any]:
    """A journal line parsed, its `output_ids` a numpy int64 array where certain (`JournalIndex.reader`)."""
    split = split_ids(line)
    if split is not None:
        try:
            record = orjson.loads(split[0])
        except orjson.JSONDecodeError:
            record = None
        if isinstance(record, dict) and record.get("output_ids") == []:
            record["output_ids"] = split[1]
            return record
    return orjson.loads(line)  # ids as a list, as ever: whatever they hold meets the usual checks


def scan_journal(fs: Any, files: list[str], expected_fingerprint: str | None) -> JournalIndex:
    """Index every journal file; refuse files written for another fingerprint."""
    ids, file_index, offsets, reasons, continues = array("q"), array("i"), array("q"), array("b"), array("b")
    completion = array("i")
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
                    head = _result_head(line)
                    if head is None:
                        corrupt += 1
                        log.warning("%s:%d: not a valid journal result; skipped (that sample is generated again)",
                                    path, line_number)
                    else:
                        ids.append(head[0])
                        file_index.append(number)
                        offsets.append(offset)
                        reasons.append(head[1])
                        continues.append(head[2])
                        completion.append(head[3])
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
        continues=_numpy(continues, np.int8)[chosen].astype(bool),
        completion_tokens=_numpy(completion, np.int32)[chosen],
        sessions=sessions,
        duplicates=duplicates,
        torn=torn,
        corrupt=corrupt,
    )


def _result_head(line: bytes) -> tuple[int, int, bool, int] | None:
    """(sample_id, finish reason code, continues, completion_tokens) of a result line; None for anything
    that is not a whole result (a torn line run together with the next, a hand edit): not trusted.

    The fields before `output_ids` (written last, `encode_result`) are parsed as an object of their
    own; the thousands of ids behind them are parsed when the result is read (`JournalIndex.reader`)."""
    at = line.rfind(b',"output_ids":[')
    if at < 0 or not line.endswith(b"]}\n"):
        return None
    try:
        record = orjson.loads(line[:at] + b"}")
    except orjson.JSONDecodeError:
        return None
    if not isinstance(record, dict):
        return None
    sample_id, reason = record.get("sample_id"), record.get("finish_reason")
    if type(sample_id) is not int or sample_id < 0 or not isinstance(reason, str) or reason not in _REASON_CODES:
        return None
    completion = record.get("completion_tokens")
    completion = completion if type(completion) is int else 0
    return sample_id, _REASON_CODES[reason], record.get("continues") is True, completion


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
