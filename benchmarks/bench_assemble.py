"""Benchmark: assemble a config's dataset from a run directory's journal, at growing sample counts.

For each size it synthesises a run directory (prompts.jsonl, run.json with the Kimi fixture's marker
ids, journal files from 8 "sessions" in shuffled completion order, ~2,000 output ids a sample with
reasoning, `</think>`, an answer and the stop token), then, in a fresh process each:
  - scan:     `RunDirectory.scan()` alone (the journal index build and exactly-once choice);
  - assemble: `eagle3_synth_builders.folder_build.assemble_config` -- iter_row_tables -> the builder (ArrowBasedBuilder,
              tables of 1,000 rows) -> Parquet, exactly what `eagle3-synth build --run-dir RUN --out DIR` runs.
It reports wall time, CPU time and the process's peak RSS (from wait4), so one can see whether
memory grows with the sample count. Run:

    python -m benchmarks.bench_assemble --sizes 10000 50000 100000 --workdir /tmp/bench_assemble

Synthesised data are written once per size under --workdir and reused (--fresh to rewrite).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

from eagle3_synth.engines.base import GenerationResult  # noqa: E402
from eagle3_synth.run.directory import RunDirectory  # noqa: E402
from eagle3_synth.run.shards import Shard  # noqa: E402
from eagle3_synth.contract.row import PreparedPrompt  # noqa: E402

CONFIG = "B5_openthoughts"
SESSIONS = 8
# Marker ids of tests/fixtures/tokenizers/kimi_k25 (what run.json's meta records for it).
MARKERS = {"profile": "kimi_k2", "reasoning_open": 2040, "reasoning_close": 2041, "tool_section_begin": 2042,
           "tool_call_begin": 2044, "tool_call_end": 2046, "stop_ids": [2034, 2033, 2039]}
TEXT_IDS = (300, 2000)  # ordinary (non-marker) ids of that vocabulary: [low, high)


def synthesise(run_dir: Path, samples: int, output_tokens: int, prompt_tokens: int, seed: int = 0) -> None:
    """A finished run directory with `samples` results spread over SESSIONS journal files."""
    rng = np.random.default_rng(seed)
    shutil.rmtree(run_dir, ignore_errors=True)
    run = RunDirectory(run_dir)
    fingerprint = run.claim({"config": CONFIG, "benchmark": samples}, {"markers": MARKERS})
    messages = [{"role": "user", "content": "Prove that the sum of two even numbers is even."}]
    run.write_prompts(
        (PreparedPrompt(i, f"src-{i}", rng.integers(*TEXT_IDS, prompt_tokens).tolist(), messages, None)
         for i in range(samples)),
        [],
    )
    order = rng.permutation(samples).tolist()  # completion order is not sample order
    per_session = -(-samples // SESSIONS)
    for session in range(SESSIONS):
        with run.open_journal(fingerprint, Shard()) as journal:
            for sample_id in order[session * per_session:(session + 1) * per_session]:
                length = max(8, int(rng.normal(output_tokens, output_tokens / 4)))
                thinking = length * 3 // 4
                ids = rng.integers(*TEXT_IDS, length).tolist()
                ids[thinking] = MARKERS["reasoning_close"]
                ids[-1] = MARKERS["stop_ids"][0]
                journal.append(GenerationResult(sample_id, ids, "stop", prompt_tokens, len(ids)))


def child(mode: str, run_dir: str, out: str) -> None:
    """One measured step, in its own process so its peak RSS is its own."""
    started = time.perf_counter()
    if mode == "scan":
        index = RunDirectory(run_dir).scan()
        detail = {"results": int(len(index.sample_ids))}
    else:
        from eagle3_synth_builders.folder_build import assemble_config

        rows, files = assemble_config(run_dir, out, CONFIG)
        detail = {"rows": rows, "parquet_bytes": sum(f.stat().st_size for f in files), "files": len(files)}
    print(json.dumps({"seconds": time.perf_counter() - started, **detail}))


def measure(mode: str, run_dir: Path, out: Path) -> dict:
    process = subprocess.Popen([sys.executable, __file__, "--child", mode, str(run_dir), str(out)],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    _, status, usage = os.wait4(process.pid, 0)
    output = process.stdout.read()
    if status != 0:
        raise SystemExit(f"{mode} failed (status {status}): {output}")
    return {**json.loads(output.strip().splitlines()[-1]), "peak_rss_mib": usage.ru_maxrss / 1024,
            "cpu_seconds": usage.ru_utime + usage.ru_stime}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 50_000, 100_000])
    parser.add_argument("--output-tokens", type=int, default=2_000, help="mean output ids a sample")
    parser.add_argument("--prompt-tokens", type=int, default=300)
    parser.add_argument("--workdir", default="/tmp/bench_assemble")
    parser.add_argument("--fresh", action="store_true", help="rewrite the synthesised run directories")
    parser.add_argument("--child", nargs=3, metavar=("MODE", "RUN_DIR", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    workdir = Path(args.workdir)
    print(f"# {platform.node()}: {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"{time.strftime('%Y-%m-%d')}; {args.output_tokens} output ids/sample (mean), {args.prompt_tokens} prompt ids")
    print("| samples | journal MiB | scan wall s | scan peak RSS MiB | assemble wall s | assemble CPU s "
          "| samples per CPU s | assemble peak RSS MiB | Parquet MiB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for samples in args.sizes:
        run_dir = workdir / f"run-{samples}"
        if args.fresh or not (run_dir / "prompts.jsonl").exists() or not list((run_dir / "journal").glob("*.jsonl")):
            synthesise(run_dir, samples, args.output_tokens, args.prompt_tokens)
        journal_mib = sum(f.stat().st_size for f in (run_dir / "journal").glob("*.jsonl")) / 2**20
        out = workdir / f"out-{samples}"
        shutil.rmtree(out, ignore_errors=True)
        scan = measure("scan", run_dir, out)
        assemble = measure("assemble", run_dir, out)
        assert assemble["rows"] == samples, assemble
        print(f"| {samples:,} | {journal_mib:,.0f} | {scan['seconds']:.1f} | {scan['peak_rss_mib']:.0f} "
              f"| {assemble['seconds']:.1f} | {assemble['cpu_seconds']:.1f} | {samples / assemble['cpu_seconds']:,.0f} "
              f"| {assemble['peak_rss_mib']:.0f} "
              f"| {assemble['parquet_bytes'] / 2**20:,.0f} |", flush=True)
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
