"""Benchmark the local part of `eagle3-synth publish` on a large synthetic config.

Uses the synthetic folder of benchmarks/bench_data_checks.py (Kimi fixture tokenizer, real chat
templates, log-normal output lengths up to 10,240 tokens), then times each phase of a release in
this process -- the contract check (every row re-templated and its boundaries recomputed), staging
the tree (viewer-sized shards, plots, card) without and with the preview columns -- and runs the
whole `publish --dry-run` (previews on, its default) as a subprocess for wall time and peak memory.
The upload itself is not timed: against a loopback server it says nothing about the Hub.

    python -m benchmarks.bench_publish --rows 12000 [--out /tmp/bench-publish] [--keep]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.bench_data_checks import CONFIG, run, write_dataset


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=12_000)
    parser.add_argument("--out", help="folder to write (default: a temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the folder")
    args = parser.parse_args()

    from eagle3_synth.publish.checks import Tokenizers, check_folder, config_provenance
    from eagle3_synth.publish.tree import PREVIEW_CHARS, clear_stage, stage_tree

    out = Path(args.out or tempfile.mkdtemp(prefix="bench-publish-"))
    try:
        ids = write_dataset(out, args.rows)
        size = sum(p.stat().st_size for p in (out / CONFIG).glob("*.parquet"))
        print(f"dataset: {args.rows} rows, {ids / 1e6:.1f}M ids, {size / 2**20:.0f} MiB Parquet")
        tokenizers = Tokenizers(None, False)
        quiet = lambda line: None
        # CPU seconds are the steadier figure on a shared machine; rows/s is per CPU second.
        print(f"{'phase':36s} {'wall s':>7s} {'CPU s':>7s} {'rows/CPU s':>11s}")

        def timed(name: str, action) -> None:
            wall, cpu = time.perf_counter(), time.process_time()
            action()
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            print(f"{name:36s} {wall:7.1f} {cpu:7.1f} {args.rows / cpu:11.0f}")

        timed("contract check (validate all rows)", lambda: check_folder(out, [CONFIG], tokenizers, quiet))
        for previews in (None, PREVIEW_CHARS):
            stage = out / ".bench-stage"
            clear_stage(stage, owned=True)
            timed(f"stage tree (preview chars {previews})", lambda stage=stage, previews=previews: stage_tree(
                out, stage, [CONFIG], repo_id="org/bench", version="v0", preview_chars=previews,
                tokenizer_for=lambda config: tokenizers.get(config_provenance(out, config)), echo=quiet))
            staged = sum(p.stat().st_size for p in (stage / CONFIG).glob("*.parquet"))
            print(f"  staged Parquet: {staged / 2**20:.0f} MiB")
        shutil.rmtree(out / ".bench-stage", ignore_errors=True)
        wall, cpu, rss, _ = run(["publish", str(out), "org/bench", "--tag", "v0", "--dry-run"])
        print(f"{'publish --dry-run (subprocess)':36s} {wall:7.1f} {cpu:7.1f} {args.rows / cpu:11.0f}"
              f"  max RSS {rss:.0f} MiB")
    finally:
        if not args.keep:
            shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(main())
