#!/usr/bin/env python
"""Time `hidden-states` on this CPU with the tiny model, against one bare forward over the same batches.

    python -m benchmarks.bench_hidden_states [--rows 160] [--max-len 1024] [--repeats 3]

Rows of random ids (lengths spread from 32 to --max-len) are batched by length as the command
batches them (`--batch-tokens`); "bare" is the decoder stack's forward over those batches and
nothing else (no hooks, no copies, no files), the floor. Each layout's run is the command's own
path: capture hooks, per-row copies, atomic file writes. Runs alternate bare / layout and the
fastest of --repeats is kept (this machine's speed drifts). Prints tokens/s, bytes per token on
disk and the ratio of each layout's time to the bare forward's.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from eagle3_synth.train.hidden_states.layouts import model_parts, LAYOUTS, Item
from eagle3_synth.train.hidden_states.job import (HiddenStatesOptions, FilePlan, batches_by_length, load_model, padded_batch,
                                                      transformers_states, write_states)

TINY = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "models" / "tiny-kimi"
LAYERS = [0, 1, 2]


def make_items(rows: int, max_len: int, fmt: str, seed: int = 0) -> list[Item]:
    rng = np.random.default_rng(seed)
    items = []
    for i in range(rows):
        n = int(rng.integers(32, max_len + 1))
        ids = rng.integers(100, 2000, size=n).astype(np.int64)
        name = LAYOUTS[fmt].file_name(i) if fmt == "speculators" else LAYOUTS[fmt].file_name("bench-0", i)
        items.append(Item(name=name, input_ids=ids, loss_mask=np.ones(n, dtype=np.int64), row_id=f"bench-{i}",
                          prompt_tokens=1))
    return items


def bare(model, items: list[Item], batch_tokens: int) -> float:
    parts = model_parts(model)
    start = time.perf_counter()
    for batch in batches_by_length(items, batch_tokens):
        ids, mask = padded_batch(batch)  # the command's own padding: only the forward differs
        with torch.inference_mode():
            parts.base(input_ids=ids, attention_mask=mask, use_cache=False)
    return time.perf_counter() - start


def layout_run(model, items: list[Item], fmt: str, options: HiddenStatesOptions) -> tuple[float, int]:
    folder = Path(tempfile.mkdtemp(prefix=f"bench-hs-{fmt}-"))
    try:
        layout = LAYOUTS[fmt](folder)
        plan = FilePlan(items=items, pending=items, layers=LAYERS, hidden_size=128, bytes_per_token=0, counts=None)
        start = time.perf_counter()
        write_states(transformers_states(model, plan, options), plan, layout, progress=False)
        elapsed = time.perf_counter() - start
        size = sum(p.stat().st_size for p in layout.folder.iterdir())
        return elapsed, size
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=160)
    parser.add_argument("--max-len", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--batch-tokens", type=int, default=HiddenStatesOptions.batch_tokens)
    args = parser.parse_args()
    print(f"torch threads {torch.get_num_threads()}, dtype {args.dtype}, batch tokens {args.batch_tokens}")
    for fmt in ("speculators", "specforge"):
        options = HiddenStatesOptions(configs=("bench",), fmt=fmt, folder=Path("."), model=str(TINY), dtype=args.dtype,
                                      batch_tokens=args.batch_tokens)
        model = load_model(options)
        items = make_items(args.rows, args.max_len, fmt)
        tokens = sum(len(it.input_ids) for it in items)
        bare(model, items, args.batch_tokens)  # warm-up
        bare_times, run_times, size = [], [], 0
        for _ in range(args.repeats):
            bare_times.append(bare(model, items, args.batch_tokens))
            elapsed, size = layout_run(model, items, fmt, options)
            run_times.append(elapsed)
        b, r = min(bare_times), min(run_times)
        print(f"{fmt:12s} {args.rows} rows, {tokens} tokens: bare forward {tokens / b:,.0f} tok/s ({b:.2f} s); "
              f"hidden-states {tokens / r:,.0f} tok/s ({r:.2f} s), {size / tokens:,.0f} bytes/token on disk; "
              f"ratio {r / b:.2f}x")


if __name__ == "__main__":
    main()
