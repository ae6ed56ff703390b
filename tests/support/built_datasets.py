"""Fixture datasets for the data-checking tests (inspect, stats, validate, export, training).

Built the way users build them: `eagle3-synth build ... --engine replay` over the fixture
tokenizers, from a prompts file and hand-made output ids that cover every boundary case: closed
reasoning then an answer, a tool call after `</think>`, a tool section that ends reasoning
implicitly (Kimi), several calls, a call cut off, and outputs truncated by max_new_tokens.
Lengths vary (some outputs over 500 tokens) so the statistics have something to measure.
"""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from eagle3_synth.cli import main
from eagle3_synth.contract.row import FEATURES

from ..conftest import KIMI_TOKENIZER, QWEN_TOKENIZER
# Special tokens by their token string, text encoded plainly: ids as a model writes them.
from .cli_runs import marker_ids as encode_parts

KIMI_CONFIG = "B1_glaive"
QWEN_CONFIG = "B3_ultrachat"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def write_prompts(path: Path, count: int) -> list[dict[str, Any]]:
    records = []
    for i in range(count):
        record: dict[str, Any] = {"id": f"p-{i}", "messages": [{"role": "user", "content": f"Question number {i}: what is {i} + {i}?"}]}
        if i % 3 == 1:
            record["tools"] = TOOLS
        records.append(record)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return records


def _thought(rng: random.Random) -> str:
    # 1..120 repetitions: outputs from a dozen tokens to well over 500.
    return " ".join(["I consider the numbers carefully."] * rng.choice([1, 2, 5, 20, 60, 120]))


def kimi_outputs(tokenizer: Any, count: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    call = ("<|tool_call_begin|>", "functions.get_weather:{n}", "<|tool_call_argument_begin|>",
            '{{"city": "Paris {n}"}}', "<|tool_call_end|>")
    records = []
    for sample_id in range(count):
        thought, shape = _thought(rng), sample_id % 6
        finish = "stop"
        if shape == 0:  # reasoning, </think>, answer
            parts = (thought, "</think>", f"The answer is {2 * sample_id}.", "<|im_end|>")
        elif shape == 1:  # reasoning, </think>, one tool call
            parts = (thought, "</think>", "<|tool_calls_section_begin|>",
                     *(p.format(n=0) for p in call), "<|tool_calls_section_end|>", "<|im_end|>")
        elif shape == 2:  # truncated inside the reasoning
            parts, finish = (thought,), "length"
        elif shape == 3:  # a tool section ends reasoning implicitly, two calls
            parts = (thought, "<|tool_calls_section_begin|>", *(p.format(n=0) for p in call),
                     *(p.format(n=1) for p in call), "<|tool_calls_section_end|>", "<|im_end|>")
        elif shape == 4:  # truncated inside a tool call
            parts, finish = (thought, "</think>", "<|tool_calls_section_begin|>", *(p.format(n=0) for p in call[:3])), "length"
        else:  # a short answer
            parts = ("Easy.", "</think>", "Yes.", "<|im_end|>")
        records.append({"sample_id": sample_id, "output_ids": encode_parts(tokenizer, *parts), "finish_reason": finish})
    return records


def qwen_outputs(tokenizer: Any, count: int, seed: int = 1) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    records = []
    for sample_id in range(count):
        thought, shape = _thought(rng), sample_id % 3
        finish = "stop"
        if shape == 0:
            parts = ("<think>", f"\n{thought}\n", "</think>", f"\n\nIt is {2 * sample_id}.", "<|im_end|>")
        elif shape == 1:
            parts = ("<think>", "\nUse the tool.\n", "</think>", "\n\n", "<tool_call>",
                     '\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n', "</tool_call>", "<|im_end|>")
        else:
            parts, finish = ("<think>", f"\n{thought}"), "length"
        records.append({"sample_id": sample_id, "output_ids": encode_parts(tokenizer, *parts), "finish_reason": finish})
    return records


def build(out: Path, config: str, tokenizer_path: Path, outputs: list[dict[str, Any]], prompts: Path,
          status: int = 0, extra: Sequence[str] = ()) -> None:
    """Build `config` from replayed `outputs`; `status` 1 where some samples have no output (they fail);
    `extra` build options (`--validation 6`)."""
    replay = out.parent / f"{config}-replay.jsonl"
    replay.write_text("".join(json.dumps(r) + "\n" for r in outputs), encoding="utf-8")
    code = main(["build", config, "--model", str(tokenizer_path), "--engine", "replay", "--replay", str(replay),
                 "--prompts", str(prompts), "--out", str(out), *extra])
    assert code == status


def build_checks_dataset(root: Path, kimi_tokenizer: Any, qwen_tokenizer: Any) -> Path:
    """A folder with B1_glaive (Kimi, 24 rows) and B3_ultrachat (Qwen3, 9 rows)."""
    root.mkdir(parents=True, exist_ok=True)
    out = root / "ds"
    write_prompts(root / "kimi-prompts.jsonl", 24)
    build(out, KIMI_CONFIG, KIMI_TOKENIZER, kimi_outputs(kimi_tokenizer, 24), root / "kimi-prompts.jsonl")
    write_prompts(root / "qwen-prompts.jsonl", 9)
    build(out, QWEN_CONFIG, QWEN_TOKENIZER, qwen_outputs(qwen_tokenizer, 9), root / "qwen-prompts.jsonl")
    return out


def copy_dataset(folder: Path, dest: Path) -> Path:
    shutil.copytree(folder, dest)
    return dest


def rewrite_rows(folder: Path, config: str, change: Callable[[dict[str, Any]], None]) -> None:
    """Apply `change` to every row of a config's Parquet files in place (to plant corruptions)."""
    for path in sorted((folder / config).glob("train-*.parquet")):
        rows = pq.read_table(path).to_pylist()
        for row in rows:
            change(row)
        pq.write_table(pa.Table.from_pylist(rows, schema=FEATURES.arrow_schema), path)


_BUILT: dict[str, Path] = {}


def checks_dataset(tmp_path_factory: Any, kimi_tokenizer: Any, qwen_tokenizer: Any) -> Path:
    """The fixture folder, built once per test session and shared read-only by every module."""
    if "folder" not in _BUILT:
        _BUILT["folder"] = build_checks_dataset(tmp_path_factory.mktemp("checks"), kimi_tokenizer, qwen_tokenizer)
    return _BUILT["folder"]
