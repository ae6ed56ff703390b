"""`replay` engine: results recorded elsewhere or earlier, read back from JSONL (the import path).

Each line is `{"sample_id": int, "output_ids": [int, ...], "finish_reason"?: str, "error"?: str}` --
the format of an existing `raw_responses.jsonl` -- so earlier runs and outside results can be
imported and tests can feed exact outputs. The file is never loaded: memory stays flat in its size.

Imported results go through the contract check every engine's results do
(`base.check_generation`), with the same outcome: a record that breaks the contract (not
a JSON object, output_ids not a list of ints, an unknown finish_reason, a `stop` without its stop
token last or with no ids, more ids than max_new_tokens, an id outside the vocabulary, a stop id
before the end) is an error naming `FILE:LINE` and the sample, never a row. `check_replay_file`
runs those checks over the whole file, and refuses a sample_id recorded twice, before the run
directory is claimed: a bad file generates nothing, and the fixed file starts the run. Playback
indexes the file by byte offset, parses each line as it is played and checks the record again with
its request (what needs the prompt: a leaked prompt); a violation there stops the run, what was
journaled stays. A sample without a record, or with an `abort` record, is that sample's error
(reported, `--retry-errors`).

"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

import orjson

from eagle3_synth.errors import ConfigError, EngineError
from eagle3_synth.contract.row import FINISH_REASONS
from eagle3_synth.engines.base import (Engine, EngineOptions, GenerationRequest, GenerationResult, SamplingParams,
                                       abort_result, take_requests, check_generation, output_problem)

_SAMPLE_ID = re.compile(rb'"sample_id"\s*:\s*(-?\d+)')
# Problems listed by number in `check_replay_file`'s message beyond the first.
_MORE = 5
_NOTHING_GENERATED = "nothing was generated: fix the file and run again"


class BadRecord(ValueError):
    """A replay line that is not a result record; the message says why (no location)."""


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


def _line_problem(path: str, line_number: int, sample_id: int, line: bytes, params: SamplingParams
                  ) -> str | None:
    """One indexed line parsed and checked as a result would be: its problem, None if it has none."""
    where = f"{path}:{line_number}"
    try:
        record = parse_record(line)
    except BadRecord as exc:
        return f"{where}: {exc}"
    if record.sample_id != sample_id:
        return (f"{where}: sample_id {record.sample_id}: \"sample_id\": {sample_id} found in the line, "
                f"but its sample_id is {record.sample_id}")
    problem = output_problem(as_result(record, params.stop_token_ids), params)
    return None if problem is None else f"{where}: sample_id {record.sample_id}: {problem}"


def _refusal(problems: list[str]) -> ConfigError:
    """The first problem named, how many more there are and the first few of them, on one line."""
    more = f" (and {len(problems) - 1} more: {'; '.join(problems[1:1 + _MORE])}{' ...' if len(problems) > 1 + _MORE else ''})"
    return ConfigError(f"replay record {problems[0]}{more if len(problems) > 1 else ''}; {_NOTHING_GENERATED}")


def check_replay_file(path: str, params: SamplingParams) -> None:
    """Every record of the file checked as a result would be (`output_problem`), before any run starts:
    a ConfigError naming the first bad `FILE:LINE` and its sample (and how many more there are). A line
    without a sample_id, or one recorded twice, is refused at once (as indexing is)."""
    problems: list[str] = []
    try:
        for line_number, sample_id, line in _indexed_lines(path, {}):
            problem = _line_problem(path, line_number, sample_id, line, params)
            if problem is not None:
                problems.append(problem)
    except ConfigError as exc:
        raise ConfigError(f"{exc}; {_NOTHING_GENERATED}") from None
    if problems:
        raise _refusal(problems)


class ReplayEngine(Engine):
    """Plays a replay file's records as results, each checked with its request (`check_generation`)."""

    def __init__(self, path: str):
        self.path = path
        self.offsets = index_replay_file(path)
        self._handle = open(path, "rb")

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
        found = self._parsed(request.sample_id)
        if found is None:
            return abort_result(request, f"replay file {self.path} has no record for sample_id {request.sample_id}")
        record, line_number = found
        where = f"{self.path}:{line_number}"
        result = as_result(record, params.stop_token_ids)
        if result.finish_reason == "abort":
            return abort_result(request, f"{where}: {result.error}")
        result.prompt_tokens = len(request.prompt_ids)  # the record has none: the prompt is the run's own
        return check_generation(request, result, params, where)

    def generate(self, requests: Iterable[GenerationRequest], params: SamplingParams) -> Iterator[GenerationResult]:
        iterator = iter(requests)
        exhausted = False
        while not exhausted:
            batch, exhausted = take_requests(iterator, 1)
            for request in batch:
                yield self._result(request, params)

    def close(self) -> None:
        self._handle.close()


def create(options: EngineOptions) -> ReplayEngine:
    if not options.replay_file:
        raise ConfigError("--engine replay needs --replay FILE (JSONL of recorded results)")
    return ReplayEngine(options.replay_file)
