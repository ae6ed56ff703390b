"""Every SGLang result is checked before it is stored: a violation stops the run, naming the sample.

SGLang 0.5.23 returns `{"output_ids", "meta_info": {"finish_reason": {"type": ...}, "prompt_tokens",
"completion_tokens", "cached_tokens", ...}}` (plus `"text"` when it has a tokenizer). What we rely
on, and check here:
- `len(output_ids) == completion_tokens` (the stop token is kept and counted);
- `prompt_tokens == len(prompt_ids)` (nothing truncated or re-tokenized on the way);
- the output does not start with the prompt (a server that echoes the input);
- a token stop ends with the matched id;
- `finish_reason` maps to the contract's `stop` / `length` / `abort`.
An engine-side abort (`{"type": "abort", "message": ...}`) is not a violation: it becomes that
sample's error result, reported and generated again with `--retry-errors`.
"""

from __future__ import annotations

from typing import Any

from eagle3_synth.errors import EngineError
from eagle3_synth.engines.base import GenerationRequest, GenerationResult, abort_result

_FINISH_TYPES = ("stop", "length", "abort")


def _violation(request: GenerationRequest, source: str, what: str) -> EngineError:
    return EngineError(f"sample_id {request.sample_id}: {source} returned a result that breaks the contract: {what}")


def _int_field(meta: dict[str, Any], key: str, request: GenerationRequest, source: str) -> int:
    value = meta.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise _violation(request, source, f"meta_info.{key} is {value!r}, not an integer")
    return value


def abort_message(finish: dict[str, Any]) -> str:
    message = finish.get("message") or "aborted"
    status = finish.get("status_code")
    return f"aborted by SGLang: {message}" + (f" (status {status})" if status is not None else "")


def check_result(request: GenerationRequest, response: Any, source: str) -> GenerationResult:
    """Turn one SGLang result dict into a `GenerationResult`, or raise `EngineError` naming the sample.

    `source` says where the result came from (a URL, "sglang.Engine") for the message.
    """
    if not isinstance(response, dict):
        raise _violation(request, source, f"expected one result object, got {type(response).__name__}")
    meta = response.get("meta_info")
    if not isinstance(meta, dict):
        raise _violation(request, source, "no meta_info object")
    finish = meta.get("finish_reason")
    if not isinstance(finish, dict) or finish.get("type") not in _FINISH_TYPES:
        raise _violation(request, source, f"finish_reason {finish!r} is not one of {_FINISH_TYPES} (request unfinished?)")
    if finish["type"] == "abort":
        return abort_result(request, abort_message(finish))

    output_ids = response.get("output_ids")
    if not isinstance(output_ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in output_ids):
        raise _violation(request, source, "output_ids is not a list of integers (was the request sent as token ids?)")
    completion_tokens = _int_field(meta, "completion_tokens", request, source)
    if len(output_ids) != completion_tokens:
        raise _violation(request, source, f"len(output_ids) = {len(output_ids)} but completion_tokens = {completion_tokens}")
    prompt_tokens = _int_field(meta, "prompt_tokens", request, source)
    prompt = request.prompt_ids
    if prompt_tokens != len(prompt):
        raise _violation(request, source, f"prompt_tokens = {prompt_tokens} but {len(prompt)} prompt ids were sent "
                                          "(truncated, e.g. --allow-auto-truncate, or re-tokenized)")
    if prompt and output_ids[: len(prompt)] == prompt:
        raise _violation(request, source, "output_ids start with the prompt ids (the prompt leaked into the output)")
    if finish["type"] == "stop":
        matched = finish.get("matched")
        if not output_ids:
            raise _violation(request, source, "finish_reason stop with no output ids (the stop token must be kept)")
        if isinstance(matched, int) and output_ids[-1] != matched:
            raise _violation(request, source, f"stopped on token {matched} but the output ends with {output_ids[-1]} "
                                              "(the stop token must be kept, last)")
    cached = meta.get("cached_tokens")
    return GenerationResult(
        sample_id=request.sample_id,
        output_ids=output_ids,
        finish_reason=finish["type"],
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        cached_tokens=cached if isinstance(cached, int) else 0,
    )
