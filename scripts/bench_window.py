#!/usr/bin/env python
"""The in-flight window against a KV-bounded engine with attention DP: static (before) vs load-driven.

This runs against a MODEL of an engine, not SGLang: a local /generate server
(tests/support/sglang_server.py, `--backend kv`) with `--ranks` attention-DP schedulers, each
running requests while its KV memory holds their prompt + output tokens (the rest wait), each
request then taking (output tokens x a per-token time). It serves server info as sglang 0.5.23
reports attention DP (`attn_dp_size=N`, `dp_size=1`, `effective_max_running_requests_per_dp` =
`--reported-capacity` per rank) and `/v1/loads` per rank.

Strategies, each against a fresh server, each stopping new requests after `--stop-after` seconds
(what `--max-hours` does) and then draining:
- static window, the 0.5.x default: 2 x effective_max_running_requests_per_dp x dp_size;
- load-driven window (now): starts at what runs (capacity x every DP rank), then follows /v1/loads.

Two cases (`--reported-capacity`): 64, as with `max_running_requests=64` (the static window is then
sized for one rank of eight: the engine is underfed), and 2048, sglang's unset default (far above
what KV holds at these lengths: the static window queues thousands of requests, which still run
after the stop). Reported: KV idle before the stop, requests queued at the stop, drain after it.

    python scripts/bench_window.py                          # both cases, 8 ranks
    python scripts/bench_window.py --reported-capacity 64   # one case
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
from tests.support.sglang_server import server_process  # noqa: E402

CAP = 10_240
STOP = 2


def get(url: str, path: str) -> dict:
    with urllib.request.urlopen(url + path) as response:
        return json.loads(response.read())


def run(url: str, prompts: list[list[int]], stop_after: float, static: int | None) -> dict:
    """Generate until `stop_after` seconds, then drain; what the client saw at the stop."""
    engine = SGLangHTTPEngine((url,), max_in_flight=static or 256, load_driven=static is None)
    engine.check_servers()
    params = SamplingParams(max_new_tokens=CAP, temperature=0.6, stop_token_ids=(STOP,))
    started = time.monotonic()
    at_stop: dict = {}

    def requests():
        for i, prompt in enumerate(prompts):
            if time.monotonic() - started >= stop_after:
                loads = get(url, "/v1/loads")["loads"]
                at_stop.update(waiting=sum(l["num_waiting_reqs"] for l in loads),
                               running=sum(l["num_running_reqs"] for l in loads), window=engine.max_in_flight,
                               stopped=time.monotonic())
                return
            yield GenerationRequest(i, prompt)

    try:
        done = sum(1 for r in engine.generate(requests(), params) if r.error is None)
    finally:
        engine.close()
    ended = time.monotonic()
    return {"done": done, "drain_s": ended - at_stop.get("stopped", ended), **at_stop}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--kv-tokens", type=int, default=60_000, help="KV tokens per rank")
    parser.add_argument("--per-token-ms", type=float, default=2.0)
    parser.add_argument("--median-tokens", type=float, default=300.0)
    parser.add_argument("--stop-after", type=float, default=20.0, help="seconds before no new request is sent")
    parser.add_argument("--prompts", type=int, default=40_000)
    parser.add_argument("--reported-capacity", type=int, action="append",
                        help="effective_max_running_requests_per_dp the server reports (default: 64 and 2048)")
    args = parser.parse_args()
    rng = random.Random(0)
    prompts = [[rng.randrange(3, 900) for _ in range(rng.randrange(50, 400))] for _ in range(args.prompts)]
    print(f"# {time.strftime('%Y-%m-%d')} | {platform.machine()}, {os.cpu_count()} cores | model engine: "
          f"{args.ranks} attention-DP ranks x {args.kv_tokens:,} KV tokens, {args.per_token_ms} ms/token, "
          f"median {args.median_tokens:g} output tokens | stop after {args.stop_after:g} s")
    print("| reported capacity / rank | window | KV idle before the stop | requests done | running / waiting "
          "at the stop | window at the stop | drain after the stop s |")
    print("|---|---|---|---|---|---|---|")
    for capacity in args.reported_capacity or [64, 2048]:
        server_args = ("--backend", "kv", "--ranks", str(args.ranks), "--kv-tokens", str(args.kv_tokens),
                       "--per-token-ms", str(args.per_token_ms), "--median-tokens", str(args.median_tokens),
                       "--reported-capacity", str(capacity))
        for name, static in (("static (0.5.x default)", 2 * capacity), ("load-driven (now)", None)):
            with server_process(*server_args) as url:
                result = run(url, prompts, args.stop_after, static)
                stats = get(url, f"/stats?until={result['stopped']}" if "stopped" in result else "/stats")
            # KV idle up to the stop: the share of all ranks' KV memory not held by a running request.
            idle = stats.get("idle_before_drain", 0.0)
            print(f"| {capacity} | {name} | {idle:.1%} | {result['done']:,} | {result.get('running', 0):,} / "
                  f"{result.get('waiting', 0):,} | {result.get('window', 0):,} | {result['drain_s']:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
