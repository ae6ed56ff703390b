"""Boundary columns of the data contract, computed from token ids alone.

Pure functions over ids: no decoding, no regexes over text. The data contract is the specification
(docs/data.md, "Boundaries" and "Model families"; each column's meaning in `contract/row.py`,
rendered into docs/reference/columns.md); each rule below cites the column it computes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from dataclasses import dataclass, field

import numpy as np

from eagle3_synth.contract.markers import find_last_marker, find_marker
from eagle3_synth.contract.profiles import MarkerIds


@dataclass(frozen=True)
class ToolCallSpan:
    start: int  # index of the call-begin marker's first token
    end: int  # index of the call-end marker's last token (inclusive), -1 if the call was cut off


@dataclass(frozen=True)
class Boundaries:
    reasoning_start: int
    think_end: int
    response_start: int
    stop_index: int
    tool_calls: tuple[ToolCallSpan, ...] = field(default_factory=tuple)


def reasoning_end(think_end: Any, response_start: Any, length: Any) -> Any:
    """Where a sample's reasoning text ends (exclusive): at the close marker; where reasoning ended
    implicitly (the response start) if it never closed; at the end of the output if it was cut off.

    The one statement of that rule: works on ints (one row) and on numpy arrays (a column).
    """
    if isinstance(think_end, np.ndarray):
        return np.where(think_end >= 0, think_end, np.where(response_start >= 0, response_start, length))
    return think_end if think_end >= 0 else (response_start if response_start >= 0 else length)


def prompt_opens_reasoning(prompt_ids: Sequence[int], markers: MarkerIds) -> bool:
    """True when the prompt ends inside an unclosed reasoning block.

    Templates such as Kimi-K2.5's (and Qwen3-Thinking-2507's `<think>\\n`) put the open marker into
    the generation prompt. Earlier assistant turns in the history are always closed, so "the last
    open marker comes after the last close marker" identifies exactly that case, trailing
    whitespace tokens included.
    """
    ids = prompt_ids if isinstance(prompt_ids, list) else list(prompt_ids)
    last_open = find_last_marker(ids, markers.reasoning_open)
    if last_open < 0:
        return False
    return find_marker(ids, markers.reasoning_close, last_open + 1)[0] < 0  # no close after it


def find_tool_calls(output_ids: Sequence[int], markers: MarkerIds) -> tuple[ToolCallSpan, ...]:
    """Pair each call-begin with the next call-end; a begin with no end was cut off (`end=-1`).

    `start` is the first token of the call-begin marker, `end` the LAST token of the call-end
    marker (inclusive), so a span holds the whole call however many tokens its markers take.
    """
    spans: list[ToolCallSpan] = []
    open_at, open_last = find_marker(output_ids, markers.tool_call_begin)
    # One step per call, not per token: from an open call, the next begin and the first end before
    # it are found with list.index (in C). Ends while no call is open are ignored.
    while open_at >= 0:
        next_begin, next_last = find_marker(output_ids, markers.tool_call_begin, open_last + 1)
        stop = next_begin if next_begin >= 0 else len(output_ids)
        _, closed_at = find_marker(output_ids, markers.tool_call_end, open_last + 1, stop)
        spans.append(ToolCallSpan(open_at, closed_at))  # -1: cut off, or a new call began first
        open_at, open_last = next_begin, next_last
    return tuple(spans)


def find_boundaries(
    output_ids: Sequence[int],
    markers: MarkerIds,
    *,
    prompt_opens: bool,
    finish_reason: str,
) -> Boundaries:
    """Every boundary column of one sample.

    `prompt_opens` is `prompt_opens_reasoning(prompt_ids, markers)`. A marker of several tokens
    counts from its first token (`think_end`) to its last (`response_start` is the token after it).
    """
    # A numpy array (assembly's) is searched as it is (`markers._index`); anything else as a list.
    ids = output_ids if isinstance(output_ids, (list, np.ndarray)) else list(output_ids)
    # reasoning_start: 0 if the prompt opened reasoning, the token after an emitted open marker, else -1.
    if prompt_opens:
        reasoning_start = 0
    else:
        _, open_last = find_marker(ids, markers.reasoning_open)
        reasoning_start = open_last + 1 if open_last >= 0 else -1

    # think_end: the first close marker inside the reasoning. A close marker with no open one at
    # all means the template opened reasoning implicitly (DeepSeek-R1 style): reasoning starts at
    # 0 -- unless the family's close marker also ends other messages (gpt-oss's <|end|>).
    if reasoning_start < 0 and not markers.close_without_open_is_reasoning:
        think_end, close_last = -1, -1
    else:
        think_end, close_last = find_marker(ids, markers.reasoning_close, max(reasoning_start, 0))
    if reasoning_start < 0 and think_end >= 0:
        reasoning_start = 0

    # response_start: after the close marker; else at a tool section (or call, for families
    # without a section marker) that opened before any close marker; 0 without reasoning; -1 if
    # reasoning never ended (truncated).
    if think_end >= 0:
        response_start = close_last + 1
    elif reasoning_start < 0:
        response_start = 0
    else:
        implicit_end = markers.tool_section_begin or markers.tool_call_begin
        response_start, _ = find_marker(ids, implicit_end, reasoning_start)

    stop_index = len(ids) - 1 if finish_reason == "stop" and len(ids) else -1
    return Boundaries(
        reasoning_start=reasoning_start,
        think_end=think_end,
        response_start=response_start,
        stop_index=stop_index,
        tool_calls=find_tool_calls(ids, markers),
    )
