#!/usr/bin/env python
"""What eagle3-synth costs on top of SGLang itself: the same prompts through a bare loop over the
real SGLang 0.5.23 (CPU backend, bf16, the bundled tiny model) and through `eagle3-synth build`.

- in-process: `build --engine sglang` (a fresh process: imports, templating, engine start,
  generation, journal, assembly) against a bare script in a fresh process of the same venv that
  starts `sglang.Engine` with the same arguments and runs `async_generate` per prompt with the
  same bounded window over the same prompt ids (read from the build's rows);
- over HTTP: `build --engine sglang-http` against one running `launch_server`, against a bare
  aiohttp loop (one non-stream `/generate` per prompt, the same window) to the same server; the
  server's prefix cache is flushed (`/flush_cache`) before each pass.

Each pair alternates (build, bare, build, bare ...), so neither always runs on a warmer machine.
Prints Markdown rows for BENCHMARKS.md: wall seconds of each and their ratio (floor 1.15x).

    python scripts/bench_sglang_overhead.py --sglang-python .venv-sglang/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "tests" / "fixtures" / "models" / "tiny-kimi"
CONFIG = "B3_ultrachat"
STOP = [2033, 2034]
ENGINE_ARGS = {"device": "cpu", "dtype": "bfloat16", "mem_fraction_static": 0.1}
CPU_ENV = {**os.environ, "SGLANG_USE_CPU_ENGINE": "1"}

BARE_ENGINE = r'''
import asyncio, json, sys, time
import sglang

def main():
    prompts = json.load(open(sys.argv[1]))
    args, window, max_new = json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    engine = sglang.Engine(model_path=sys.argv[5], skip_tokenizer_init=True, log_level="error", **args)
    sampling = {"max_new_tokens": max_new, "temperature": 0, "stop_token_ids": %s}

    async def run():
        gate = asyncio.Semaphore(window)
        async def one(ids):
            async with gate:
                return await engine.async_generate(input_ids=ids, sampling_params=dict(sampling))
        return await asyncio.gather(*(one(ids) for ids in prompts))

    results = engine.loop.run_until_complete(run())
    engine.shutdown()
    print(json.dumps({"tokens": sum(len(r["output_ids"]) for r in results)}))

if __name__ == "__main__":
    main()
''' % STOP


def write_prompts(path: Path, count: int) -> None:
    """Distinct single-turn chats, so the prefix cache shares only the template's opening."""
    with open(path, "w", encoding="utf-8") as handle:
        for i in range(count):
            words = " ".join(f"w{(i * 7919 + j * 104729) % 997}" for j in range(24))
            handle.write(json.dumps({"id": f"bench-{i}", "messages": [{"role": "user", "content": f"Question {i}: {words}?"}]}) + "\n")


def timed(command: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{command[:3]} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return elapsed, done.stdout


def build_command(eagle3_synth: str, prompts: Path, out: Path, max_new: int, window: int, engine: list[str]) -> list[str]:
    return [eagle3_synth, "build", CONFIG, "--model", str(MODEL), "--prompts", str(prompts), "--temperature", "0",
            "--max-new-tokens", str(max_new), "--dtype", "bfloat16", "--max-in-flight", str(window), "--out", str(out),
            *engine]


def prompt_ids(out: Path) -> list[list[int]]:
    import pyarrow.parquet as pq

    rows = [row for f in sorted((out / CONFIG).glob("train-*.parquet")) for row in pq.read_table(f).to_pylist()]
    return [row["prompt_ids"] for row in sorted(rows, key=lambda r: r["sample_id"])]


def bare_http(url: str, prompts: list[list[int]], window: int, max_new: int) -> float:
    import asyncio

    import aiohttp

    async def run() -> None:
        gate = asyncio.Semaphore(window)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as session:
            async def one(ids: list[int]) -> None:
                async with gate:
                    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": max_new, "temperature": 0,
                                                                  "stop_token_ids": STOP}}
                    async with session.post(url + "/generate", json=body) as response:
                        assert response.status == 200, await response.text()
                        await response.json()
            await asyncio.gather(*(one(ids) for ids in prompts))

    started = time.perf_counter()
    asyncio.run(run())
    return time.perf_counter() - started


def flush_cache(url: str) -> None:
    import urllib.request

    urllib.request.urlopen(urllib.request.Request(url + "/flush_cache", method="POST"), timeout=60).read()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sglang-python", required=True, help="the SGLang venv's interpreter (make sglang-venv)")
    parser.add_argument("--prompts", type=int, default=256)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--window", type=int, default=64, help="requests in flight, both sides")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--skip", choices=("engine", "http"), help="leave one of the two out")
    args = parser.parse_args()
    sglang_bin = Path(args.sglang_python).parent
    work = Path(tempfile.mkdtemp(prefix="bench-sglang-"))
    prompts = work / "prompts.jsonl"
    write_prompts(prompts, args.prompts)
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}; "
          f"{args.prompts} prompts, greedy, max_new_tokens {args.max_new_tokens}, window {args.window}")
    print("| path | pass | build s | bare s | build / bare | output tokens |")
    print("|---|---|---|---|---|---|")
    engine_args = [a for k, v in ENGINE_ARGS.items() if k != "dtype" for a in ("--engine-arg", f"{k}={v}")]
    if args.skip != "engine":
        for i in range(args.repeat):
            out = work / f"engine-{i}"
            build_s, _ = timed(build_command(str(sglang_bin / "eagle3-synth"), prompts, out, args.max_new_tokens,
                                             args.window, ["--engine", "sglang", *engine_args]), CPU_ENV)
            ids = prompt_ids(out)
            (work / "ids.json").write_text(json.dumps(ids))
            (work / "bare_engine.py").write_text(BARE_ENGINE)
            bare_s, printed = timed([str(sglang_bin / "python"), str(work / "bare_engine.py"), str(work / "ids.json"),
                                     json.dumps(ENGINE_ARGS), str(args.window), str(args.max_new_tokens), str(MODEL)],
                                    CPU_ENV)
            tokens = json.loads(printed.splitlines()[-1])["tokens"]
            print(f"| in-process (`--engine sglang`) | {i + 1} | {build_s:.1f} | {bare_s:.1f} | {build_s / bare_s:.3f}x | {tokens} |",
                  flush=True)
    if args.skip != "http":
        sys.path.insert(0, str(ROOT))
        from tests.support.real_sglang import RealServer  # the test suite's server: started and stopped by pid

        os.environ["EAGLE3_SYNTH_SGLANG_PYTHON"] = args.sglang_python
        with RealServer(work / "server.log") as server:
            for i in range(args.repeat):
                out = work / f"http-{i}"
                flush_cache(server.url)
                build_s, _ = timed(build_command(str(ROOT / ".venv" / "bin" / "eagle3-synth"), prompts, out,
                                                 args.max_new_tokens, args.window,
                                                 ["--engine", "sglang-http", "--url", server.url]))
                ids = prompt_ids(out)
                flush_cache(server.url)
                bare_s = bare_http(server.url, ids, args.window, args.max_new_tokens)
                print(f"| HTTP (`--engine sglang-http`, one server) | {i + 1} | {build_s:.1f} | {bare_s:.1f} | "
                      f"{build_s / bare_s:.3f}x | |", flush=True)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
