"""Benchmark prompt preparation from a large source file: read + seeded selection + templating.

Makes a synthetic source in a config's own format by repeating its fixture records
(tests/fixtures/sources/<config>/) with a distinct suffix on every text field, so no two prompts are
duplicates, then prepares `--cap` prompts from it exactly as `eagle3-synth build --source-file` does.
Each `--workers` setting runs in a fresh process (its CPU time includes the worker processes); it
prints, per config and in all, prompts kept, wall time, prompts/s and the main process's peak RSS.

    python -m benchmarks.bench_prompt_prep --config B1_glaive --records 200000 --cap 12000
    python -m benchmarks.bench_prompt_prep --config B1_glaive --records 200000 --cap 88000 --workers 1 auto
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from eagle3_synth.prompts.templating import ChatTokenizer, load_tokenizer  # noqa: E402
from eagle3_synth.prompts.configs import get_config  # noqa: E402
from eagle3_synth.prompts.selection import PromptPlan, PromptSelection  # noqa: E402
from eagle3_synth.prompts.prepare import Preparation, prepare_prompts  # noqa: E402
from eagle3_synth.prompts.adapters import get_adapter  # noqa: E402
from eagle3_synth.prompts.readers import iter_source_files  # noqa: E402

KEEP = {"id", "uuid", "prompt_id", "tools", "schema", "from", "role"}


def vary(value, suffix: str):
    """The record with `suffix` appended to every free-text string (ids, roles and JSON kept)."""
    if isinstance(value, dict):
        return {k: v if k in KEEP else vary(v, suffix) for k, v in value.items()}
    if isinstance(value, list):
        return [vary(v, suffix) for v in value]
    return value + suffix if isinstance(value, str) and value.strip() not in ("", "-") else value


def make_source(config: str, records: int, folder: Path) -> Path:
    files = sorted((ROOT / "tests" / "fixtures" / "sources" / config).iterdir())
    adapter = get_adapter(get_config(config).adapter)
    good = []
    for record in iter_source_files(str(p) for p in files):
        try:
            adapter.convert(record.record)
            good.append(record.record)
        except Exception:
            pass
    array = files[0].read_text(encoding="utf-8").lstrip().startswith("[")
    path = folder / (f"{config}.json" if array else f"{config}.jsonl")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("[\n" if array else "")
        for i in range(records):
            record = vary(copy.deepcopy(good[i % len(good)]), f" [{i}]")
            separator = ",\n" if array and i else ""
            handle.write(separator + json.dumps(record, ensure_ascii=False) + ("" if array else "\n"))
        handle.write("\n]\n" if array else "")
    return path


def prepare_all(configs: list[str], sources: list[str], cap: int, tokenizer: str, workers: int | None, tmp: str) -> dict:
    """Prepare `cap` prompts of each config from its source, as `build --source-file` does."""
    started_all = time.perf_counter()
    chat = ChatTokenizer(load_tokenizer(tokenizer))
    load_seconds = time.perf_counter() - started_all
    rows = []
    for config, source in zip(configs, sources):
        plan = PromptPlan(config=get_config(config), selection=PromptSelection(source_files=(source,)), limit=cap)
        preparation = Preparation(workers=workers, tokenizer_path=tokenizer)
        started, cpu = time.perf_counter(), time.process_time()
        prepared, rejects = prepare_prompts(plan, chat, preparation=preparation)
        rows.append({"config": config, "kept": len(prepared), "rejected": len(rejects),
                     "tokens": sum(len(p.prompt_ids) for p in prepared),
                     "seconds": time.perf_counter() - started, "main_cpu": time.process_time() - cpu})
        del prepared, rejects
    return {"configs": rows, "tokenizer_load": load_seconds, "seconds": time.perf_counter() - started_all,
            "main_peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def measure(args: argparse.Namespace, sources: list[str], workers: str, tmp: str) -> dict:
    """`prepare_all` in a fresh process: CPU time includes the worker processes it waited for."""
    command = [sys.executable, __file__, "--child", workers, "--tokenizer", args.tokenizer, "--cap", str(args.cap),
               "--config", *args.config, "--sources", *sources]
    with tempfile.TemporaryFile() as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(process.pid, 0)
        out.seek(0)
        text = out.read().decode()
    if status != 0:
        raise SystemExit(f"preparation with --workers {workers} failed (status {status}): {text[-2000:]}")
    result = json.loads(text.strip().splitlines()[-1])
    return {**result, "cpu": usage.ru_utime + usage.ru_stime}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", nargs="+", default=["B1_glaive"], help="one or more configs, prepared in turn")
    parser.add_argument("--records", type=int, default=200_000, help="source records per config")
    parser.add_argument("--cap", type=int, default=12_000, help="prompts kept per config")
    parser.add_argument("--workers", nargs="+", default=["1"],
                        help="templating processes to compare: a number, or auto (the default of the command line)")
    parser.add_argument("--tokenizer", default=str(ROOT / "tests" / "fixtures" / "tokenizers" / "kimi_k25"))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--sources", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        with tempfile.TemporaryDirectory() as tmp:
            workers = None if args.child == "auto" else int(args.child)
            print(json.dumps(prepare_all(args.config, args.sources, args.cap, args.tokenizer, workers, tmp)))
        return

    print(f"# {platform.node()}: {os.cpu_count()} CPUs, Python {platform.python_version()}, {time.strftime('%Y-%m-%d')}; "
          f"tokenizer {Path(args.tokenizer).name}")
    with tempfile.TemporaryDirectory() as tmp:
        sources = []
        for config in args.config:
            started = time.perf_counter()
            source = make_source(config, args.records, Path(tmp))
            size_mb = source.stat().st_size / 1e6
            started_read = time.perf_counter()
            read = sum(1 for _ in iter_source_files([str(source)]))
            seconds = time.perf_counter() - started_read
            print(f"{config}: source of {args.records} records, {size_mb:.0f} MB ({source.suffix}), made in "
                  f"{started_read - started:.1f}s; read only: {seconds:.1f}s ({read / seconds:,.0f} records/s)")
            sources.append(str(source))
        print("| workers | config | prompts kept | rejected | prompt tokens | wall s | prompts/s |")
        print("|---|---|---|---|---|---|---|")
        for workers in args.workers:
            result = measure(args, sources, workers, tmp)
            for row in result["configs"]:
                print(f"| {workers} | {row['config']} | {row['kept']:,} | {row['rejected']:,} | {row['tokens']:,} "
                      f"| {row['seconds']:.1f} | {row['kept'] / row['seconds']:,.0f} |")
            kept = sum(row["kept"] for row in result["configs"])
            prepare_seconds = sum(row["seconds"] for row in result["configs"])
            print(f"| {workers} | **all: {kept:,} prompts** | | | | **{prepare_seconds:.1f}** "
                  f"| **{kept / prepare_seconds:,.0f}** (CPU {result['cpu']:.1f} s incl. workers and "
                  f"{result['tokenizer_load']:.1f} s tokenizer load; main peak RSS {result['main_peak_rss_mib']:.0f} MiB) |",
                  flush=True)


if __name__ == "__main__":
    main()
