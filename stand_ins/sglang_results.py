"""SGLang 0.5.23 result dicts and errors, shaped as its source writes them: meta_info and the result
dicts in srt/managers/tokenizer_manager.py `TokenizerManager._handle_batch_output` (no `text` under skip_tokenizer_init,
its `BatchTokenIDOutput` branch), finish reasons in srt/managers/schedule_batch.py (`FINISH_MATCHED_TOKEN` ...
`FINISH_ABORT`), the HTTP error bodies in srt/entrypoints/http_server.py `_create_error_response`.

Shared by the fake `sglang.Engine` and the loopback `/generate` server, so both stand-ins return
exactly one shape. With `skip_tokenizer_init=True` there is no `"text"` (except in a queued abort).
"""

from __future__ import annotations

import time
from typing import Any


def finished(rid: str, prompt_len: int, output_ids: list[int], finish_reason: dict[str, Any],
             cached_tokens: int = 0, text: str | None = None, retractions: int = 0) -> dict[str, Any]:
    """A finished request: meta_info keys in the order SGLang fills them."""
    result: dict[str, Any] = {} if text is None else {"text": text}
    result["output_ids"] = list(output_ids)
    result["meta_info"] = {
        "id": rid,
        "finish_reason": finish_reason,
        "prompt_tokens": prompt_len,
        "weight_version": "default",
        "num_retractions": retractions,
        "reasoning_tokens": 0,
        "completion_tokens": len(output_ids),
        "cached_tokens": cached_tokens,
        "weight_versions": [{"version": "default", "start": 0, "end": len(output_ids)}],
        # Seen on the real 0.5.23: the cache tier of the cached tokens when there are any, else None.
        "cached_tokens_details": {"device": cached_tokens, "host": 0} if cached_tokens else None,
        "dp_rank": None,
        "e2e_latency": 0.01,
        "response_sent_to_client_ts": time.time(),
    }
    return result


def stop_reason(matched: int) -> dict[str, Any]:
    return {"type": "stop", "matched": matched}


def nan_stop() -> dict[str, Any]:
    """A NaN or out-of-range sampled token: reported as a string match, the token replaced by an
    EOS/stop id (sglang 0.5.23 srt/managers/schedule_batch.py
    `Req._check_vocab_boundary_finish`)."""
    return {"type": "stop", "matched": "NaN happened"}


def length_reason(max_new_tokens: int) -> dict[str, Any]:
    return {"type": "length", "length": max_new_tokens}


def queued_abort(rid: str) -> dict[str, Any]:
    """A request aborted while still queued: returned, not raised; meta_info is short, text present."""
    return {
        "text": "",
        "output_ids": [],
        "meta_info": {
            "id": rid,
            "finish_reason": {"type": "abort", "message": "Abort in waiting queue"},
            "weight_version": "default",
            "weight_versions": [],
            "e2e_latency": 0.0,
            "completion_tokens": 0,
            "response_sent_to_client_ts": time.time(),
        },
    }


def context_too_long(prompt_len: int, context_len: int) -> str:
    """The ValueError message (HTTP 400) for a prompt at or over the context length."""
    return f"The input ({prompt_len} tokens) is longer than the model's context length ({context_len} tokens)."


def total_too_long(prompt_len: int, max_new_tokens: int, context_len: int) -> str:
    """The ValueError message for prompt + max_new_tokens over the context
    (tokenizer_manager.py `TokenizerManager._validate_one_request`)."""
    return (f"Requested token count exceeds the model's maximum context length of {context_len} tokens. "
            f"You requested a total of {prompt_len + max_new_tokens} tokens: {prompt_len} tokens from the input "
            f"messages and {max_new_tokens} tokens for the completion. Please reduce the number of tokens in the "
            "input messages or the completion to fit within the limit.")


def input_too_long(prompt_len: int, max_req_input_len: int) -> str:
    """The scheduler's message for a prompt at or over max_req_input_len
    (srt/managers/utils.py `validate_input_length`)."""
    return (f"Input length ({prompt_len} tokens) exceeds the maximum allowed length ({max_req_input_len} tokens). "
            "Use a shorter input or enable --allow-auto-truncate.")


def error_400(message: str) -> dict[str, Any]:
    """Body of a 400 for a ValueError raised while serving /generate."""
    return {"error": {"message": message}}


def error_text(body: dict[str, Any]) -> str:
    """The message of an `error_400` / `{"error": str}` body."""
    error = body.get("error")
    return error.get("message", "") if isinstance(error, dict) else str(error)


def error_5xx(status: int, message: str) -> dict[str, Any]:
    """Body of a 5xx abort (e.g. 503 "The request queue is full.")."""
    return {"object": "error", "message": message, "type": str(status), "param": None, "code": status}


# The real 0.5.23's list, in its order (its 400 for an unknown key lists them, seen on the CPU server).
SAMPLING_KEYS = (
    "max_new_tokens", "stop", "stop_token_ids", "stop_regex", "temperature", "top_p", "top_k", "min_p",
    "frequency_penalty", "presence_penalty", "repetition_penalty", "min_new_tokens", "n", "json_schema", "regex",
    "ebnf", "structural_tag", "ignore_eos", "skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim",
    "stream_interval", "logit_bias", "sampling_seed", "custom_params", "beam_width", "watermark", "choice",
)


def sampling_error(sampling: dict[str, Any]) -> dict[str, Any] | None:
    """The 400 body SGLang answers for bad `sampling_params`, or None. An unknown key fails the
    request schema: a plain string listing the keys; an out-of-range value is a ValueError:
    `{"error": {"message": ...}}` (both seen on the real 0.5.23 server)."""
    for key in sampling:
        if key not in SAMPLING_KEYS:
            return {"error": f"unknown field `{key}`, expected one of {', '.join(f'`{k}`' for k in SAMPLING_KEYS)}"}
    top_p = sampling.get("top_p", 1.0)
    if not 0.0 < top_p <= 1.0:
        return error_400(f"top_p must be in (0, 1], got {top_p}.")
    temperature = sampling.get("temperature", 1.0)
    if temperature < 0:
        return error_400(f"temperature must be a non-negative finite number, got {temperature}.")
    top_k = sampling.get("top_k", -1)
    if top_k < 1 and top_k != -1:
        return error_400(f"top_k must be -1 (disable) or at least 1, got {top_k}.")
    return None
