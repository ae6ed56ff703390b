#!/usr/bin/env python
"""The in-flight window against a KV-bounded engine with attention DP: static (before) vs load-driven.

This runs against a MODEL of an engine, not SGLang: a local /generate server
(stand_ins/sglang_server.py, `--backend kv`) with `--ranks` attention-DP schedulers, each
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

Second part (`--radix`), a model of SGLang's prefix (radix) cache, not SGLang: B1-like prompts --
`--groups` distinct system prompt + tools prefixes (`--prefix-tokens` each) shared by the prompts of
a group, each with its own ~60-token question -- handed to an engine that holds the prefixes of the
last `--cache-prefixes` distinct groups it served (LRU), in the order the run hands them out:
shuffled (the source's order) vs grouped (`run.conversations.grouped_by_prefix`, what the SGLang
engines use now). Reported: the share of prompt tokens served from the cache.

    python -m benchmarks.bench_window                          # both cases, 8 ranks
    python -m benchmarks.bench_window --reported-capacity 64   # one case
    python -m benchmarks.bench_window --radix                  # the prefix-cache model only
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

from eagle3_synth.engines import GenerationRequest, SamplingParams  # noqa: E402
from eagle3_synth.engines.sglang.http import SGLangHTTPEngine  # noqa: E402
from stand_ins.sglang_server import server_process  # noqa: E402

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


def radix(groups: int, per_group: int, prefix_tokens: int, cache_prefixes: int, seed: int = 0) -> list[str]:
    """Prefix-cache hit rate of shuffled vs grouped submission (module doc)."""
    from collections import OrderedDict

    from eagle3_synth.contract.row import PreparedPrompt
    from eagle3_synth.run.conversations import Turn, grouped_by_prefix

    rng = random.Random(seed)
    tools = [[{"type": "function", "function": {"name": f"tool_{g}"}}] for g in range(groups)]
    turns = []
    for g in range(groups):
        for _ in range(per_group):
            question = rng.randrange(40, 80)
            messages = [{"role": "system", "content": f"system {g}"}, {"role": "user", "content": "q"}]
            rollout = PreparedPrompt(len(turns), "", [g] * prefix_tokens + [7] * question, messages, tools[g])
            turns.append(Turn(rollout, 0, rollout.prompt_ids, messages))
    rng.shuffle(turns)

    def hit_rate(order) -> float:
        cache: OrderedDict[int, None] = OrderedDict()
        cached = total = 0
        for turn in order:
            group = turn.prompt_ids[0]
            total += len(turn.prompt_ids)
            if group in cache:
                cached += prefix_tokens
                cache.move_to_end(group)
            else:
                cache[group] = None
                if len(cache) > cache_prefixes:
                    cache.popitem(last=False)
        return cached / total

    shuffled, grouped = hit_rate(turns), hit_rate(grouped_by_prefix(iter(turns)))
    return [f"# prefix-cache model: {groups} groups x {per_group} prompts, {prefix_tokens}-token shared prefix, "
            f"cache holds {cache_prefixes} prefixes",
            "| submission | prompt tokens from the cache |", "|---|---|",
            f"| shuffled (source order) | {shuffled:.1%} |", f"| grouped (grouped_by_prefix, lookahead 1,024) | {grouped:.1%} |"]


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
    parser.add_argument("--radix", action="store_true", help="only the prefix-cache model (see the module doc)")
    parser.add_argument("--groups", type=int, default=2000)
    parser.add_argument("--per-group", type=int, default=6)
    parser.add_argument("--prefix-tokens", type=int, default=400)
    parser.add_argument("--cache-prefixes", type=int, default=200)
    args = parser.parse_args()
    if args.radix:
        print("\n".join(radix(args.groups, args.per_group, args.prefix_tokens, args.cache_prefixes)))
        return 0
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
