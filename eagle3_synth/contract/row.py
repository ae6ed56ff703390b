"""The data contract: features of every config, and how one sample becomes one row.

`FEATURES` (from `_SCHEMA`) is the single definition of the schema; the builder, the Parquet writer
and the loaders all take it from here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from eagle3_synth.contract.markers import find_last_marker, find_marker
from eagle3_synth.contract.profiles import MarkerIds
from eagle3_synth.contract.ranges import RANGES
from eagle3_synth.errors import ConfigError

# Boundary columns of the data contract, computed from token ids alone.
#
# Pure functions over ids: no decoding, no regexes over text. The data contract is the specification
# (docs/data.md, "Boundaries" and "Model families"; each column's meaning in `contract/row.py`,
# rendered into docs/reference/columns.md); each rule below cites the column it computes.

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


# How one sample was sampled: the `sampling` column, and the checks of its values.
#
# A rollout (a line of prompts.jsonl) carries its sampling (`PreparedPrompt.sampling`: the run's
# `--temperature`/`--top-p`/`--top-k`/`--min-p`/`--max-new-tokens`, updated by its draw from
# `--sampling-mix`, and the run's `--seed`). Each of its turns is sent with that sampling and the
# seed of its own sample, `seed + sample_id` (`sample_sampling`): the engine request and the row's
# `sampling` column are both made by this one function, so the column says exactly what the engine
# was sent.
#
# `max_new_tokens` in the column is the cap the request had; a `length` row with fewer output ids
# than it was stopped early by the engine (SGLang lowers a request's `max_new_tokens` to fit the
# context or the KV budget: sglang srt/managers/scheduler.py), and `stats` counts it as `lowered`
# (`is_lowered`).

# The sampling values of a request, in the order the column writes them (then `seed`).
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p", "max_new_tokens")


def sampling_problem(name: str, value: Any) -> str | None:
    """Why `value` is not a valid `name` (one of SAMPLING_KEYS, or `seed`), None when it is: its type
    here, its range from the one table (`contract/ranges.py`)."""
    if name not in (*SAMPLING_KEYS, "seed"):
        raise ConfigError(f"unknown sampling parameter {name!r}; the parameters are {', '.join(SAMPLING_KEYS)}")
    integer = name in ("top_k", "max_new_tokens", "seed")
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        if name == "seed" and value is None:
            return None
        return f"must be {'an integer' if integer else 'a number'}, got {value!r}"
    return None if name == "seed" else RANGES[name].problem(value)


def check_sampling(max_new_tokens: int, temperature: float, top_p: float, top_k: int = -1, min_p: float = 0.0) -> None:
    """The one place sampling values are checked, named by the options a user types."""
    for name, value in (("max_new_tokens", max_new_tokens), ("temperature", temperature), ("top_p", top_p),
                        ("top_k", top_k), ("min_p", min_p)):
        problem = sampling_problem(name, value)
        if problem is not None:
            raise ConfigError(f"--{name.replace('_', '-')} {problem}")


def sample_sampling(rollout: Mapping[str, Any], sample_id: int) -> dict[str, Any]:
    """The sampling of one sample of a rollout: the rollout's values, and its seed `seed +
    sample_id` (None: unseeded), as the engine is sent it and the `sampling` column records it."""
    values = {name: rollout.get(name) for name in SAMPLING_KEYS}
    seed = rollout.get("seed")
    values["seed"] = None if seed is None else seed + sample_id
    return values


def dumps_sampling(sampling: Mapping[str, Any]) -> str:
    """The `sampling` column: the sample's sampling as JSON, keys in SAMPLING_KEYS order then seed."""
    return json.dumps({name: sampling.get(name) for name in (*SAMPLING_KEYS, "seed")})


def row_cap(sampling_json: str | None) -> int | None:
    """The `max_new_tokens` a row was generated with (None where the row records no sampling)."""
    if not sampling_json:
        return None
    cap = json.loads(sampling_json).get("max_new_tokens")
    return cap if isinstance(cap, int) else None


def is_lowered(finish_reason: str, completion_tokens: int, sampling_json: str | None) -> bool:
    """A `length` row that stopped before its own cap: the engine lowered the cap (module doc)."""
    cap = row_cap(sampling_json)
    return finish_reason == "length" and cap is not None and completion_tokens < cap


FINISH_REASONS = ("stop", "length", "abort")

# The columns and their types: (name, type) with "int32[]" a list of int32 and "spans[]" the list of
# {start, end} int32 structs. `FEATURES` (the datasets form) is built from this on first use, so that
# engines and the journal, which import this module, do not import `datasets` (seconds of start-up).
_SCHEMA = (
    ("sample_id", "int64"), ("source_id", "string"), ("prompt_ids", "int32[]"), ("output_ids", "int32[]"),
    ("reasoning_start", "int32"), ("think_end", "int32"), ("response_start", "int32"), ("tool_calls", "spans[]"),
    ("stop_index", "int32"), ("finish_reason", "string"), ("prompt_tokens", "int32"), ("completion_tokens", "int32"),
    ("messages", "string"), ("tools", "string"),
    ("conversation_id", "int64"), ("turn", "int32"), ("sample_index", "int32"), ("template_kwargs", "string"),
    ("sampling", "string"),
)
COLUMNS = tuple(name for name, _ in _SCHEMA)
# What each column holds: the contract's words, rendered by the dataset card (`dataset/card.py`)
# and the docs (docs/reference/columns.md, `python docs/generate.py`).
MEANINGS = {
    "sample_id": "unique per row, in order: conversation, rollout, turn (with one turn and one sample per prompt, "
                 "the prompt's index in the config's prompt list)",
    "source_id": 'id of the record in its source dataset (`""` if none)',
    "prompt_ids": "exactly the ids sent to the engine (chat template, `add_generation_prompt=True`)",
    "output_ids": "exactly the ids the engine returned, stop token included",
    "reasoning_start": "first token of reasoning: `0` if the prompt ends inside an open reasoning block (Kimi-K2.5, "
                       "R1, MiniMax-M2); the token after an emitted reasoning-open marker; `-1` without reasoning",
    "think_end": "first token of the reasoning-close marker (`</think>`; gpt-oss: the `<|end|>` closing the "
                 "analysis message), `-1` if absent",
    "response_start": "the token after the whole close marker; else the tool section (or call) that ended "
                      "reasoning implicitly; `0` without reasoning; `-1` if reasoning never ended",
    "tool_calls": "per call: first token of its call-begin marker, last token of its call-end marker (inclusive; "
                  "`-1` if cut off)",
    "stop_index": 'index of the stop token (the last one) when `finish_reason == "stop"`, else `-1`',
    "finish_reason": "`stop`, `length` or `abort`",
    "prompt_tokens": "`len(prompt_ids)`",
    "completion_tokens": "`len(output_ids)`",
    "messages": "the templated conversation, as JSON; past a conversation's first turn, the history holds the "
                "target's own earlier turns",
    "tools": 'the tool definitions, as JSON (`""` without tools)',
    "conversation_id": "index of the source conversation in the config's prompt list",
    "turn": "0-based index of the generation within its conversation (the turn after a tool result is a turn of "
            "its own)",
    "sample_index": "which rollout of the conversation (`--samples-per-prompt`)",
    "template_kwargs": "the chat-template kwargs the prompt was rendered with, as JSON",
    "sampling": "how the row was sampled, as JSON: `temperature`, `top_p`, `top_k`, `min_p`, `max_new_tokens` and "
                "`seed` (`--seed` + `sample_id`), exactly what the engine was sent",
}
_TYPE_NAMES = {"int32[]": "list<int32>", "spans[]": "list<struct<start,end>>"}


def column_table() -> str:
    """The columns as a Markdown table (column, type, meaning), one row per column in schema order."""
    rows = ["| column | type | meaning |", "|---|---|---|"]
    for name, kind in _SCHEMA:
        rows.append(f"| `{name}` | `{_TYPE_NAMES.get(kind, kind)}` | {MEANINGS[name].replace('|', chr(92) + '|')} |")
    return "\n".join(rows) + "\n"


def _features():  # noqa: ANN202 - datasets.Features
    from datasets import Features, List, Value

    def feature(kind: str):  # noqa: ANN202
        if kind == "int32[]":
            return List(Value("int32"))
        if kind == "spans[]":
            return List({"start": Value("int32"), "end": Value("int32")})
        return Value(kind)

    return Features({name: feature(kind) for name, kind in _SCHEMA})


def __getattr__(name: str) -> Any:
    """`FEATURES`, the contract as datasets Features, built on first access (see `_SCHEMA`)."""
    if name == "FEATURES":
        features = _features()
        globals()["FEATURES"] = features
        return features
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class PreparedPrompt:
    """A prompt after templating: exactly what is sent to the engine, and what produced it.

    In a run directory's prompts.jsonl, one per rollout: the first turn's prompt, whose `sample_id`
    is the rollout's first; turn t of the rollout has `sample_id + t` (`prompts/turns.py`).
    """

    sample_id: int
    source_id: str
    prompt_ids: list[int]
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    # The source conversation's index in the prompt list (-1: the same as sample_id).
    conversation_id: int = -1
    # Turns the rollout may have (the sample ids it owns), its index among the conversation's
    # rollouts, the template kwargs it is rendered with (None: the run's), and the whole source
    # conversation later turns are taken from (None: one turn only).
    turns: int = 1
    sample_index: int = 0
    template_kwargs: dict[str, Any] | None = None
    script: list[dict[str, Any]] | None = None
    # The rollout's sampling (`sample_sampling` above: temperature, top_p, top_k, min_p,
    # max_new_tokens and the run's seed; each turn draws with seed + its sample id); None: the run's.
    sampling: dict[str, Any] | None = None

    @property
    def conversation(self) -> int:
        return self.sample_id if self.conversation_id < 0 else self.conversation_id


def out_of_range(ids: Sequence[int], vocab_size: int) -> tuple[int, int] | None:
    """(position, id) of the first id outside `0 <= id < vocab_size`, None when all are in range.

    The one range test of the contract: engines' result checks, replay import, `validate` and
    `publish` all call it. An id outside the model's embedding rows is an index error (or garbage)
    in a trainer's embedding lookup, so no row may hold one. min/max run in C; the position is
    looked for only when one is out.
    """
    if len(ids) == 0:
        return None
    if min(ids) >= 0 and max(ids) < vocab_size:
        return None
    return next((i, int(token)) for i, token in enumerate(ids) if not 0 <= token < vocab_size)


def dumps_messages(messages: Sequence[dict[str, Any]]) -> str:
    return json.dumps(list(messages), ensure_ascii=False)


def dumps_tools(tools: Sequence[dict[str, Any]] | None) -> str:
    return json.dumps(list(tools), ensure_ascii=False) if tools else ""


def dumps_kwargs(kwargs: dict[str, Any] | None) -> str:
    return json.dumps(kwargs or {}, ensure_ascii=False, sort_keys=True)


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
    conversation_id: int | None = None,
    turn: int = 0,
    sample_index: int = 0,
    template_kwargs_json: str = "{}",
    sampling_json: str = "",
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
        "conversation_id": sample_id if conversation_id is None else conversation_id,
        "turn": turn,
        "sample_index": sample_index,
        "template_kwargs": template_kwargs_json,
        "sampling": sampling_json,
    }
