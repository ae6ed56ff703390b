"""Benchmark the result path: engine result -> journal -> built Parquet, with the `replay` engine.

No model time: the `replay` engine hands back recorded outputs, so what is measured is our own code
between the engine and the dataset -- exactly what a GPU node would wait for. For each size it
synthesises, under --workdir:
  - prompts.jsonl: the bundled sample prompts of all eight configs (tools, multi-turn, tool results)
    repeated with a distinct suffix on the last message, so none is a duplicate;
  - replay.jsonl: one recorded result a sample, ~2,000 output ids (normal, sd 1/4 of the mean),
    built from the fixture tokenizer's ordinary ids and its marker ids (resolved, never hard-coded):
    a third reason, close `</think>` and make a tool call; ~8% are cut off at the length limit
    (no stop token); the rest reason, answer and stop;
then runs the real command line, each step in a fresh process (peak RSS and CPU time from wait4):
  1. generate: `eagle3-synth generate CONFIG --tokenizer T --engine replay --replay R --prompts P
     --run-dir RUN` -- split, from inside the process, into tokenizer load + prompt preparation up
     to prompts.jsonl written (figure 1, not the result path) and the result path proper (journal
     scan, replay index, prompts read back, result -> journal line, progress);
  2. assemble: `eagle3-synth build CONFIG --run-dir RUN --out OUT` -- journal -> rows ->
     GeneratorBasedBuilder -> Parquet;
  3. together: `eagle3-synth build CONFIG --tokenizer T --engine replay --replay R --prompts P
     --out OUT2` -- both in one command, as a user runs it -- against a bare pass over the same
     replay file right after it (`json.loads` of every line -> `pyarrow.Table.from_pylist` ->
     `pq.write_table`: the least any build must do with these bytes).

    python -m benchmarks.bench_result_path --sizes 10000 50000 100000

The result-path figure is samples / (generate's result-path part + assemble), in wall and CPU time;
the replay build must stay within 3x the bare pass (wall time of step 3 / the bare pass's).
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
from functools import wraps
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

CONFIG = "B1_glaive"
TOKENIZER = ROOT / "tests" / "fixtures" / "tokenizers" / "kimi_k25"
BARE = r"""
import json, sys
import pyarrow as pa, pyarrow.parquet as pq
rows = [json.loads(line) for line in open(sys.argv[1], encoding="utf-8")]
pq.write_table(pa.Table.from_pylist(rows), sys.argv[2])
"""


# -- synthetic data ---------------------------------------------------------------------------------

def bundled_prompts() -> list[dict]:
    """Every bundled sample prompt of every config: system prompts, tools, multi-turn, tool results."""
    lines = []
    for path in sorted((ROOT / "eagle3_synth" / "prompts" / "samples").glob("*.jsonl")):
        lines += [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return lines


def write_prompts(path: Path, samples: int) -> None:
    base = bundled_prompts()
    with open(path, "w", encoding="utf-8") as handle:
        for i in range(samples):
            record = json.loads(json.dumps(base[i % len(base)]))
            record["id"] = f"bench-{i}"
            record["messages"][-1]["content"] += f" [{i}]"  # distinct: duplicates would be rejected
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")


def write_replay(path: Path, samples: int, output_tokens: int, seed: int = 0) -> None:
    """Recorded results shaped like a reasoning model's: see the module doc."""
    from eagle3_synth.prompts.templating import load_tokenizer
    from eagle3_synth.contract.profiles import get_profile, resolve_markers

    tokenizer = load_tokenizer(str(TOKENIZER))
    markers = resolve_markers(get_profile("auto", tokenizer), tokenizer)
    special = set(tokenizer.added_tokens_decoder)
    text_ids = np.array([i for i in range(len(tokenizer)) if i not in special])
    rng = np.random.default_rng(seed)
    with open(path, "w", encoding="utf-8") as handle:
        for sample_id in range(samples):
            length = int(np.clip(rng.normal(output_tokens, output_tokens / 4), 32, 10_240))
            ids = text_ids[rng.integers(0, len(text_ids), length)].tolist()
            kind = rng.random()
            finish = "stop"
            if kind < 0.08:  # cut off at max_new_tokens while still reasoning
                finish = "length"
            else:
                think_end = length * 3 // 4
                ids[think_end] = markers.reasoning_close.id
                if kind < 0.41:  # a tool call after the reasoning
                    section = think_end + 3
                    ids[section] = markers.tool_section_begin.id
                    ids[section + 1] = markers.tool_call_begin.id
                    ids[length - 3] = markers.tool_call_end.id
                ids[-1] = markers.stop_ids[0]
            handle.write(json.dumps({"sample_id": sample_id, "output_ids": ids, "finish_reason": finish}) + "\n")


def synthesise(folder: Path, samples: int, output_tokens: int, fresh: bool) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    prompts, replay = folder / "prompts.jsonl", folder / "replay.jsonl"
    if fresh or not prompts.exists():
        write_prompts(prompts, samples)
    if fresh or not replay.exists():
        write_replay(replay, samples, output_tokens)
    return prompts, replay


# -- one measured step, in its own process ------------------------------------------------------------

def _timed(name: str, spans: dict, function):
    """`function`, recording the wall and CPU clocks when it starts and ends under `name`."""

    @wraps(function)
    def wrapper(*args, **kwargs):
        spans[name] = {"start": (time.perf_counter(), time.process_time())}
        try:
            return function(*args, **kwargs)
        finally:
            spans[name]["end"] = (time.perf_counter(), time.process_time())

    return wrapper


def _between(start: tuple[float, float], end: tuple[float, float]) -> dict[str, float]:
    return {"wall": end[0] - start[0], "cpu": end[1] - start[1]}


def child(argv: list[str]) -> None:
    """Run the command line in this process, timing its stages from inside:
    generate = [tokenizer load + prompt preparation until prompts.jsonl is written] + [result path]."""
    import eagle3_synth_builders.folder_build as build
    import eagle3_synth.run.generate as pipeline
    from eagle3_synth.cli import main
    from eagle3_synth.run.directory import RunDirectory

    spans: dict = {}
    RunDirectory.install_prompts = _timed("install_prompts", spans, RunDirectory.install_prompts)
    pipeline.generate = _timed("generate", spans, pipeline.generate)
    # The builder calls `run.generate.generate` through its module, so the patch above reaches it;
    # a build that only assembles spends its time in build_config.
    build.build_config = _timed("assemble", spans, build.build_config)
    status = main(argv)
    if status:
        raise SystemExit(f"eagle3-synth {' '.join(argv)} exited with status {status}")
    report = {}
    if "generate" in spans:
        generate = spans["generate"]
        ready = spans["install_prompts"]["end"]
        report["prompts"] = _between(generate["start"], ready)
        report["result_path"] = _between(ready, generate["end"])
    if "assemble" in spans:
        report["assemble"] = _between(spans["assemble"]["start"], spans["assemble"]["end"])
    print("BENCH " + json.dumps(report))


def run_step(argv: list[str]) -> dict:
    """One child with its rusage (CPU of the whole process tree it waited for, peak RSS)."""
    started = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = subprocess.Popen([sys.executable, __file__, "--child", *argv], stdout=out, stderr=err)
        _, status, usage = os.wait4(process.pid, 0)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if status != 0:
        raise SystemExit(f"eagle3-synth {argv[0]} failed (status {status}):\n{stderr[-3000:]}")
    spans = json.loads(next(line for line in stdout.splitlines() if line.startswith("BENCH "))[6:])
    return {"spans": spans, "wall": time.perf_counter() - started, "cpu": usage.ru_utime + usage.ru_stime,
            "peak_rss_mib": usage.ru_maxrss / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 50_000, 100_000])
    parser.add_argument("--output-tokens", type=int, default=2_000, help="mean output ids a sample")
    parser.add_argument("--workdir", default="/tmp/bench_result_path")
    parser.add_argument("--fresh", action="store_true", help="rewrite the synthesised prompts and replay files")
    parser.add_argument("--no-together", action="store_true", help="skip step 3 (one build command)")
    parser.add_argument("--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    workdir = Path(args.workdir)
    print(f"# {platform.node()}: {os.cpu_count()} CPUs, Python {platform.python_version()}, {time.strftime('%Y-%m-%d')}; "
          f"config {CONFIG}, tokenizer {TOKENIZER.name}, {args.output_tokens} output ids a sample (mean)")
    header = ("| samples | tokenizer load + prompt prep (not result path) wall / main-process CPU s | generate: result -> journal wall / CPU s "
              "| assemble: journal -> Parquet wall / CPU s | **result path samples/s** (wall) | CPU ms a sample "
              "| peak RSS MiB generate / assemble | together (one build) wall / CPU s, peak RSS MiB "
              "| bare pass s, **build / bare** |")
    print(header)
    print("|---" * (header.count("|") - 1) + "|")
    for samples in args.sizes:
        folder = workdir / f"n{samples}"
        prompts, replay = synthesise(folder, samples, args.output_tokens, args.fresh)
        run_dir, out, together = folder / "run", folder / "out", folder / "together"
        for path in (run_dir, out, together):
            shutil.rmtree(path, ignore_errors=True)
        common = ["--tokenizer", str(TOKENIZER), "--engine", "replay", "--replay", str(replay), "--prompts", str(prompts)]
        generated = run_step(["generate", CONFIG, *common, "--run-dir", str(run_dir)])
        assembled = run_step(["build", CONFIG, "--run-dir", str(run_dir), "--out", str(out)])
        rows = sum(1 for _ in open(run_dir / "prompts.jsonl", "rb"))
        assert rows == samples, f"{rows} prompts kept of {samples}"
        prep, path_part, assemble = (generated["spans"]["prompts"], generated["spans"]["result_path"],
                                     assembled["spans"]["assemble"])
        wall = path_part["wall"] + assemble["wall"]
        cpu = path_part["cpu"] + assemble["cpu"]
        both = "skipped | skipped"
        if not args.no_together:
            step = run_step(["build", CONFIG, *common, "--out", str(together)])
            started = time.perf_counter()
            subprocess.run([sys.executable, "-c", BARE, str(replay), str(folder / "bare.parquet")], check=True)
            bare = time.perf_counter() - started
            both = (f"{step['wall']:.1f} / {step['cpu']:.1f}, {step['peak_rss_mib']:.0f} "
                    f"| {bare:.1f}, **{step['wall'] / bare:.2f}x**")
        print(f"| {samples:,} | {prep['wall']:.1f} / {prep['cpu']:.1f} | {path_part['wall']:.1f} / {path_part['cpu']:.1f} "
              f"| {assemble['wall']:.1f} / {assemble['cpu']:.1f} | **{samples / wall:,.0f}** ({samples / cpu:,.0f} per CPU s) "
              f"| {1000 * cpu / samples:.2f} | {generated['peak_rss_mib']:.0f} / {assembled['peak_rss_mib']:.0f} | {both} |",
              flush=True)
        for path in (out, together):
            shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    main()
