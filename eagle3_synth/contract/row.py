"""The data contract: features of every config, and how one sample becomes one row.

`FEATURES` is the single definition of the schema; the builder, the Parquet writer and the loaders
all take it from here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from datasets import Features, List, Value

from eagle3_synth.contract.boundaries import find_boundaries, prompt_opens_reasoning
from eagle3_synth.contract.profiles import MarkerIds

FINISH_REASONS = ("stop", "length", "abort")

FEATURES = Features(
    {
        "sample_id": Value("int64"),
        "source_id": Value("string"),
        "prompt_ids": List(Value("int32")),
        "output_ids": List(Value("int32")),
        "reasoning_start": Value("int32"),
        "think_end": Value("int32"),
        "response_start": Value("int32"),
        "tool_calls": List({"start": Value("int32"), "end": Value("int32")}),
        "stop_index": Value("int32"),
        "finish_reason": Value("string"),
        "prompt_tokens": Value("int32"),
        "completion_tokens": Value("int32"),
        "messages": Value("string"),
        "tools": Value("string"),
    }
)

COLUMNS = tuple(FEATURES)


@dataclass(frozen=True)
class PreparedPrompt:
    """A prompt after templating: exactly what is sent to the engine, and what produced it."""

    sample_id: int
    source_id: str
    prompt_ids: list[int]
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None


def dumps_messages(messages: Sequence[dict[str, Any]]) -> str:
    return json.dumps(list(messages), ensure_ascii=False)


def dumps_tools(tools: Sequence[dict[str, Any]] | None) -> str:
    return json.dumps(list(tools), ensure_ascii=False) if tools else ""


def make_row(
    *,
    sample_id: int,
    source_id: str,
    prompt_ids: list[int],
    output_ids: list[int],
    finish_reason: str,
    messages_json: str,
    tools_json: str,
    markers: MarkerIds,
) -> dict[str, Any]:
    """One dataset row; ids are stored as given, boundaries computed from them."""
    if finish_reason not in FINISH_REASONS:
        raise ValueError(f"sample {sample_id}: finish_reason {finish_reason!r} not in {FINISH_REASONS}")
    bounds = find_boundaries(
        output_ids,
        markers,
        prompt_opens=prompt_opens_reasoning(prompt_ids, markers),
        finish_reason=finish_reason,
    )
    return {
        "sample_id": sample_id,
        "source_id": source_id,
        "prompt_ids": prompt_ids,
        "output_ids": output_ids,
        "reasoning_start": bounds.reasoning_start,
        "think_end": bounds.think_end,
        "response_start": bounds.response_start,
        "tool_calls": [{"start": span.start, "end": span.end} for span in bounds.tool_calls],
        "stop_index": bounds.stop_index,
        "finish_reason": finish_reason,
        "prompt_tokens": len(prompt_ids),
        "completion_tokens": len(output_ids),
        "messages": messages_json,
        "tools": tools_json,
    }
