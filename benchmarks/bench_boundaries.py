#!/usr/bin/env python
"""Time the boundary finder per sample, for one-token markers (Kimi) and markers of several tokens
(gpt-oss harmony, DeepSeek-V4 DSML), on synthetic ~2,000-id outputs of the fixture tokenizers.

    python -m benchmarks.bench_boundaries [--samples 3000]

Each output is ordinary ids with the family's markers written in by encoding marker text, a third
with a tool call; the figure is microseconds per sample of `prompt_opens_reasoning` +
`find_boundaries` (what assembly and validate run for every row).
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

from eagle3_synth.contract.boundaries import find_boundaries, prompt_opens_reasoning
from eagle3_synth.prompts.templating import load_tokenizer
from eagle3_synth.contract.profiles import PROFILES, resolve_markers

TOKENIZERS = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "tokenizers"
# family -> (fixture folder, text around reasoning, text of a call, stop)
SHAPES = {
    "kimi_k2": ("kimi_k25", ("", "</think>"),
                '<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{"a": 1}'
                "<|tool_call_end|><|tool_calls_section_end|>", "<|im_end|>"),
    "gpt_oss": ("gpt_oss", ("<|channel|>analysis<|message|>", "<|end|>"),
                '<|start|>assistant to=functions.f<|channel|>commentary json<|message|>{"a": 1}', "<|call|>"),
    "deepseek_dsml": ("deepseek_v4", ("", "</think>"),
                      '<｜DSML｜tool_calls>\n<｜DSML｜invoke name="f">\n<｜DSML｜parameter name="a" string="false">1'
                      "</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>", "<｜end▁of▁sentence｜>"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=3000)
    args = parser.parse_args()
    rng = random.Random(0)
    for family, (folder, (open_text, close_text), call_text, stop_text) in SHAPES.items():
        tokenizer = load_tokenizer(str(TOKENIZERS / folder))
        markers = resolve_markers(PROFILES[family], tokenizer)
        encode = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
        ordinary = [i for i in range(300, 1500)]
        outputs = []
        for n in range(args.samples):
            body = [rng.choice(ordinary) for _ in range(1000)]
            tail = [rng.choice(ordinary) for _ in range(950)]
            call = encode(call_text) if n % 3 == 0 else []
            outputs.append(encode(open_text) + body + encode(close_text) + tail + call + encode(stop_text))
        prompt = [rng.choice(ordinary) for _ in range(100)]
        started = time.perf_counter()
        for ids in outputs:
            find_boundaries(ids, markers, prompt_opens=prompt_opens_reasoning(prompt, markers), finish_reason="stop")
        per = (time.perf_counter() - started) / len(outputs) * 1e6
        print(f"{family:<14} {sum(map(len, outputs)) / len(outputs):,.0f} ids a sample: {per:.1f} us per sample")


if __name__ == "__main__":
    main()
