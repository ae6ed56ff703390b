"""Benchmark prompt preparation from a large source file: read + seeded selection + templating.

Makes a synthetic source in a config's own format by repeating its fixture records
(tests/fixtures/sources/<config>/) with a distinct suffix on every text field, so no two prompts are
duplicates, then prepares `--cap` prompts from it exactly as `eagle3-synth build --source-file` does.
Prints wall time per phase, records/s and the growth of peak RSS during preparation.

    python scripts/bench_prompt_prep.py --config B1_glaive --records 200000 --cap 12000
"""

from __future__ import annotations

import argparse
import copy
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from eagle3_synth.chat import ChatTokenizer, load_tokenizer  # noqa: E402
from eagle3_synth.configs import get_config  # noqa: E402
from eagle3_synth.engines import EngineOptions  # noqa: E402
from eagle3_synth.pipeline import GenerateOptions  # noqa: E402
from eagle3_synth.prompt_prep import PromptSelection, prepare_prompts  # noqa: E402
from eagle3_synth.sources import get_adapter  # noqa: E402
from eagle3_synth.sources.readers import iter_source_files  # noqa: E402

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


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="B1_glaive")
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--cap", type=int, default=12_000)
    parser.add_argument("--tokenizer", default=str(ROOT / "tests" / "fixtures" / "tokenizers" / "kimi_k25"))
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        source = make_source(args.config, args.records, Path(tmp))
        size_mb = source.stat().st_size / 1e6
        print(f"source: {args.records} records, {size_mb:.0f} MB ({source.suffix}) in {time.perf_counter() - started:.1f}s")

        started = time.perf_counter()
        read = sum(1 for _ in iter_source_files([str(source)]))
        seconds = time.perf_counter() - started
        print(f"read only: {read} records in {seconds:.1f}s ({read / seconds:,.0f} records/s, {size_mb / seconds:.0f} MB/s)")

        chat = ChatTokenizer(load_tokenizer(args.tokenizer))
        options = GenerateOptions(
            config=get_config(args.config), tokenizer_path=args.tokenizer, prompts_file=None, run_dir=tmp,
            engine="replay", engine_options=EngineOptions(), limit=args.cap,
            selection=PromptSelection(source_files=(str(source),)))
        before = peak_rss_mb()
        started = time.perf_counter()
        prepared, rejects = prepare_prompts(options, chat)
        seconds = time.perf_counter() - started
        tokens = sum(len(p.prompt_ids) for p in prepared)
        print(f"prepare (read {args.records}, select, convert + template {len(prepared) + len(rejects)}): "
              f"{seconds:.1f}s, {len(prepared)} prompts kept, {len(rejects)} rejected, {tokens:,} prompt tokens; "
              f"{args.records / seconds:,.0f} source records/s; peak RSS {before:.0f} -> {peak_rss_mb():.0f} MB")


if __name__ == "__main__":
    main()
