"""`replay` engine: results recorded elsewhere or earlier, read back from JSONL (the import path).

Each line is `{"sample_id": int, "output_ids": [int, ...], "finish_reason"?: str, "error"?: str}` --
the format of an existing `raw_responses.jsonl` -- so earlier runs and outside results can be
imported and tests can feed exact outputs. The file is never loaded: memory stays flat in its size.

Imported results go through the contract check every engine's results do
(`result_checks.check_generation`), with the same outcome: a record that breaks the contract (not
a JSON object, output_ids not a list of ints, an unknown finish_reason, a `stop` without its stop
token last or with no ids, more ids than max_new_tokens, an id outside the vocabulary, a stop id
before the end) is an error naming `FILE:LINE` and the sample, never a row. `check_replay_file`
runs those checks over the whole file, and refuses a sample_id recorded twice, before the run
directory is claimed: a bad file generates nothing, and the fixed file starts the run. Playback
checks each record again with its request (what needs the prompt: a leaked prompt); a violation
there stops the run, what was journaled stays. A sample without a record, or with an `abort`
record, is that sample's error (reported, `--retry-errors`).

The file is parsed once (parsing it again at playback would pay the
file's parse twice): the check keeps what it parsed (`CheckedReplay`: a few numbers a record in
memory, the output ids in an unlinked temporary file, 4 bytes an id) and playback reads the ids back
from there. Without the check (the Python API, a check that could not keep its records) the file is
indexed by byte offset and each line parsed when it is played.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
import threading
from array import array
from collections.abc import Collection, Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np
import orjson

from eagle3_synth.errors import ConfigError, EngineError
from eagle3_synth.contract.row import FINISH_REASONS
from eagle3_synth.engines.base import (Engine, EngineOptions, GenerationRequest, GenerationResult, SamplingParams,
                                       abort_result, take_requests)
from eagle3_synth.engines.result_checks import check_generation, output_problem

log = logging.getLogger(__name__)

_SAMPLE_ID = re.compile(rb'"sample_id"\s*:\s*(-?\d+)')
# Problems listed by number in `check_replay_file`'s message beyond the first.
_MORE = 5
_NOTHING_GENERATED = "nothing was generated: fix the file and run again"
# Kept output ids: unsigned 32-bit (every id was checked to be in the vocabulary, 0 <= id < vocab_size).
_TYPECODE = "I"
_ITEM = array(_TYPECODE).itemsize
_DTYPE = np.dtype(f"=u{_ITEM}")  # the same numbers seen by numpy


class BadRecord(ValueError):
    """A replay line that is not a result record; the message says why (no location)."""


class CheckStopped(Exception):
    """`check_replay_file` stopped before the end of the file, as its caller asked (`stop`)."""


def _indexed_lines(path: str, found: dict[int, tuple[int, int]]) -> Iterator[tuple[int, int, bytes]]:
    """(line number, sample_id, line) of every non-blank line, each recorded in `found` as sample_id ->
    (byte offset, line number); a line without a sample_id, or a sample_id on two lines, is a ConfigError.

    Only the id is needed to index, so it is matched in the raw line instead of parsing
    thousands of output ids per line; the line is parsed in full when it is checked or replayed.
    """
    if not Path(path).is_file():
        raise ConfigError(f"--replay {path}: no such file")
    with open(path, "rb") as handle:
        offset = 0
        for line_number, line in enumerate(handle, start=1):
            if line.strip():
                match = _SAMPLE_ID.search(line)
                if match is None:
                    raise ConfigError(f"replay record {path}:{line_number}: no integer sample_id")
                sample_id = int(match.group(1))
                if sample_id in found:
                    raise ConfigError(f"replay record {path}:{line_number}: sample_id {sample_id} is recorded again (first at line "
                                      f"{found[sample_id][1]}); keep one record per sample")
                found[sample_id] = (offset, line_number)
                yield line_number, sample_id, line
            offset += len(line)


def index_replay_file(path: str) -> dict[int, tuple[int, int]]:
    """sample_id -> (byte offset, line number) of its line; a sample_id on two lines is a ConfigError."""
    found: dict[int, tuple[int, int]] = {}
    for _ in _indexed_lines(path, found):
        pass
    return found


class Record(NamedTuple):
    """A replay line's fields, checked for their types (`parse_record`)."""

    sample_id: int
    output_ids: list[int]
    finish_reason: str | None  # None: not recorded; the ids say it (`as_result`)
    error: str | None  # an abort record's message


def parse_record(line: bytes) -> Record:
    """One line's fields; `BadRecord` if it is no result record."""
    try:
        record = orjson.loads(line)  # orjson: far quicker than json.loads on thousands of ids
    except orjson.JSONDecodeError as exc:
        raise BadRecord(f"not valid JSON ({exc})") from None
    if not isinstance(record, dict):
        raise BadRecord("not a JSON object")
    sample_id = record.get("sample_id")
    if type(sample_id) is not int:
        raise BadRecord(f"sample_id {sample_id!r} is not an integer")
    output_ids = record.get("output_ids")
    # Exactly ints (not bools, which json also reads as ints); the set is built in C.
    if not isinstance(output_ids, list) or not set(map(type, output_ids)) <= {int}:
        raise BadRecord("output_ids is not a list of ints")
    finish_reason = record.get("finish_reason")
    if finish_reason is not None and finish_reason not in FINISH_REASONS:
        raise BadRecord(f"finish_reason {finish_reason!r} is not one of {FINISH_REASONS}")
    error = str(record.get("error") or "aborted (a replayed abort record)") if finish_reason == "abort" else None
    return Record(sample_id, output_ids, finish_reason, error)


def as_result(record: Record, stop_token_ids: Collection[int]) -> GenerationResult:
    """A record as a result (prompt_tokens 0: the record holds no prompt)."""
    finish_reason, output_ids = record.finish_reason, record.output_ids
    if finish_reason is None:
        # Older raw_responses.jsonl files carry no finish reason: a final stop token says it.
        finish_reason = "stop" if output_ids and output_ids[-1] in stop_token_ids else "length"
    if finish_reason == "abort":
        return abort_result(GenerationRequest(record.sample_id, []), record.error or "")
    return GenerationResult(sample_id=record.sample_id, output_ids=output_ids, finish_reason=finish_reason,
                            prompt_tokens=0, completion_tokens=len(output_ids))


def _output_params(params: SamplingParams) -> tuple[int, int | None, tuple[int, ...]]:
    """What `output_problem` (and a missing finish reason) reads of the params."""
    return params.max_new_tokens, params.vocab_size, tuple(params.stop_token_ids)


class Kept(NamedTuple):
    """One checked record as `CheckedReplay` keeps it: its ids are `count` ids from `start` in the spill."""

    line_number: int
    finish_reason: str | None  # as recorded
    error: str | None
    start: int
    count: int


class CheckedReplay:
    """A replay file's records as `check_replay_file` parsed and checked them, played by `ReplayEngine`
    without parsing the file again.

    Memory stays flat in the file's size: a few numbers a record are held, the output ids go to an
    unlinked temporary file (TMPDIR; 4 bytes an id, less than the JSON holds) and are read back a record at a
    time. Playback plays what was checked, even if the file changed since. Where the temporary file
    cannot be written (a full TMPDIR) nothing is kept (`ready` says None): the check still holds,
    and playback parses the file again.
    """

    def __init__(self, path: str, params: SamplingParams):
        self.path = path
        self._checked_with = _output_params(params)
        self.records: dict[int, Kept] = {}
        self._spill = tempfile.TemporaryFile(prefix="eagle3-synth-replay-")
        self._ids = 0
        self._failed: OSError | None = None

    @staticmethod
    def can_keep(params: SamplingParams) -> bool:
        """Ids are kept as unsigned 32-bit numbers: only where each is checked to fit (a known vocabulary)."""
        return params.vocab_size is not None and params.vocab_size <= 2 ** (8 * _ITEM)

    def checked_for(self, params: SamplingParams) -> bool:
        """Whether the records were checked with what `output_problem` reads of `params` (a request
        of the run's own cap: its output needs no second check)."""
        return _output_params(params) == self._checked_with

    def keep(self, line_number: int, record: Record, ids: array) -> None:
        """Keep one checked record (its ids, `packed`, appended to the spill)."""
        if self._failed is not None:
            return
        try:
            self._spill.write(ids)
        except OSError as exc:
            self._give_up(exc)
            return
        self.records[record.sample_id] = Kept(line_number, record.finish_reason, record.error, self._ids, len(ids))
        self._ids += len(ids)

    def _give_up(self, exc: OSError) -> None:
        log.warning("replay: the checked records of %s could not be kept (%s); playback parses the file again",
                    self.path, exc)
        self._failed = exc
        self.close()
        self.records.clear()

    def ready(self) -> CheckedReplay | None:
        """Every record kept: the spill written out for reading back; None where it could not be."""
        if self._failed is None:
            try:
                self._spill.flush()
            except OSError as exc:
                self._give_up(exc)
        return self if self._failed is None else None

    def record(self, sample_id: int) -> tuple[Record, int] | None:
        """A kept record, its output ids read back from the spill, and its line number; None if none."""
        kept = self.records.get(sample_id)
        if kept is None:
            return None
        data = os.pread(self._spill.fileno(), kept.count * _ITEM, kept.start * _ITEM)
        ids = memoryview(data).cast(_TYPECODE).tolist()
        return Record(sample_id, ids, kept.finish_reason, kept.error), kept.line_number

    def close(self) -> None:
        """Frees the spill's disk space (it is unlinked already)."""
        try:
            self._spill.close()
        except OSError:  # a failed flush of the buffered tail: nothing is read from it any more
            pass


def packed(ids: list[int]) -> array | None:
    """The ids as the spill holds them (unsigned 32-bit), None if one does not fit (then it is outside
    any vocabulary `CheckedReplay.can_keep` allows, which the check names)."""
    try:
        return array(_TYPECODE, ids)
    except OverflowError:
        return None


def _line_problem(path: str, line_number: int, sample_id: int, line: bytes, params: SamplingParams
                  ) -> tuple[Record | None, array | None, str | None]:
    """One indexed line parsed and checked as a result would be: (the record, its ids packed where
    they can be kept, None), or (None, None, the problem). The packed ids are what the scans of the
    check run over (in numpy), and what the spill keeps."""
    where = f"{path}:{line_number}"
    try:
        record = parse_record(line)
    except BadRecord as exc:
        return None, None, f"{where}: {exc}"
    if record.sample_id != sample_id:
        return None, None, (f"{where}: sample_id {record.sample_id}: \"sample_id\": {sample_id} found in the line, "
                            f"but its sample_id is {record.sample_id}")
    ids = packed(record.output_ids) if CheckedReplay.can_keep(params) else None
    problem = output_problem(as_result(record, params.stop_token_ids), params,
                             packed=None if ids is None else np.frombuffer(ids, dtype=_DTYPE))
    return (record, ids, None) if problem is None else (None, None, f"{where}: sample_id {record.sample_id}: {problem}")


def _check_lines(path: str, params: SamplingParams, kept: CheckedReplay | None,
                 stop: threading.Event | None = None) -> list[str]:
    """Every line indexed and checked in one pass, in file order, the good ones handed to `kept`; the
    problems found. A line without a sample_id, or one recorded twice, is refused at once (as indexing is).
    `CheckStopped` once `stop` is set (a check in a thread whose run was interrupted)."""
    problems: list[str] = []
    try:
        for line_number, sample_id, line in _indexed_lines(path, {}):
            if stop is not None and stop.is_set():
                raise CheckStopped(f"the check of {path} was stopped at line {line_number}")
            record, ids, problem = _line_problem(path, line_number, sample_id, line, params)
            if problem is not None:
                problems.append(problem)
            elif kept is not None and not problems:  # once one is bad nothing is played: keeping stops
                kept.keep(line_number, record, ids)
    except ConfigError as exc:
        raise ConfigError(f"{exc}; {_NOTHING_GENERATED}") from None
    return problems


def _refusal(problems: list[str]) -> ConfigError:
    """The first problem named, how many more there are and the first few of them, on one line."""
    more = f" (and {len(problems) - 1} more: {'; '.join(problems[1:1 + _MORE])}{' ...' if len(problems) > 1 + _MORE else ''})"
    return ConfigError(f"replay record {problems[0]}{more if len(problems) > 1 else ''}; {_NOTHING_GENERATED}")


def _start_keeping(path: str, params: SamplingParams) -> CheckedReplay | None:
    """A store for the checked records, or None where ids cannot be kept (then playback parses the file)."""
    if not CheckedReplay.can_keep(params):
        return None
    try:
        return CheckedReplay(path, params)
    except OSError as exc:
        log.warning("replay: no temporary file for the checked records of %s (%s); playback parses it again", path, exc)
        return None


def check_replay_file(path: str, params: SamplingParams, *, keep: bool = False,
                      stop: threading.Event | None = None) -> CheckedReplay | None:
    """Every record of the file checked as a result would be (`output_problem`), before any run starts:
    a ConfigError naming the first bad `FILE:LINE` and its sample (and how many more there are).

    With `keep` the checked records are returned for `ReplayEngine` to play (the caller closes them),
    so that the file is parsed once; None without it, or where they could not be kept. Setting `stop`
    (from another thread) ends the check at the next line with `CheckStopped`.
    """
    kept = _start_keeping(path, params) if keep else None
    try:
        problems = _check_lines(path, params, kept, stop)
    except BaseException:
        if kept is not None:
            kept.close()
        raise
    if problems:
        if kept is not None:
            kept.close()
        raise _refusal(problems)
    return kept.ready() if kept is not None else None


class ReplayEngine(Engine):
    """Plays a replay file's records as results, each checked with its request (`check_generation`).

    Given `checked` (what `check_replay_file(..., keep=True)` kept), plays from there and never opens
    the file; without it, indexes the file and parses each line as it is played.
    """

    def __init__(self, path: str, checked: CheckedReplay | None = None):
        if checked is not None and checked.path != path:
            raise ValueError(f"the checked records are those of {checked.path}, not of {path}")
        self.path = path
        self.checked = checked
        self.offsets = index_replay_file(path) if checked is None else {}
        self._handle = open(path, "rb") if checked is None else None

    def _parsed(self, sample_id: int) -> tuple[Record, int] | None:
        """The sample's record parsed from the file, and its line number; None if it has none."""
        found = self.offsets.get(sample_id)
        if found is None:
            return None
        offset, line_number = found
        self._handle.seek(offset)
        try:
            return parse_record(self._handle.readline()), line_number
        except BadRecord as exc:
            raise EngineError(f"sample_id {sample_id}: {self.path}:{line_number} returned a result that breaks the "
                              f"contract: {exc}") from None

    def _result(self, request: GenerationRequest, run: SamplingParams) -> GenerationResult:
        params = request.params(run)  # the request's own cap is what a record is checked against
        found = self.checked.record(request.sample_id) if self.checked is not None else self._parsed(request.sample_id)
        if found is None:
            return abort_result(request, f"replay file {self.path} has no record for sample_id {request.sample_id}")
        record, line_number = found
        where = f"{self.path}:{line_number}"
        result = as_result(record, params.stop_token_ids)
        if result.finish_reason == "abort":
            return abort_result(request, f"{where}: {result.error}")
        result.prompt_tokens = len(request.prompt_ids)  # the record has none: the prompt is the run's own
        # A kept record was checked with these params before the run: only what needs the request is left.
        checked = self.checked is not None and self.checked.checked_for(params)
        return check_generation(request, result, params, where, output_checked=checked)

    def generate(self, requests: Iterable[GenerationRequest], params: SamplingParams) -> Iterator[GenerationResult]:
        iterator = iter(requests)
        exhausted = False
        while not exhausted:
            batch, exhausted = take_requests(iterator, 1)
            for request in batch:
                yield self._result(request, params)

    def close(self) -> None:
        """Closes the file if it was opened; the checked records belong to whoever checked the file."""
        if self._handle is not None:
            self._handle.close()


def create(options: EngineOptions) -> ReplayEngine:
    if not options.replay_file:
        raise ConfigError("--engine replay needs --replay FILE (JSONL of recorded results)")
    return ReplayEngine(options.replay_file, options.replay_checked)
