#!/usr/bin/env python
"""Time `hidden-states --engine sglang` on this CPU, against SGLang's own prefill of the same rows
without states, and against the transformers path; then what the response transport costs per value.

    SGLANG_USE_CPU_ENGINE=1 .venv-sglang/bin/python -m benchmarks.bench_hidden_states_sglang \\
        [--rows 160] [--max-len 1024] [--repeats 3] [--model tests/fixtures/models/tiny-kimi-4l]

Runs in the SGLang venv (`make sglang-venv`: SGLang 0.5.23, its CPU kernels, this package). Rows of
random ids (lengths 32 to --max-len), the same for every path:

- "bare prefill": an SGLang Engine started as the capture starts it (prefix cache and chunked
  prefill off, bf16) but without any state capture, each row a `max_new_tokens=1` request, all in
  flight at once through the same window size: SGLang's prefill and nothing else, the floor;
- "sglang via files|response: states only": the capture Engine (aux layers, our forward hooks),
  `states_of_rows` (the states read back from the hook's files, or parsed from the response) and
  the split into per-layer tensors, no layout file written: what capture and transport add;
- "sglang via ...: the command": the command's path (`write_states` over `states_of_rows`),
  speculators layout;
- "transformers": `write_states` over `transformers_states` (same dtype, same threads).

Then the transport alone, per hidden size H (tensor [T, 5H] in bf16: 3 aux layers + pre-norm +
normed, Kimi-K2.5's count): SGLang's `.tolist()` in the scheduler, the pickle to the tokenizer
manager, JSON over HTTP (SGLang's orjson dumps, our orjson loads), our `np.asarray`; and the files
transport (the hook's `save_file`, our `load_file`, on this machine's disk): ns per value and bytes
per value, and both extrapolated to Kimi-K2.5's width (H = 7168) per token.
"""

from __future__ import annotations

import argparse
import asyncio
import pickle
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson
import torch

from benchmarks.bench_hidden_states import make_items
from eagle3_synth.train.hidden_states.job import FilePlan, HiddenStatesOptions, load_model, transformers_states, write_states
from eagle3_synth.train.hidden_states.layouts import LAYOUTS
from eagle3_synth.train.hidden_states.sglang_capture import PREFILL_ONLY, plan_capture, sglang_engine, states_of_rows

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "tests" / "fixtures" / "models" / "tiny-kimi-4l"
ENGINE_ARGS = {"device": "cpu", "mem_fraction_static": 0.1}
KIMI_HIDDEN = 7168
STATES_PER_TOKEN = 5  # 3 aux layers + pre-norm + normed


def bare_prefill(model: Path, items, in_flight: int) -> float:
    """SGLang's prefill of every row (`max_new_tokens` 1), no states asked or captured."""
    import sglang

    engine = sglang.Engine(model_path=str(model), dtype="bfloat16", skip_tokenizer_init=True, disable_radix_cache=True,
                           chunked_prefill_size=-1, log_level="error", **ENGINE_ARGS)
    try:
        async def run() -> None:
            gate = asyncio.Semaphore(in_flight)

            async def one(ids):
                async with gate:
                    await engine.async_generate(input_ids=ids, sampling_params=dict(PREFILL_ONLY))
            await asyncio.gather(*(one(it.input_ids.tolist()) for it in items))

        engine.loop.run_until_complete(run())  # warm-up
        start = time.perf_counter()
        engine.loop.run_until_complete(run())
        return time.perf_counter() - start
    finally:
        engine.shutdown()


def sglang_paths(options: HiddenStatesOptions, plan: FilePlan, items, repeats: int) -> tuple[float, float]:
    """(fastest run to the states in this process, fastest run with the speculators files), one capture Engine."""
    no_files, with_files = [], []
    ordered = sorted(items, key=lambda it: -len(it.input_ids))
    with sglang_engine(options, plan.capture) as (engine, capture):
        for _ in range(repeats + 1):  # the first is a warm-up
            start = time.perf_counter()
            for _row in states_of_rows(engine, capture, ordered, options.dtype):
                pass
            no_files.append(time.perf_counter() - start)
            folder = Path(tempfile.mkdtemp(prefix="bench-hs-sglang-"))
            try:
                start = time.perf_counter()
                write_states(states_of_rows(engine, capture, ordered, options.dtype), plan, LAYOUTS["speculators"](folder),
                             progress=False)
                with_files.append(time.perf_counter() - start)
            finally:
                shutil.rmtree(folder, ignore_errors=True)
    return min(no_files[1:]), min(with_files[1:])


def transformers_path(options: HiddenStatesOptions, plan: FilePlan, repeats: int) -> float:
    model = load_model(options)
    times = []
    for _ in range(repeats + 1):
        folder = Path(tempfile.mkdtemp(prefix="bench-hs-tf-"))
        try:
            start = time.perf_counter()
            write_states(transformers_states(model, plan, options), plan, LAYOUTS["speculators"](folder), progress=False)
            times.append(time.perf_counter() - start)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return min(times[1:])


def transport(hidden: int, tokens: int) -> dict[str, float]:
    """ns per value of each step of the response transport, and JSON bytes per value."""
    tensor = torch.randn(tokens, STATES_PER_TOKEN * hidden).to(torch.bfloat16)
    values = tensor.numel()
    marks = {}
    start = time.perf_counter()
    listed = tensor.tolist()
    marks["tolist (scheduler)"] = time.perf_counter() - start
    start = time.perf_counter()
    pickle.loads(pickle.dumps(listed, protocol=pickle.HIGHEST_PROTOCOL))
    marks["pickle dumps+loads (to the tokenizer manager)"] = time.perf_counter() - start
    start = time.perf_counter()
    body = orjson.dumps({"meta_info": {"hidden_states": [listed]}}, option=orjson.OPT_SERIALIZE_NUMPY)
    marks["orjson dumps (server)"] = time.perf_counter() - start
    start = time.perf_counter()
    parsed = orjson.loads(body)["meta_info"]["hidden_states"][0]
    marks["orjson loads (client)"] = time.perf_counter() - start
    start = time.perf_counter()
    np.asarray(parsed, dtype=np.float32)
    marks["np.asarray (client)"] = time.perf_counter() - start
    out = {name: seconds / values * 1e9 for name, seconds in marks.items()}
    out["json bytes per value"] = len(body) / values
    return out


def file_transport(hidden: int, tokens: int) -> dict[str, float]:
    """ns per value of the files transport: the hook's `save_file` of one row, our `load_file`."""
    from safetensors.torch import load_file, save_file

    tensor = torch.randn(tokens, STATES_PER_TOKEN * hidden).to(torch.bfloat16)
    values = tensor.numel()
    with tempfile.TemporaryDirectory() as folder:
        path = str(Path(folder) / "row.safetensors")
        start = time.perf_counter()
        save_file({"states": tensor}, path)
        saved = time.perf_counter() - start
        start = time.perf_counter()
        load_file(path)
        loaded = time.perf_counter() - start
        size = Path(path).stat().st_size
    return {"save_file (scheduler)": saved / values * 1e9, "load_file (client)": loaded / values * 1e9,
            "file bytes per value": size / values}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=160)
    parser.add_argument("--max-len", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model", type=Path, default=MODEL)
    parser.add_argument("--layers", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--max-in-flight", type=int, default=HiddenStatesOptions.max_in_flight)
    parser.add_argument("--transport-tokens", type=int, default=256)
    args = parser.parse_args()

    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(args.model)
    hidden = config.hidden_size
    items = make_items(args.rows, args.max_len, "speculators")
    tokens = sum(len(it.input_ids) for it in items)
    options = HiddenStatesOptions(configs=("bench",), fmt="speculators", folder=Path("."), model=str(args.model),
                                  layers=tuple(args.layers), engine="sglang", engine_args=dict(ENGINE_ARGS),
                                  max_in_flight=args.max_in_flight)
    staging = tempfile.mkdtemp(prefix="bench-hs-staging-")
    plans = {via: FilePlan(items=items, pending=items, layers=list(args.layers), hidden_size=hidden, bytes_per_token=0,
                           counts=None, capture=plan_capture(args.layers, config, staging if via == "files" else None))
             for via in ("files", "response")}
    plan = plans["files"]
    print(f"{args.model.name}: {config.num_hidden_layers} layers, hidden {hidden}; {args.rows} rows, {tokens} tokens; "
          f"layers {args.layers} + the final state; torch threads {torch.get_num_threads()}; {args.max_in_flight} rows in flight")
    bare = min(bare_prefill(args.model, items, args.max_in_flight) for _ in range(args.repeats))
    timed = [("bare SGLang prefill", bare)]
    for via, via_plan in plans.items():
        states_only, command = sglang_paths(options, via_plan, items, args.repeats)
        timed += [(f"sglang via {via}: states only", states_only), (f"sglang via {via}: the command", command)]
    shutil.rmtree(staging, ignore_errors=True)
    tf = transformers_path(HiddenStatesOptions(configs=("bench",), fmt="speculators", folder=Path("."),
                                               model=str(args.model), layers=tuple(args.layers)), plan, args.repeats)
    timed.append(("transformers: the command", tf))
    for name, seconds in timed:
        print(f"  {name:34s} {seconds:7.2f} s  {tokens / seconds:9,.0f} tok/s  {tokens * plan.capture.width / seconds / 1e6:7.1f} "
              f"M values/s  ratio to bare {seconds / bare:.2f}x")
    print(f"transport per value (tensor [{args.transport_tokens}, {STATES_PER_TOKEN} x H] bf16):")
    for h in (hidden, 1024, 4096, KIMI_HIDDEN):
        costs = transport(h, args.transport_tokens)
        line = ", ".join(f"{name} {value:.1f}" for name, value in costs.items())
        print(f"  H={h}: ns per value: {line}")
        files = file_transport(h, args.transport_tokens)
        print(f"  H={h}: files, ns per value: " + ", ".join(f"{name} {value:.2f}" for name, value in files.items()))
        if h == KIMI_HIDDEN:
            per_token = STATES_PER_TOKEN * h
            ns = sum(v for k, v in costs.items() if k != "json bytes per value")
            file_ns = sum(v for k, v in files.items() if k != "file bytes per value")
            print(f"  Kimi-K2.5 (H={h}, {per_token} values a token), extrapolated: response {per_token * costs['json bytes per value'] / 1e3:.0f} KB "
                  f"of JSON and {per_token * ns / 1e6:.2f} ms of CPU a token over HTTP (in process: without the JSON steps); "
                  f"files {per_token * files['file bytes per value'] / 1e3:.0f} KB and {per_token * file_ns / 1e6:.3f} ms a token")


if __name__ == "__main__":
    main()
