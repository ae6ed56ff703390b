#!/usr/bin/env python
"""Does the in-flight window keep a continuous-batching engine busy? Idle fraction by strategy.

This runs against a MODEL of an engine, not SGLang: a local /generate server
(tests/support/sglang_server.py, `--backend batching`) with N slots, where each request holds a
slot for (its output tokens x a constant per-token time) and the rest wait in FIFO order. Output
lengths are long-tailed and fixed per prompt: log-normal, median ~500 tokens, capped at 10,240
(a few percent sit at the cap). The model ignores prefill, batch-size-dependent step time and
KV-cache limits; what it does show is how each client strategy leaves slots empty.

Strategies, each against a fresh server:
- one batch call: every prompt in one /generate request (returns when the last one ends);
- chunked batch calls: /generate with 2,048 prompts at a time, the next chunk after the last one;
- window: the sglang-http engine, one prompt per request, --max-in-flight at once (default 2 x slots).

Reported: wall time, idle fraction of the slots over the whole run, and before the drain (up to
the last admission -- after that every strategy can only empty out). Floor for the window: idle
before drain < 2%.

    python scripts/bench_scheduling.py                 # 8,192 prompts, 256 slots, 1 ms/token
    python scripts/bench_scheduling.py --prompts 2048 --chunk 512   # quicker
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from eagle3_synth.engines import GenerationRequest, SamplingParams  # noqa: E402
from eagle3_synth.engines.sglang.http import SGLangHTTPEngine  # noqa: E402
from tests.support.sglang_server import ContinuousBatchingModel, server_process  # noqa: E402

CAP = 10_240
STOP = 2
FLOOR = 0.02


def post(url: str, payload: dict) -> object:
    request = urllib.request.Request(url + "/generate", data=json.dumps(payload).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=3600) as response:
        return json.loads(response.read())


def batch_calls(url: str, prompts: list[list[int]], chunk: int) -> int:
    """Sequential batch /generate calls of `chunk` prompts; returns the number of results."""
    sampling = {"max_new_tokens": CAP, "temperature": 0.6, "stop_token_ids": [STOP]}
    count = 0
    for start in range(0, len(prompts), chunk):
        count += len(post(url, {"input_ids": prompts[start:start + chunk], "sampling_params": sampling}))
    return count


def window(url: str, prompts: list[list[int]], size: int) -> int:
    engine = SGLangHTTPEngine((url,), max_in_flight=size)
    params = SamplingParams(max_new_tokens=CAP, temperature=0.6, stop_token_ids=(STOP,))
    try:
        return sum(1 for r in engine.generate((GenerationRequest(i, p) for i, p in enumerate(prompts)), params)
                   if r.error is None)
    finally:
        engine.close()


def stats(url: str) -> dict:
    with urllib.request.urlopen(url + "/stats") as response:
        return json.loads(response.read())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=8192)
    parser.add_argument("--slots", type=int, default=256)
    parser.add_argument("--per-token-ms", type=float, default=1.0)
    parser.add_argument("--chunk", type=int, default=2048)
    parser.add_argument("--max-in-flight", type=int, help="window size (default 2 x slots)")
    args = parser.parse_args()
    size = args.max_in_flight or 2 * args.slots
    rng = random.Random(0)
    prompts = [[rng.randrange(3, 900) for _ in range(rng.randrange(50, 400))] for _ in range(args.prompts)]
    server_args = ("--backend", "batching", "--slots", str(args.slots), "--per-token-ms", str(args.per_token_ms))

    strategies = [
        ("one batch call", lambda url: batch_calls(url, prompts, len(prompts))),
        (f"batch calls of {args.chunk}", lambda url: batch_calls(url, prompts, args.chunk)),
        (f"window of {size} (sglang-http)", lambda url: window(url, prompts, size)),
    ]
    lengths = sorted(ContinuousBatchingModel().length_of(p, CAP) for p in prompts)
    print(f"# {time.strftime('%Y-%m-%d')} | {platform.machine()}, {os.cpu_count()} cores | model engine: "
          f"{args.slots} slots, {args.per_token_ms} ms/token | {args.prompts} prompts")
    print(f"# output tokens: median {lengths[len(lengths) // 2]}, mean {sum(lengths) / len(lengths):.0f}, "
          f"p99 {lengths[int(len(lengths) * 0.99)]}, at the {CAP} cap {sum(n == CAP for n in lengths) / len(lengths):.1%}")
    print("| strategy | wall s | idle (whole run) | idle before drain | drain s |")
    print("|---|---|---|---|---|")
    result = {}
    for name, run in strategies:
        with server_process(*server_args) as url:
            done = run(url)
            s = stats(url)
        if done != args.prompts:
            raise SystemExit(f"{name}: {done} of {args.prompts} results")
        result[name] = s
        print(f"| {name} | {s['wall_s']:.1f} | {s['idle_fraction']:.1%} | {s['idle_before_drain']:.1%} "
              f"| {s['drain_s']:.1f} |", flush=True)
    window_idle = result[strategies[-1][0]]["idle_before_drain"]
    if window_idle >= FLOOR:
        print(f"window idle before drain {window_idle:.1%} is not below {FLOOR:.0%}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
