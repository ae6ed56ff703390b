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
Prints Markdown rows for benchmarks/README.md: wall seconds of each and their ratio (floor 1.15x).

Generation must dominate for the ratio to mean what a real run sees: the bundled model ends its
answers after ~30 tokens, so `--random-model` serves a copy of it with random weights (same
tokenizer and template, `--layers`/`--hidden` of its own, seeded), whose greedy answers run to
`--max-new-tokens` (a stop id is 2 of 2,048 ids). With two `--prompts` sizes, the fixed cost
(imports, templating, engine start, assembly) and the per-sample one are told apart: the last
lines give (build_big - build_small) / (bare_big - bare_small), what eagle3-synth adds to each
sample's generation.

    python -m benchmarks.bench_sglang_overhead --sglang-python .venv-sglang/bin/python \
        --random-model --prompts 128 512 --max-new-tokens 256
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


def random_model(folder: Path, layers: int, hidden: int) -> Path:
    """The bundled model's config, tokenizer and template with random weights (seed 0), saved in
    bfloat16 by transformers (this interpreter's): answers that rarely stop before the cap."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(MODEL)
    heads = max(1, hidden // config.head_dim)
    config.update({"num_hidden_layers": layers, "hidden_size": hidden, "intermediate_size": hidden * 11 // 4,
                   "num_attention_heads": heads, "num_key_value_heads": max(1, heads // 2)})
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).to(torch.bfloat16)
    model.save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
        shutil.copy(MODEL / name, folder / name)
    return folder


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


def build_command(eagle3_synth: str, model: Path, prompts: Path, out: Path, max_new: int, window: int,
                  engine: list[str]) -> list[str]:
    return [eagle3_synth, "build", CONFIG, "--model", str(model), "--prompts", str(prompts), "--temperature", "0",
            "--max-new-tokens", str(max_new), "--dtype", "bfloat16", "--max-in-flight", str(window), "--out", str(out),
            *engine]


def built_rows(out: Path) -> tuple[list[list[int]], int]:
    """The build's prompt ids (in sample order) and how many output ids it wrote."""
    import pyarrow.parquet as pq

    rows = [row for f in sorted((out / CONFIG).glob("train-*.parquet")) for row in pq.read_table(f).to_pylist()]
    rows.sort(key=lambda r: r["sample_id"])
    return [row["prompt_ids"] for row in rows], sum(len(row["output_ids"]) for row in rows)


def bare_http(url: str, prompts: list[list[int]], window: int, max_new: int) -> tuple[float, int]:
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
                        return len((await response.json())["output_ids"])
            return sum(await asyncio.gather(*(one(ids) for ids in prompts)))

    started = time.perf_counter()
    tokens = asyncio.run(run())
    return time.perf_counter() - started, tokens


def flush_cache(url: str) -> None:
    import urllib.request

    urllib.request.urlopen(urllib.request.Request(url + "/flush_cache", method="POST"), timeout=60).read()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sglang-python", required=True, help="the SGLang venv's interpreter (make sglang-venv)")
    parser.add_argument("--prompts", type=int, nargs="+", default=[256], help="one or two sizes (two: fixed vs per-sample)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--window", type=int, default=64, help="requests in flight, both sides")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--skip", choices=("engine", "http"), help="leave one of the two out")
    parser.add_argument("--random-model", action="store_true", help="serve a random-weight copy (answers run to the cap)")
    parser.add_argument("--layers", type=int, default=4, help="--random-model's layers")
    parser.add_argument("--hidden", type=int, default=256, help="--random-model's hidden size")
    args = parser.parse_args()
    sglang_bin = Path(args.sglang_python).parent
    work = Path(tempfile.mkdtemp(prefix="bench-sglang-"))
    model = random_model(work / "model", args.layers, args.hidden) if args.random_model else MODEL
    described = f"random weights, {args.layers} layers, hidden {args.hidden}" if args.random_model else "tiny-kimi"
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}; "
          f"model {described}; greedy, max_new_tokens {args.max_new_tokens}, window {args.window}")
    print("| path | prompts | pass | build s | bare s | build / bare | output tokens (build / bare) | load |")
    print("|---|---|---|---|---|---|---|---|")
    walls: dict[tuple[str, int], list[tuple[float, float]]] = {}

    def report(path: str, size: int, i: int, build_s: float, bare_s: float, tokens: tuple[int, int]) -> None:
        walls.setdefault((path, size), []).append((build_s, bare_s))
        print(f"| {path} | {size} | {i + 1} | {build_s:.1f} | {bare_s:.1f} | {build_s / bare_s:.3f}x | "
              f"{tokens[0]} / {tokens[1]} | {os.getloadavg()[0]:.2f} |", flush=True)

    engine_args = [a for k, v in ENGINE_ARGS.items() if k != "dtype" for a in ("--engine-arg", f"{k}={v}")]
    for size in args.prompts:
        prompts = work / f"prompts-{size}.jsonl"
        write_prompts(prompts, size)
        if args.skip != "engine":
            path = "in-process (`--engine sglang`)"
            for i in range(args.repeat):
                out = work / f"engine-{size}-{i}"
                build_s, _ = timed(build_command(str(sglang_bin / "eagle3-synth"), model, prompts, out,
                                                 args.max_new_tokens, args.window,
                                                 ["--engine", "sglang", *engine_args]), CPU_ENV)
                ids, built_tokens = built_rows(out)
                (work / "ids.json").write_text(json.dumps(ids))
                (work / "bare_engine.py").write_text(BARE_ENGINE)
                bare_s, printed = timed([str(sglang_bin / "python"), str(work / "bare_engine.py"),
                                         str(work / "ids.json"), json.dumps(ENGINE_ARGS), str(args.window),
                                         str(args.max_new_tokens), str(model)], CPU_ENV)
                report(path, size, i, build_s, bare_s, (built_tokens, json.loads(printed.splitlines()[-1])["tokens"]))
                shutil.rmtree(out, ignore_errors=True)
    if args.skip != "http":
        from stand_ins.real_sglang import RealServer  # the test suite's server: started and stopped by pid

        os.environ["EAGLE3_SYNTH_SGLANG_PYTHON"] = args.sglang_python
        path = "HTTP (`--engine sglang-http`, one server)"
        with RealServer(work / "server.log", model) as server:
            for size in args.prompts:
                for i in range(args.repeat):
                    out = work / f"http-{size}-{i}"
                    flush_cache(server.url)
                    build_s, _ = timed(build_command(str(ROOT / ".venv" / "bin" / "eagle3-synth"), model,
                                                     work / f"prompts-{size}.jsonl", out, args.max_new_tokens,
                                                     args.window, ["--engine", "sglang-http", "--url", server.url]))
                    ids, built_tokens = built_rows(out)
                    flush_cache(server.url)
                    bare_s, bare_tokens = bare_http(server.url, ids, args.window, args.max_new_tokens)
                    report(path, size, i, build_s, bare_s, (built_tokens, bare_tokens))
                    shutil.rmtree(out, ignore_errors=True)
    if len(args.prompts) == 2:
        small, big = args.prompts
        for (path, size), _ in walls.items():
            if size != big or (path, small) not in walls:
                continue
            mean = {n: [sum(pair[k] for pair in walls[(path, n)]) / len(walls[(path, n)]) for k in (0, 1)]
                    for n in (small, big)}
            slope = (mean[big][0] - mean[small][0]) / (mean[big][1] - mean[small][1])
            print(f"# {path}: per-sample cost over {big - small} more prompts, build / bare = {slope:.3f}x "
                  f"(fixed part of a build: {mean[small][0] - slope * mean[small][1]:+.1f} s)")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
