"""`replay` engine: results recorded earlier, read back from JSONL.

Each line is `{"sample_id": int, "output_ids": [int, ...], "finish_reason"?: str}` -- the format of
an existing `raw_responses.jsonl` -- so earlier runs can be imported and tests can feed exact
outputs. The file is indexed by byte offset, not loaded, so memory stays flat in its size.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

import orjson

from eagle3_synth.errors import ConfigError
from eagle3_synth.contract.row import FINISH_REASONS
from eagle3_synth.engines.base import (EngineOptions, GenerationRequest, GenerationResult, SamplingParams, abort_result,
                                       take_requests)


_SAMPLE_ID = re.compile(rb'"sample_id"\s*:\s*(-?\d+)')


def index_replay_file(path: str) -> dict[int, int]:
    """sample_id -> byte offset of its line; the last line for an id wins (a later retry).

    Only the id is needed to index, so it is matched in the raw line instead of parsing
    thousands of output ids per line; the line is parsed in full when it is replayed.
    """
    offsets: dict[int, int] = {}
    with open(path, "rb") as handle:
        offset = 0
        for line_number, line in enumerate(handle, start=1):
            if line.strip():
                match = _SAMPLE_ID.search(line)
                if match is None:
                    raise ConfigError(f"{path}:{line_number}: not a replay record (no integer sample_id)")
                offsets[int(match.group(1))] = offset
            offset += len(line)
    return offsets


class ReplayEngine:
    def __init__(self, path: str):
        self.path = path
        self.offsets = index_replay_file(path)
        self._handle = open(path, "rb")

    def _read(self, offset: int) -> object:
        self._handle.seek(offset)
        return orjson.loads(self._handle.readline())  # ~3x json.loads on thousands of ids

    def _result(self, request: GenerationRequest, params: SamplingParams) -> GenerationResult:
        offset = self.offsets.get(request.sample_id)
        if offset is None:
            return abort_result(request, f"replay file {self.path} has no record for sample_id {request.sample_id}")
        try:
            record = self._read(offset)
        except orjson.JSONDecodeError as exc:
            return abort_result(request, f"replay record for sample_id {request.sample_id} (byte {offset} of "
                                         f"{self.path}) is not valid JSON: {exc}")
        if not isinstance(record, dict):
            return abort_result(request, f"replay record for sample_id {request.sample_id} is not a JSON object")
        output_ids = record.get("output_ids")
        # Exactly ints (not bools, which json also reads as ints); the set is built in C.
        if not isinstance(output_ids, list) or not set(map(type, output_ids)) <= {int}:
            return abort_result(request, f"replay record for sample_id {request.sample_id}: output_ids is not a list of ints")
        finish_reason = record.get("finish_reason")
        if finish_reason is None:
            # Older raw_responses.jsonl files carry no finish reason: a final stop token says it.
            finish_reason = "stop" if output_ids and output_ids[-1] in params.stop_token_ids else "length"
        if finish_reason not in FINISH_REASONS:
            return abort_result(request, f"replay record for sample_id {request.sample_id}: finish_reason {finish_reason!r}")
        return GenerationResult(
            sample_id=request.sample_id,
            output_ids=output_ids,
            finish_reason=finish_reason,
            prompt_tokens=len(request.prompt_ids),
            completion_tokens=len(output_ids),
            error=record.get("error"),
        )

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
