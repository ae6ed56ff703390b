"""Boundary columns of the data contract, computed from token ids alone.

Pure functions over ids: no decoding, no regexes over text. DESIGN.md's data contract is the
specification; each rule below cites the column it computes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .profiles import MarkerIds


@dataclass(frozen=True)
class ToolCallSpan:
    start: int  # index of the call-begin marker
    end: int  # index of the call-end marker (inclusive), -1 if the call was cut off


@dataclass(frozen=True)
class Boundaries:
    reasoning_start: int
    think_end: int
    response_start: int
    stop_index: int
    tool_calls: tuple[ToolCallSpan, ...] = field(default_factory=tuple)


def _index(ids: Sequence[int], token: int | None, start: int = 0) -> int:
    """First index of `token` at or after `start`, -1 if absent (list.index runs in C)."""
    if token is None:
        return -1
    try:
        return ids.index(token, start)
    except ValueError:
        return -1


def prompt_opens_reasoning(prompt_ids: Sequence[int], markers: MarkerIds) -> bool:
    """True when the prompt ends inside an unclosed reasoning block.

    Templates such as Kimi-K2.5's (and Qwen3-Thinking-2507's `<think>\\n`) put the open marker into
    the generation prompt. Earlier assistant turns in the history are always closed, so "the last
    open marker comes after the last close marker" identifies exactly that case, trailing
    whitespace tokens included.
    """
    tail = list(prompt_ids)[::-1]  # search from the end, in C
    from_end_open = _index(tail, markers.reasoning_open)
    if from_end_open < 0:
        return False
    from_end_close = _index(tail, markers.reasoning_close)
    return from_end_close < 0 or from_end_open < from_end_close


def find_tool_calls(output_ids: Sequence[int], markers: MarkerIds) -> tuple[ToolCallSpan, ...]:
    """Pair each call-begin with the next call-end; a begin with no end was cut off (`end=-1`)."""
    begin, end = markers.tool_call_begin, markers.tool_call_end
    spans: list[ToolCallSpan] = []
    open_at = _index(output_ids, begin)
    # One step per call, not per token: from an open call, the next begin and the first end before
    # it are found with list.index (in C). Ends while no call is open are ignored.
    while open_at >= 0:
        next_begin = _index(output_ids, begin, open_at + 1)
        stop = next_begin if next_begin >= 0 else len(output_ids)
        try:
            closed_at = output_ids.index(end, open_at + 1, stop)
        except ValueError:
            closed_at = -1  # cut off, or a new call began before this one ended
        spans.append(ToolCallSpan(open_at, closed_at))
        open_at = next_begin
    return tuple(spans)


def find_boundaries(
    output_ids: Sequence[int],
    markers: MarkerIds,
    *,
    prompt_opens: bool,
    finish_reason: str,
) -> Boundaries:
    """Every boundary column of one sample.

    `prompt_opens` is `prompt_opens_reasoning(prompt_ids, markers)`.
    """
    # reasoning_start: 0 if the prompt opened reasoning, i+1 after an emitted open marker, else -1.
    if prompt_opens:
        reasoning_start = 0
    else:
        open_at = _index(output_ids, markers.reasoning_open)
        reasoning_start = open_at + 1 if open_at >= 0 else -1

    # think_end: the first close marker inside the reasoning. A close marker with no open one at
    # all means the template opened reasoning implicitly (DeepSeek-R1 style): reasoning starts at 0.
    think_end = _index(output_ids, markers.reasoning_close, max(reasoning_start, 0))
    if reasoning_start < 0 and think_end >= 0:
        reasoning_start = 0

    # response_start: after </think>; else at a tool section (or call, for families without a
    # section marker) that opened before any close marker; 0 without reasoning; -1 if reasoning
    # never ended (truncated).
    if think_end >= 0:
        response_start = think_end + 1
    elif reasoning_start < 0:
        response_start = 0
    else:
        implicit_end = (
            markers.tool_section_begin if markers.tool_section_begin is not None else markers.tool_call_begin
        )
        response_start = _index(output_ids, implicit_end, reasoning_start)

    stop_index = len(output_ids) - 1 if finish_reason == "stop" and output_ids else -1
    return Boundaries(
        reasoning_start=reasoning_start,
        think_end=think_end,
        response_start=response_start,
        stop_index=stop_index,
        tool_calls=find_tool_calls(output_ids, markers),
    )
