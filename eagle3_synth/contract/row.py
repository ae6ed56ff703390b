"""The data contract: features of every config, and how one sample becomes one row.

`FEATURES` (from `_SCHEMA`) is the single definition of the schema; the builder, the Parquet writer
and the loaders all take it from here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from eagle3_synth.contract.boundaries import find_boundaries, prompt_opens_reasoning
from eagle3_synth.contract.profiles import MarkerIds

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
    # The rollout's sampling (`contract/sampling.py`: temperature, top_p, top_k, min_p,
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
