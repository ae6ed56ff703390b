"""Exports for drafter trainers, one JSONL line per record (what each trainer reads: docs/training/).

- `ids` (alias `speculators`): `{"id", "input_ids", "loss_mask", "text"?, "metadata"}` with
  `input_ids = prompt_ids + output_ids`, token-exact. What speculators' `load_and_preprocess_dataset`
  and SpecForge's pre-tokenized `data.prompts_path` read as they are (ids unchanged, other keys
  ignored); `text` is a decode for review only.
- `specforge` (SpecForge's conversation format): `{"id", "conversations", "tools", <kwargs>...}`: the
  prompt messages plus the generated turn as a serving stack's parsers return it (content cut where
  the first call begins), every call's `arguments` and the `tools` as JSON strings (a column mixing
  objects and strings fails to load with datasets <= 4.5; a list of tool objects gets other rows'
  keys filled in as nulls), and the row's template kwargs as columns (SpecForge's online loader
  passes extra columns to `apply_chat_template`). SpecForge re-tokenizes this text: NOT token-exact.
  Left out, with counts: rows that did not stop (re-templating would add an end of turn the model
  never wrote), and rows that stopped on a token that is not the template's end of turn (Kimi's
  `[EOS]`: re-rendered, the turn would end with `<|im_end|>`).
- `modelopt` (ModelOpt's EAGLE-3 example): `{"conversation_id", "messages"}`; ModelOpt templates
  without tools (they are dropped, counted in a warning), skips a falsy `conversation_id` and writes
  one file per id offline, so each id is a unique non-empty string. Same row filters as specforge.
- `jsonl`: every contract column as it is stored, one row per line.

Conversation formats (specforge, modelopt) write one record per rollout by default: its last row,
whose history holds every earlier turn the target wrote (`every_turn` writes each row, for
SpecForge's `train_only_last_turn`). The length policy (`max_length`, `overlong`) drops rows longer
than `max_length` total tokens, or for `ids` truncates them (mask past it removed), counted.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from eagle3_synth.contract.profiles import MarkerIds, ModelProfile
from eagle3_synth.errors import ConfigError
from eagle3_synth.prompts.conversation import Conversation, count_calls
from eagle3_synth.prompts.forms import MessageForm
from eagle3_synth.prompts.history import history_message
from eagle3_synth.view import decode_ids
from eagle3_synth.files import written_whole

# Training inputs from rows: `input_ids = prompt_ids + output_ids` and a loss mask over them.
#
# Token-exact by construction: the ids are concatenated, never decoded. What the mask covers:
#
# - `train_on="output"` (default): every generated token -- reasoning, `</think>`, response, tool
#   calls and the stop token (`[0]*len(prompt_ids) + [1]*len(output_ids)`, docs/data.md "Boundaries");
# - `train_on="response"`: only `output_ids[response_start:]`; a row whose reasoning never ended
#   (`response_start == -1`) then has nothing to learn from (all zeros).
#
# With `datasets`:
#
#     from eagle3_synth.train.export import training_map_fn
#     ds = load_dataset("org/eagle3-synth", "B1_glaive", split="train")
#     train = ds.map(training_map_fn(train_on="output"), batched=True, remove_columns=ds.column_names)

TrainOn = Literal["output", "response"]
TRAIN_ON: tuple[str, ...] = ("output", "response")


def _check(train_on: str, max_length: int | None) -> None:
    if train_on not in TRAIN_ON:
        raise ConfigError(f"train_on must be one of {TRAIN_ON}, got {train_on!r}")
    if max_length is not None and max_length < 1:
        raise ConfigError(f"max_length must be >= 1, got {max_length}")


def loss_mask(prompt_len: int, output_len: int, response_start: int, train_on: TrainOn = "output") -> list[int]:
    """The mask for a sequence of `prompt_len + output_len` tokens."""
    if train_on == "output":
        first = 0
    elif response_start >= 0:
        first = response_start
    else:
        first = output_len
    return [0] * (prompt_len + first) + [1] * (output_len - first)


def masked_output_starts(lengths: np.ndarray, response_starts: np.ndarray | None, train_on: TrainOn) -> np.ndarray:
    """Per row, the first index of `output_ids` under the loss mask (== length: none), as
    `loss_mask` sets it (its column form, for counting tokens under the mask: `train/draft_vocab.py`): 0 for `output`; `response_start`, or the length when reasoning
    never ended (`-1`), for `response`."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if train_on == "output":
        return np.zeros_like(lengths)
    if train_on != "response" or response_starts is None:
        raise ConfigError(f"train_on must be one of {TRAIN_ON}, got {train_on!r}")
    starts = np.asarray(response_starts, dtype=np.int64)
    return np.where(starts >= 0, np.minimum(starts, lengths), lengths)


def training_example(
    row: Mapping[str, Any], *, train_on: TrainOn = "output", max_length: int | None = None
) -> dict[str, list[int]]:
    """`{"input_ids", "loss_mask"}` of one row; `max_length` cuts both from the right."""
    _check(train_on, max_length)
    return _example(row["prompt_ids"], row["output_ids"], row["response_start"], train_on, max_length)


def _example(
    prompt_ids: Sequence[int], output_ids: Sequence[int], response_start: int, train_on: TrainOn, max_length: int | None
) -> dict[str, list[int]]:
    input_ids = [*prompt_ids, *output_ids]
    mask = loss_mask(len(prompt_ids), len(output_ids), response_start, train_on)
    if max_length is not None:
        input_ids, mask = input_ids[:max_length], mask[:max_length]
    return {"input_ids": input_ids, "loss_mask": mask}


def training_map_fn(
    train_on: TrainOn = "output", max_length: int | None = None
) -> Callable[[Mapping[str, list[Any]]], dict[str, list[list[int]]]]:
    """A batched `Dataset.map` function adding `input_ids` and `loss_mask` columns."""
    _check(train_on, max_length)

    def to_training(batch: Mapping[str, list[Any]]) -> dict[str, list[list[int]]]:
        examples = [
            _example(p, o, r, train_on, max_length)
            for p, o, r in zip(batch["prompt_ids"], batch["output_ids"], batch["response_start"])
        ]
        return {"input_ids": [e["input_ids"] for e in examples], "loss_mask": [e["loss_mask"] for e in examples]}

    return to_training


Row = Mapping[str, Any]
OVERLONG = ("drop", "truncate")
# Counted in the summary: rows left out ("left out N rows that ..."), and rows kept with a change.
OVER_MAX = "are longer than --max-length"
TRUNCATED = "truncated at --max-length"
TOOLS_DROPPED = "had tools, left out of the records: ModelOpt renders none"
FEW_LOSS = "have fewer supervised tokens than --min-loss-tokens"


@dataclass(frozen=True)
class ExportOptions:
    config: str
    # Needed for `text` (ids) and for decoding (specforge, modelopt); `jsonl` needs none.
    tokenizer: Any = None
    profile: ModelProfile | None = None
    markers: MarkerIds | None = None
    # How the data's template takes messages (modelopt renders them with that template).
    message_form: MessageForm = field(default_factory=MessageForm)
    train_on: TrainOn = "output"
    text: bool = True
    # specforge/modelopt: also rows cut off by max_new_tokens, or stopped on another stop token.
    include_unfinished: bool = False
    include_other_stops: bool = False
    every_turn: bool = False
    max_length: int | None = None
    overlong: str = "drop"
    # Rows with fewer tokens under the loss mask are left out: a block drafter trains on blocks of
    # consecutive supervised tokens (SpecForge drops samples under 2 x block_size; docs/training/specforge.md).
    min_loss_tokens: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.min_loss_tokens, bool) or not isinstance(self.min_loss_tokens, int) or self.min_loss_tokens < 0:
            raise ConfigError(f"--min-loss-tokens must be an integer >= 0, got {self.min_loss_tokens!r}")


def loss_tokens(row: Row, options: ExportOptions) -> int:
    """Tokens of the row under its loss mask as exported (`--train-on`; a row cut at --max-length
    by `--overlong truncate` counts what is left): position arithmetic, no mask is built."""
    total = row["prompt_tokens"] + row["completion_tokens"]
    first = masked_output_starts(np.array([row["completion_tokens"]]), np.array([row["response_start"]]),
                                 options.train_on)[0]
    end = min(total, options.max_length) if options.overlong == "truncate" and options.max_length else total
    return max(0, end - (row["prompt_tokens"] + int(first)))


def too_few_loss_tokens(row: Row, options: ExportOptions, counts: Counter) -> bool:
    """Whether `--min-loss-tokens` leaves the row out (counted as FEW_LOSS)."""
    if options.min_loss_tokens and loss_tokens(row, options) < options.min_loss_tokens:
        counts[FEW_LOSS] += 1
        return True
    return False


def _row_id(row: Row, options: ExportOptions) -> str:
    return f"{options.config}-{row['sample_id']}"


def _over_max_length(row: Row, options: ExportOptions) -> bool:
    """More prompt + output tokens than `--max-length` allows."""
    return options.max_length is not None and row["prompt_tokens"] + row["completion_tokens"] > options.max_length


def ids_record(row: Row, options: ExportOptions, skipped: Counter) -> dict[str, Any] | None:
    cut = None
    if _over_max_length(row, options):
        if options.overlong == "drop":
            skipped[OVER_MAX] += 1
            return None
        skipped[TRUNCATED] += 1
        cut = options.max_length
    example = training_example(row, train_on=options.train_on, max_length=cut)
    record: dict[str, Any] = {"id": _row_id(row, options), **example}
    if options.text and options.tokenizer is not None:
        record["text"] = decode_ids(options.tokenizer, example["input_ids"])
    record["metadata"] = {
        "config": options.config, "sample_id": row["sample_id"], "source_id": row["source_id"],
        "conversation_id": row.get("conversation_id", row["sample_id"]), "turn": row.get("turn", 0),
        "sample_index": row.get("sample_index", 0), "finish_reason": row["finish_reason"],
        "is_tool_call": bool(row["tool_calls"]), "prompt_tokens": row["prompt_tokens"],
    }
    return record


def _end_of_turn_ids(options: ExportOptions) -> tuple[int, ...]:
    """The template's own turn endings: the profile's required stop tokens (optional ones, like
    Kimi's `[EOS]`, are listed after them in `MarkerIds.stop_ids`)."""
    assert options.markers is not None and options.profile is not None
    return options.markers.stop_ids[: len(options.profile.stop_tokens)]


def _kept_conversation(row: Row, options: ExportOptions, skipped: Counter) -> list[dict[str, Any]] | None:
    """The row's conversation with its generated turn, or None (counted) when it is left out."""
    if row["finish_reason"] != "stop" and not options.include_unfinished:
        skipped["did not stop (--include-unfinished keeps them)"] += 1
        return None
    stop = row["output_ids"][row["stop_index"]] if row["stop_index"] >= 0 else None
    if stop is not None and stop not in _end_of_turn_ids(options) and not options.include_other_stops:
        skipped["stopped on a token that is not the template's end of turn (--include-other-stops keeps them)"] += 1
        return None
    if _over_max_length(row, options):
        skipped[OVER_MAX] += 1
        return None
    messages = json.loads(row["messages"])
    tools = json.loads(row["tools"]) if row["tools"] else None
    generated = history_message(row["output_ids"], row, options.tokenizer, options.markers, options.profile,
                                tools=tools, first_call_index=count_calls(messages))
    return [*messages, generated]


RESERVED = ("id", "conversations", "tools")
STRING_ARGUMENTS = MessageForm(arguments="string")


def specforge_record(row: Row, options: ExportOptions, skipped: Counter) -> dict[str, Any] | None:
    conversation = _kept_conversation(row, options, skipped)
    if conversation is None:
        return None
    record: dict[str, Any] = {"id": _row_id(row, options),
                              # every call's arguments a JSON string, as `tojson`/`json.dumps` write them
                              "conversations": STRING_ARGUMENTS.apply(Conversation(conversation))[0],
                              "tools": row["tools"] or "[]"}
    for key, value in json.loads(row.get("template_kwargs") or "{}").items():
        if key in RESERVED:
            raise ConfigError(f"template kwarg {key!r} of sample {row['sample_id']} would overwrite SpecForge's "
                              f"{key!r} column")
        record[key] = value
    return record


def modelopt_record(row: Row, options: ExportOptions, skipped: Counter) -> dict[str, Any] | None:
    conversation = _kept_conversation(row, options, skipped)
    if conversation is None:
        return None
    if row["tools"]:
        skipped[TOOLS_DROPPED] += 1
    messages, _ = options.message_form.apply(Conversation(conversation))
    return {"conversation_id": _row_id(row, options), "messages": messages}


def jsonl_record(row: Row, options: ExportOptions, skipped: Counter) -> dict[str, Any]:
    return dict(row)


FORMATS: dict[str, Callable[[Row, ExportOptions, Counter], dict[str, Any] | None]] = {
    "ids": ids_record,
    "speculators": ids_record,
    "specforge": specforge_record,
    "modelopt": modelopt_record,
    "jsonl": jsonl_record,
}
# What each format needs beyond the rows.
NEEDS_TOKENIZER = {"specforge", "modelopt"}
CONVERSATION_FORMATS = {"specforge", "modelopt"}
# Counted reasons that keep the row (not "left out").
KEPT = (TRUNCATED, TOOLS_DROPPED)


@dataclass(frozen=True)
class ExportSummary:
    path: Path
    written: int
    counts: Counter

    @property
    def skipped(self) -> int:
        return sum(n for reason, n in self.counts.items() if reason not in KEPT)


def last_turns(batches: Iterable[Iterable[Row]]) -> Iterator[list[Row]]:
    """Only each rollout's last row (rows in sample_id order: a rollout's turns are consecutive)."""
    held: Row | None = None
    for batch in batches:
        out = []
        for row in batch:
            if held is not None and _rollout(held) != _rollout(row):
                out.append(held)
            held = row
        yield out
    if held is not None:
        yield [held]


def _rollout(row: Row) -> tuple[int, int]:
    return row.get("conversation_id", row["sample_id"]), row.get("sample_index", 0)


def export_rows(
    batches: Iterable[Iterable[Row]], fmt: str, path: str | Path, options: ExportOptions
) -> ExportSummary:
    """Write one line per record to `path` (via a temporary file, so a failed export leaves none)."""
    if fmt not in FORMATS:
        raise ConfigError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if fmt in NEEDS_TOKENIZER and (options.tokenizer is None or options.profile is None or options.markers is None):
        raise ConfigError(f"--format {fmt} decodes text: it needs the data's tokenizer and profile")
    if options.overlong not in OVERLONG:
        raise ConfigError(f"--overlong must be one of {', '.join(OVERLONG)}, got {options.overlong!r}")
    if options.overlong == "truncate" and fmt not in ("ids", "speculators"):
        raise ConfigError(f"--overlong truncate applies to --format ids only (a cut conversation is not a turn); "
                          f"use --overlong drop with --format {fmt}")
    if fmt in CONVERSATION_FORMATS and not options.every_turn:
        batches = last_turns(batches)
    to_record = FORMATS[fmt]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    counts: Counter = Counter()
    with written_whole(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as handle:
            for batch in batches:
                lines = []
                for row in batch:
                    record = to_record(row, options, counts)
                    if record is not None and not too_few_loss_tokens(row, options, counts):
                        lines.append(json.dumps(record, ensure_ascii=False, separators=(",", ":")))
                if lines:
                    handle.write("\n".join(lines) + "\n")
                written += len(lines)
    return ExportSummary(path=path, written=written, counts=counts)
