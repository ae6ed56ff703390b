"""Every SGLang result is checked before it is stored: a violation stops the run, naming the sample.

SGLang 0.5.23 returns `{"output_ids", "meta_info": {"finish_reason": {"type": ...}, "prompt_tokens",
"completion_tokens", "cached_tokens", ...}}` (plus `"text"` when it has a tokenizer). What we rely
on, and check here:
- `len(output_ids) == completion_tokens` (the stop token is kept and counted);
- `prompt_tokens == len(prompt_ids)` (nothing truncated or re-tokenized on the way);
- the output does not start with the prompt (a server that echoes the input);
- a token stop ends with the matched id, and that id is one of the requested stop ids: SGLang
  reports a NaN or out-of-range sampled token as `{"type": "stop", "matched": "NaN happened"}`
  after writing an EOS/stop id in its place (sglang 0.5.23 srt/managers/schedule_batch.py:1977-1991,
  `Req._check_vocab_boundary_finish`), so a stop whose `matched` is a string (we never send stop
  strings) or an id we did not request is that sample's error (journaled, regenerated with
  `--retry-errors`), never a row;
- a `length` finish may have fewer ids than `max_new_tokens`: the scheduler lowers a request's
  `max_new_tokens` to `min(requested, max_req_len - input_len - 1)` and then to what the KV pool can
  hold (srt/managers/scheduler.py:2693-2736, `init_req_max_new_tokens`; `max_req_len =
  min(context_len - 1, kv_capacity - 1)`, srt/managers/tp_worker.py:568-572), and reports
  `{"type": "length", "length": <the lowered value>}` (schedule_batch.py:2004). Such a row is valid
  (`finish_reason` "length"); `is_short_length` tells it apart;
- `finish_reason` maps to the contract's `stop` / `length` / `abort`.
An engine-side abort (`{"type": "abort", "message": ...}`) is not a violation: it becomes that
sample's error result, reported and generated again with `--retry-errors`.
"""

from __future__ import annotations

from collections.abc import Collection
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


def is_short_length(result: GenerationResult, max_new_tokens: int) -> bool:
    """A `length` finish with fewer tokens than asked: SGLang lowered max_new_tokens to fit the
    context or the KV budget (scheduler.py:2693-2736). Still a valid row."""
    return result.finish_reason == "length" and result.completion_tokens < max_new_tokens


def unrequested_stop(finish: dict[str, Any], stop_token_ids: Collection[int] | None) -> str | None:
    """Why a `stop` finish is not a stop we asked for, or None when it is."""
    matched = finish.get("matched")
    if not isinstance(matched, int) or isinstance(matched, bool):
        # e.g. "NaN happened": a NaN / out-of-range token, replaced by an EOS id (schedule_batch.py:1977-1991)
        return (f"finish_reason stop with matched {matched!r}, not a stop token id (SGLang reports a NaN or "
                "out-of-range sampled token this way, with an EOS id written in its place)")
    if stop_token_ids is not None and matched not in stop_token_ids:
        return f"finish_reason stop on token {matched}, which is not one of the requested stop ids {sorted(stop_token_ids)}"
    return None


def check_result(request: GenerationRequest, response: Any, source: str,
                 stop_token_ids: Collection[int] | None = None) -> GenerationResult:
    """Turn one SGLang result dict into a `GenerationResult`, or raise `EngineError` naming the sample.

    `source` says where the result came from (a URL, "sglang.Engine") for the message;
    `stop_token_ids` are the ids the request asked to stop on (None: any integer id is accepted).
    A stop that is not one of them is returned as that sample's error result.
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
        problem = unrequested_stop(finish, stop_token_ids)
        if problem is not None:
            return abort_result(request, f"{source}: {problem}")
        if not output_ids:
            raise _violation(request, source, "finish_reason stop with no output ids (the stop token must be kept)")
        if isinstance(matched, int) and output_ids[-1] != matched:
            raise _violation(request, source, f"stopped on token {matched} but the output ends with {output_ids[-1]} "
                                              "(the stop token must be kept, last)")
    cached = meta.get("cached_tokens")
    # Times the scheduler took the request out of the running batch to free KV memory and ran it
    # again later (sglang 0.5.23 srt/managers/tokenizer_manager.py:2507-2512): KV thrashing.
    retractions = meta.get("num_retractions")
    return GenerationResult(
        sample_id=request.sample_id,
        output_ids=output_ids,
        finish_reason=finish["type"],
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        cached_tokens=cached if isinstance(cached, int) else 0,
        retractions=retractions if isinstance(retractions, int) and not isinstance(retractions, bool) else 0,
    )
