#!/usr/bin/env python
"""The whole `build --engine replay` against a bare JSON -> Arrow -> Parquet pass over the same file.

    python -m benchmarks.bench_build --sizes 10000 50000 100000 [--workdir /tmp/bench_build] [--repo PATH ...] [--repeat N]

For each size it synthesises (as `bench_result_path.py` does) prompts.jsonl (the bundled samples of
all eight configs with a distinct suffix, ~100 prompt tokens) and replay.jsonl (~2,000 output ids a
sample, markers from the fixture tokenizer), then, each in a fresh process with wall time, CPU time
and peak RSS from wait4:
  - bare: `json.loads` of every replay line -> `pyarrow.Table.from_pylist` -> `pq.write_table`
    (the least any build must do with these bytes);
  - build: `eagle3-synth build B1_glaive --model T --engine replay --replay R --prompts P --out OUT`,
    prompt preparation (templating every prompt), journaling and assembly included.
The figure is build wall time / bare wall time, from the same run. `--repo PATH ...` runs the build
of each checkout given (e.g. an older commit exported with `git archive`) on the same files, right
after the same bare pass, for before/after; `--repeat N` measures each size N times (the machine's
load average is printed with each row: the figures mean something only on a quiet machine).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
from benchmarks.bench_result_path import TOKENIZER, synthesise  # noqa: E402

BARE = r"""
import json, sys
import pyarrow as pa, pyarrow.parquet as pq
rows = [json.loads(line) for line in open(sys.argv[1], encoding="utf-8")]
pq.write_table(pa.Table.from_pylist(rows), sys.argv[2])
"""


def measured(command: list[str], cwd: Path) -> dict:
    """Run `command` in a fresh process; wall and CPU seconds, peak RSS."""
    import time

    started = time.perf_counter()
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(command, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(process.pid, 0)
        if status:
            log.seek(0)
            raise SystemExit(f"{' '.join(command)} failed:\n{log.read().decode()[-3000:]}")
    return {"wall_s": time.perf_counter() - started, "cpu_s": usage.ru_utime + usage.ru_stime,
            "peak_rss_mib": usage.ru_maxrss / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000])
    parser.add_argument("--output-tokens", type=int, default=2_000)
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "bench_build")
    parser.add_argument("--repo", type=Path, nargs="+", default=[ROOT],
                        help="checkouts whose eagle3-synth is measured, each on the same files")
    parser.add_argument("--repeat", type=int, default=1, help="measurements per size")
    args = parser.parse_args()
    python = sys.executable
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print("| samples | checkout | bare s (RSS MiB) | build s (CPU s, RSS MiB) | build / bare | load avg |")
    print("|---|---|---|---|---|---|")
    for size in args.sizes:
        folder = args.workdir / str(size)
        prompts, replay = synthesise(folder, size, args.output_tokens, fresh=False)
        out = folder / "out"
        for _ in range(args.repeat):
            bare = measured([python, "-c", BARE, str(replay), str(folder / "bare.parquet")], args.repo[0])
            for repo in args.repo:
                shutil.rmtree(out, ignore_errors=True)
                load = os.getloadavg()[0]
                build = measured([python, "-m", "eagle3_synth.cli", "build", "B1_glaive", "--model", str(TOKENIZER),
                                  "--engine", "replay", "--replay", str(replay), "--prompts", str(prompts),
                                  "--out", str(out)], repo)
                readme = out / "README.md"
                rows = readme.read_text(encoding="utf-8").split("num_examples: ")[1].split()[0] if readme.exists() else "?"
                print(f"| {size:,} | {repo.name} | {bare['wall_s']:.1f} ({bare['peak_rss_mib']:.0f}) | {build['wall_s']:.1f} "
                      f"({build['cpu_s']:.1f}, {build['peak_rss_mib']:.0f}) | {build['wall_s'] / bare['wall_s']:.2f}x "
                      f"| {load:.2f} |  rows={rows}", flush=True)


if __name__ == "__main__":
    main()
