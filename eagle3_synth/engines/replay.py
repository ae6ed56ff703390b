"""`replay` engine: results recorded elsewhere or earlier, read back from JSONL (the import path).

Each line is `{"sample_id": int, "output_ids": [int, ...], "finish_reason"?: str, "error"?: str}` --
the format of an existing `raw_responses.jsonl` -- so earlier runs and outside results can be
imported and tests can feed exact outputs. The file is indexed by byte offset, not loaded, so
memory stays flat in its size.

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
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Iterator
from pathlib import Path

import orjson

from eagle3_synth.errors import ConfigError, EngineError
from eagle3_synth.contract.row import FINISH_REASONS
from eagle3_synth.engines.base import (EngineOptions, GenerationRequest, GenerationResult, SamplingParams, abort_result,
                                       take_requests)
from eagle3_synth.engines.result_checks import check_generation, output_problem


_SAMPLE_ID = re.compile(rb'"sample_id"\s*:\s*(-?\d+)')
# Problems listed by number in `check_replay_file`'s message beyond the first.
_MORE = 5
_NOTHING_GENERATED = "nothing was generated: fix the file and run again"


class BadRecord(ValueError):
    """A replay line that is not a result record; the message says why (no location)."""


def index_replay_file(path: str) -> dict[int, tuple[int, int]]:
    """sample_id -> (byte offset, line number) of its line; a sample_id on two lines is a ConfigError.

    Only the id is needed to index, so it is matched in the raw line instead of parsing
    thousands of output ids per line; the line is parsed in full when it is checked or replayed.
    """
    found: dict[int, tuple[int, int]] = {}
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
            offset += len(line)
    return found


def read_record(line: bytes, stop_token_ids: Collection[int]) -> GenerationResult:
    """One line as a result (prompt_tokens 0: the record holds no prompt); `BadRecord` if it is none."""
    try:
        record = orjson.loads(line)  # ~3x json.loads on thousands of ids
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
    if finish_reason is None:
        # Older raw_responses.jsonl files carry no finish reason: a final stop token says it.
        finish_reason = "stop" if output_ids and output_ids[-1] in stop_token_ids else "length"
    if finish_reason not in FINISH_REASONS:
        raise BadRecord(f"finish_reason {finish_reason!r} is not one of {FINISH_REASONS}")
    if finish_reason == "abort":
        request = GenerationRequest(sample_id, [])
        return abort_result(request, str(record.get("error") or "aborted (a replayed abort record)"))
    return GenerationResult(sample_id=sample_id, output_ids=output_ids, finish_reason=finish_reason,
                            prompt_tokens=0, completion_tokens=len(output_ids))


def check_replay_file(path: str, params: SamplingParams) -> None:
    """Every record of the file checked as a result would be (`output_problem`), before any run starts:
    a ConfigError naming the first bad `FILE:LINE` and its sample (and how many more there are)."""
    try:
        index = index_replay_file(path)
    except ConfigError as exc:
        raise ConfigError(f"{exc}; {_NOTHING_GENERATED}") from None
    problems: list[str] = []
    with open(path, "rb") as handle:
        for sample_id, (offset, line_number) in sorted(index.items(), key=lambda item: item[1]):
            handle.seek(offset)
            where = f"{path}:{line_number}"
            try:
                result = read_record(handle.readline(), params.stop_token_ids)
            except BadRecord as exc:
                problems.append(f"{where}: {exc}")
                continue
            problem = (output_problem(result, params) if result.sample_id == sample_id
                       else f"\"sample_id\": {sample_id} found in the line, but its sample_id is {result.sample_id}")
            if problem is not None:
                problems.append(f"{where}: sample_id {result.sample_id}: {problem}")
    if problems:
        more = f" (and {len(problems) - 1} more: {'; '.join(problems[1:1 + _MORE])}{' ...' if len(problems) > 1 + _MORE else ''})"
        raise ConfigError(f"replay record {problems[0]}{more if len(problems) > 1 else ''}; {_NOTHING_GENERATED}")


class ReplayEngine:
    def __init__(self, path: str):
        self.path = path
        self.offsets = index_replay_file(path)
        self._handle = open(path, "rb")

    def _result(self, request: GenerationRequest, run: SamplingParams) -> GenerationResult:
        params = request.params(run)  # the request's own cap is what a record is checked against
        found = self.offsets.get(request.sample_id)
        if found is None:
            return abort_result(request, f"replay file {self.path} has no record for sample_id {request.sample_id}")
        offset, line_number = found
        where = f"{self.path}:{line_number}"
        self._handle.seek(offset)
        try:
            result = read_record(self._handle.readline(), params.stop_token_ids)
        except BadRecord as exc:
            raise EngineError(f"sample_id {request.sample_id}: {where} returned a result that breaks the contract: "
                              f"{exc}") from None
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
