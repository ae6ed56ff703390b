"""A row's output as an OpenAI-style assistant message: reasoning, content and tool calls as text.

For exports to frameworks that take text (SpecForge) and for people; never for the data path.
The split comes from the boundary columns (token positions), not from regexes over the text:
reasoning is `output_ids[reasoning_start:think_end]`, each tool call is its `tool_calls` span, and
the content is the rest of the response. Only the inside of one tool call is parsed as text,
because its name/arguments layout is the model family's own (one parser per profile below).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from eagle3_synth.contract.boundaries import reasoning_end

# Kimi-K2: <|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{ARGS}<|tool_call_end|>
_KIMI_ARGUMENT_BEGIN = "<|tool_call_argument_begin|>"
# DeepSeek: V3.1 NAME<｜tool▁sep｜>{ARGS}; R1/V3 function<｜tool▁sep｜>NAME\n```json\n{ARGS}\n```
_DEEPSEEK_SEP = "<｜tool▁sep｜>"


def _kimi_call(body: str, index: int) -> dict[str, Any]:
    call_id, sep, arguments = body.partition(_KIMI_ARGUMENT_BEGIN)
    call_id = call_id.strip()
    if not sep:
        return _raw_call(body, index)
    # "functions.get_weather:0" -> "get_weather" (the id keeps the model's own spelling)
    name = call_id.split(".", 1)[-1].rsplit(":", 1)[0]
    return _call(call_id, name, arguments.strip())


def _qwen_call(body: str, index: int) -> dict[str, Any]:
    try:
        parsed = json.loads(body)
    except json.JSONDecodeError:
        return _raw_call(body, index)
    if not isinstance(parsed, dict) or "name" not in parsed:
        return _raw_call(body, index)
    arguments = parsed.get("arguments", {})
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return _call(f"call_{index}", str(parsed["name"]), text)


def _deepseek_call(body: str, index: int) -> dict[str, Any]:
    head, sep, tail = body.partition(_DEEPSEEK_SEP)
    if not sep:
        return _raw_call(body, index)
    if head.strip() == "function" and "```" in tail:  # R1 / V3 layout
        name, _, rest = tail.partition("\n")
        arguments = rest.strip().removeprefix("```json").removesuffix("```").strip()
        return _call(f"call_{index}", name.strip(), arguments)
    return _call(f"call_{index}", head.strip(), tail.strip())


def _call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _raw_call(body: str, index: int) -> dict[str, Any]:
    """A call whose inside does not parse: keep its text so nothing is lost silently."""
    return _call(f"call_{index}", "", body)


def decode_ids(tokenizer: Any, ids: Sequence[int], *, skip_special_tokens: bool = False) -> str:
    """`tokenizer.decode(ids)` for display. A fast tokenizer is handed a numpy array: given a list,
    transformers first checks it element by element in Python, which costs more than decoding."""
    if getattr(tokenizer, "is_fast", False):
        ids = np.asarray(ids, dtype=np.int64)
    return tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)


TOOL_CALL_PARSERS: dict[str, Callable[[str, int], dict[str, Any]]] = {
    "kimi_k2": _kimi_call,
    "qwen3": _qwen_call,
    "deepseek": _deepseek_call,
}


def reasoning_span(row: dict[str, Any]) -> tuple[int, int] | None:
    """[start, end) of the reasoning text in output_ids (markers excluded), None without reasoning."""
    start = row["reasoning_start"]
    if start < 0:
        return None
    return start, reasoning_end(row["think_end"], row["response_start"], len(row["output_ids"]))


def assistant_message(row: dict[str, Any], tokenizer: Any, profile: str) -> dict[str, Any]:
    """`{"role": "assistant", "content", "reasoning_content", "tool_calls"?}` decoded from a row.

    Special tokens (section markers, the stop token) are dropped from text; a tool call that was
    cut off (`end == -1`) is left out, its tokens are not put into the content either.
    """
    parse = TOOL_CALL_PARSERS.get(profile)
    if parse is None:
        raise ValueError(f"no tool-call parser for profile {profile!r}; known: {sorted(TOOL_CALL_PARSERS)}")
    output = list(row["output_ids"])
    span = reasoning_span(row)
    reasoning = decode_ids(tokenizer, output[span[0] : span[1]], skip_special_tokens=True) if span else ""

    calls: list[dict[str, Any]] = []
    in_call = [False] * len(output)
    for call in row["tool_calls"]:
        end = call["end"] if call["end"] >= 0 else len(output) - 1
        for i in range(call["start"], end + 1):
            in_call[i] = True
        if call["end"] >= 0:
            body = decode_ids(tokenizer, output[call["start"] + 1 : call["end"]])
            calls.append(parse(body, len(calls)))
    content_ids = []
    if row["response_start"] >= 0:
        content_ids = [t for i, t in enumerate(output) if i >= row["response_start"] and not in_call[i]]
    message: dict[str, Any] = {
        "role": "assistant",
        "content": decode_ids(tokenizer, content_ids, skip_special_tokens=True),
        "reasoning_content": reasoning,
    }
    if calls:
        message["tool_calls"] = calls
    return message
