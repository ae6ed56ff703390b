"""Running the CLI in tests: encoding marker-bearing outputs, replay files, prompt files."""

from __future__ import annotations

import json
from pathlib import Path

from eagle3_synth.cli import main


def marker_ids(tokenizer, *parts: str) -> list[int]:
    ids: list[int] = []
    for part in parts:
        if part in tokenizer.get_vocab() and part.startswith(("<", "[")):
            ids.append(tokenizer.convert_tokens_to_ids(part))
        else:
            ids.extend(tokenizer.encode(part, add_special_tokens=False))
    return ids


def write_replay(path: Path, tokenizer, count: int) -> list[list[int]]:
    """Recorded outputs: answers, tool calls and a truncated one, as a Kimi model writes them."""
    shapes = [
        ("Thinking.", "</think>", "Done.", "<|im_end|>"),
        ("Use the tool.", "</think>", "<|tool_calls_section_begin|>", "<|tool_call_begin|>", "functions.f:0",
         "<|tool_call_argument_begin|>", '{"x": 1}', "<|tool_call_end|>", "<|tool_calls_section_end|>", "<|im_end|>"),
        ("A long thought that never",),
    ]
    outputs = []
    with open(path, "w", encoding="utf-8") as handle:
        for sample_id in range(count):
            shape = shapes[sample_id % len(shapes)]
            ids = marker_ids(tokenizer, *shape)
            outputs.append(ids)
            record = {"sample_id": sample_id, "output_ids": ids}
            if len(shape) == 1:
                record["finish_reason"] = "length"
            handle.write(json.dumps(record) + "\n")
    return outputs


def run_cli(args: list[str], capsys) -> tuple[int, str]:
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def write_prompts(path: Path, lines: list[str]) -> None:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
