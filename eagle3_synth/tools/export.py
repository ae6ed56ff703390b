"""Exports for training frameworks, one JSONL line per row.

- `speculators` (vllm-project/speculators, "speculator format"): `{"id", "input_ids",
  "loss_mask", "text", "metadata"}`. `input_ids = prompt_ids + output_ids`, token-exact;
  speculators' `prepare_data.py` passes rows that carry `input_ids` + `loss_mask` straight through
  (no re-rendering). `text` is a decode for review only, as in speculators' own regeneration rows.
- `specforge` (sgl-project/SpecForge, conversation format): `{"id", "conversations", "tools"}`,
  the prompt messages plus the generated assistant turn as `content` / `reasoning_content` /
  `tool_calls` decoded from the boundary columns. SpecForge re-tokenizes this text with its chat
  template, so it is NOT token-exact (whitespace, tool-call JSON and special-token spelling may
  come out differently); rows that did not finish with a stop token are left out by default,
  because re-templating would give them an end-of-turn token the model never wrote.
- `jsonl`: every contract column as it is stored, one row per line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eagle3_synth.tools.decode import assistant_message, decode_ids
from eagle3_synth.errors import ConfigError
from eagle3_synth.tools.training import TrainOn, training_example


@dataclass(frozen=True)
class ExportOptions:
    config: str
    # Needed for `text` (speculators) and for decoding (specforge); `jsonl` needs none.
    tokenizer: Any = None
    profile: str | None = None
    train_on: TrainOn = "output"
    # specforge: also export rows cut off by max_new_tokens (their text gets a false end of turn).
    include_unfinished: bool = False


def _row_id(row: Mapping[str, Any], options: ExportOptions) -> str:
    return f"{options.config}-{row['sample_id']}"


def speculators_record(row: Mapping[str, Any], options: ExportOptions) -> dict[str, Any]:
    example = training_example(row, train_on=options.train_on)
    record: dict[str, Any] = {"id": _row_id(row, options), **example}
    if options.tokenizer is not None:
        record["text"] = decode_ids(options.tokenizer, example["input_ids"])
    record["metadata"] = {
        "config": options.config,
        "sample_id": row["sample_id"],
        "source_id": row["source_id"],
        "finish_reason": row["finish_reason"],
        "is_tool_call": bool(row["tool_calls"]),
        "prompt_tokens": row["prompt_tokens"],
    }
    return record


def specforge_record(row: Mapping[str, Any], options: ExportOptions) -> dict[str, Any] | None:
    if row["finish_reason"] != "stop" and not options.include_unfinished:
        return None
    messages = json.loads(row["messages"])
    return {
        "id": _row_id(row, options),
        "conversations": [*messages, assistant_message(dict(row), options.tokenizer, options.profile or "")],
        "tools": json.loads(row["tools"]) if row["tools"] else [],
    }


def jsonl_record(row: Mapping[str, Any], options: ExportOptions) -> dict[str, Any]:
    return dict(row)


FORMATS: dict[str, Callable[[Mapping[str, Any], ExportOptions], dict[str, Any] | None]] = {
    "speculators": speculators_record,
    "specforge": specforge_record,
    "jsonl": jsonl_record,
}
# What each format needs beyond the rows.
NEEDS_TOKENIZER = {"specforge"}


@dataclass(frozen=True)
class ExportSummary:
    path: Path
    written: int
    skipped: int


def export_rows(
    batches: Iterable[Iterable[Mapping[str, Any]]], fmt: str, path: str | Path, options: ExportOptions
) -> ExportSummary:
    """Write one line per row to `path` (via a temporary file, so a failed export leaves none)."""
    if fmt not in FORMATS:
        raise ConfigError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if fmt in NEEDS_TOKENIZER and (options.tokenizer is None or not options.profile):
        raise ConfigError(f"--format {fmt} decodes text: it needs the data's tokenizer and profile")
    to_record = FORMATS[fmt]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    written = skipped = 0
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            for batch in batches:
                lines = []
                for row in batch:
                    record = to_record(row, options)
                    if record is None:
                        skipped += 1
                        continue
                    lines.append(json.dumps(record, ensure_ascii=False, separators=(",", ":")))
                if lines:
                    handle.write("\n".join(lines) + "\n")
                written += len(lines)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return ExportSummary(path=path, written=written, skipped=skipped)
