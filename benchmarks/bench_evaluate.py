#!/usr/bin/env python
"""What `eagle3-synth evaluate` costs on top of SGLang's own speculative decoding: the same rows
through one in-process SGLang 0.5.23 Engine with an EAGLE-3 drafter, once as a bare
`Engine.generate` of every row in one batch call, once as evaluate's speculative pass
(`evaluate.run_pass`: one request per row through the in-flight window, every result checked,
the counts read). Run with the SGLang venv's interpreter; the same engine serves both, alternating
(bare, evaluate, bare, evaluate ...), after one untimed warm-up request (the first draft step compiles).

Prints Markdown rows for benchmarks/README.md: rows/s and tokens/s of each, and the ratio (floor 1.15x).
The drafter defaults to a random one of the tiny model's shapes (the timing does not depend on
what it accepts much: a random drafter is the worst case, every step verifying its drafts).

    .venv-sglang/bin/python -m benchmarks.bench_evaluate --rows 128 --max-new-tokens 128 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "tests" / "fixtures" / "models" / "tiny-kimi"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=64, help="rows evaluated (B3_ultrachat's prompts, repeated)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--drafter", type=Path, help="an SGLang-layout drafter (default: a random one)")
    parser.add_argument("--num-steps", type=int, default=3)
    parser.add_argument("--eagle-topk", type=int, default=1)
    parser.add_argument("--num-draft-tokens", type=int, default=4)
    args = parser.parse_args()
    os.environ["SGLANG_USE_CPU_ENGINE"] = "1"

    from eagle3_synth.engines import EngineOptions, SamplingParams, create_engine
    from eagle3_synth.engines.sglang.protocol import sglang_sampling_params
    from eagle3_synth.evaluate import Row, run_pass
    from stand_ins.drafters import random_drafter

    with tempfile.TemporaryDirectory() as tmp:
        drafter = args.drafter or random_drafter(Path(tmp) / "drafter")
        prompts = prompt_ids(args.rows)
        rows = [Row("B3_ultrachat", i, 0, ids, [], {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0,
                                                     "max_new_tokens": args.max_new_tokens, "seed": None})
                for i, ids in enumerate(prompts)]
        params = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=0.0, stop_token_ids=(2033, 2034),
                                vocab_size=2048)
        options = EngineOptions(model=str(MODEL), dtype="bfloat16", engine_args={
            "device": "cpu", "mem_fraction_static": 0.3, "speculative_algorithm": "EAGLE3",
            "speculative_draft_model_path": str(drafter), "speculative_num_steps": args.num_steps,
            "speculative_eagle_topk": args.eagle_topk, "speculative_num_draft_tokens": args.num_draft_tokens})
        engine = create_engine("sglang", options)
        try:
            sampling = [sglang_sampling_params(replace(params, **row.sampling)) for row in rows]
            engine.engine.generate(input_ids=[prompts[0]], sampling_params=[sampling[0]])  # compile, untimed
            results = {"bare": [], "evaluate": []}
            for _ in range(args.repeat):
                started = time.perf_counter()
                out = engine.engine.generate(input_ids=prompts, sampling_params=sampling)
                results["bare"].append((time.perf_counter() - started, sum(o["meta_info"]["completion_tokens"] for o in out)))
                done = run_pass(engine, rows, params)
                results["evaluate"].append((done.seconds, done.tokens))
        finally:
            engine.close()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cpus; rows {args.rows}, "
          f"max_new_tokens {args.max_new_tokens}, steps/topk/draft {args.num_steps}/{args.eagle_topk}/{args.num_draft_tokens}")
    print("| pass | seconds | rows/s | tokens/s |\n|---|---|---|---|")
    for name, runs in results.items():
        for seconds, tokens in runs:
            print(f"| {name} | {seconds:.1f} | {args.rows / seconds:.2f} | {tokens / seconds:.1f} |")
    bare = min(s for s, _ in results["bare"])
    ours = min(s for s, _ in results["evaluate"])
    print(f"\nevaluate / bare (best of {args.repeat} each): {ours / bare:.3f}x")


def prompt_ids(count: int) -> list[list[int]]:
    """B3_ultrachat's bundled prompts, templated for the tiny model, repeated to `count` (each copy
    made distinct by its position in the list only: the prefix cache serves the repeats alike in both passes)."""
    from eagle3_synth.cli import main as cli

    with tempfile.TemporaryDirectory() as tmp:
        assert cli(["build", "B3_ultrachat", "--model", str(MODEL), "--max-new-tokens", "1", "--out", tmp]) == 0
        import pyarrow.parquet as pq

        table = pq.read_table(next(Path(tmp, "B3_ultrachat").glob("train-*.parquet")), columns=["prompt_ids"])
        base = [list(ids) for ids in table.column("prompt_ids").to_pylist()]
    return [base[i % len(base)] for i in range(count)]


if __name__ == "__main__":
    main()
