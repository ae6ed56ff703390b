#!/usr/bin/env python
"""Requests/s of the sglang-http engine against an instant local /generate server (floor: 500/s).

The server (stand_ins/sglang_server.py, `--backend instant`) answers every request at once
with 8 output ids and runs in its own process, so this measures our side: request building,
aiohttp, JSON, result checks, the in-flight window. A real engine is far slower per request;
the floor only says the client is never what a run waits for.

    python -m benchmarks.bench_http_client                      # 20,000 requests, window 256
    python -m benchmarks.bench_http_client --compare-clients    # also raw aiohttp vs httpx loops

Prints one Markdown table row per measurement, for benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from eagle3_synth.engines import GenerationRequest, SamplingParams  # noqa: E402
from eagle3_synth.engines.sglang.protocol import RetryPolicy  # noqa: E402
from eagle3_synth.engines.sglang.http import SGLangHTTPEngine  # noqa: E402
from stand_ins.sglang_server import server_process  # noqa: E402

FLOOR = 500.0
PROMPT_TOKENS = 300


def engine_rate(url: str, n: int, window: int) -> tuple[float, float]:
    """(requests/s, requests per client CPU second): the second is what the client alone could do."""
    rng = random.Random(0)
    requests = [GenerationRequest(i, [rng.randrange(1, 900) for _ in range(PROMPT_TOKENS)]) for i in range(n)]
    params = SamplingParams(max_new_tokens=10_240, temperature=0.6, stop_token_ids=(2,))
    engine = SGLangHTTPEngine((url,), max_in_flight=window, retry=RetryPolicy(max_retries=0))
    try:
        list(engine.generate(requests[: min(500, n)], params))  # warm the connections
        started, cpu = time.perf_counter(), time.process_time()
        count = sum(1 for result in engine.generate(requests, params) if result.error is None)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    finally:
        engine.close()
    if count != n:
        raise SystemExit(f"only {count} of {n} requests succeeded")
    return n / elapsed, n / cpu


async def raw_rate(client: str, url: str, n: int, window: int) -> float:
    """The bare client, no engine: semaphore + POST + json, to compare HTTP libraries."""
    payload = {"input_ids": list(range(PROMPT_TOKENS)),
               "sampling_params": {"max_new_tokens": 10_240, "temperature": 0.6, "stop_token_ids": [2]}}
    semaphore = asyncio.Semaphore(window)
    if client == "aiohttp":
        import aiohttp

        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=window)) as session:
            async def one() -> None:
                async with semaphore, session.post(url + "/generate", json=payload) as response:
                    json.loads(await response.read())

            started = time.perf_counter()
            await asyncio.gather(*(one() for _ in range(n)))
            return n / (time.perf_counter() - started)
    try:
        import httpx2 as httpx
    except ImportError:
        import httpx
    limits = httpx.Limits(max_connections=window, max_keepalive_connections=window)
    async with httpx.AsyncClient(limits=limits, timeout=600) as session:
        async def one_httpx() -> None:
            async with semaphore:
                json.loads((await session.post(url + "/generate", json=payload)).content)

        started = time.perf_counter()
        await asyncio.gather(*(one_httpx() for _ in range(n)))
        return n / (time.perf_counter() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--max-in-flight", type=int, default=256)
    parser.add_argument("--compare-clients", action="store_true", help="also time bare aiohttp and httpx loops")
    args = parser.parse_args()
    machine = f"{platform.machine()}, {__import__('os').cpu_count()} cores, Python {platform.python_version()}"
    print(f"# {time.strftime('%Y-%m-%d')} | {machine} | prompt {PROMPT_TOKENS} ids, 8 output ids per response")
    print("| what | requests | in flight | requests/s | requests per client CPU-second |")
    print("|---|---|---|---|---|")
    with server_process("--backend", "instant") as url:
        rate, cpu_rate = engine_rate(url, args.requests, args.max_in_flight)
        print(f"| sglang-http engine (aiohttp, checks, window) | {args.requests} | {args.max_in_flight} "
              f"| {rate:,.0f} | {cpu_rate:,.0f} |")
        if args.compare_clients:
            for client in ("aiohttp", "httpx"):
                n = args.requests if client == "aiohttp" else min(args.requests, 3000)
                raw = asyncio.run(raw_rate(client, url, n, args.max_in_flight))
                print(f"| bare {client} loop | {n} | {args.max_in_flight} | {raw:,.0f} | |")
    if rate < FLOOR:
        print(f"below the floor of {FLOOR:.0f} requests/s", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
