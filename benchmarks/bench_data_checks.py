"""Benchmark `stats`, `inspect`, `validate` and `export` on a large synthetic config.

Writes a Hub-layout folder with N rows shaped like a real run (Kimi fixture tokenizer, prompts
templated with its chat template, output lengths log-normal up to 10,240 tokens, ~8% truncated,
~30% with a tool call), then runs each command as a subprocess and reports wall time, rows/s and
peak memory (max RSS of the child).

    python -m benchmarks.bench_data_checks --rows 12000 [--out /tmp/bench-checks] [--keep] [--reuse]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
TOKENIZER = ROOT / "tests" / "fixtures" / "tokenizers" / "kimi_k25"
CONFIG = "B1_glaive"


def write_dataset(out: Path, rows: int, seed: int = 0) -> int:
    """Write `rows` contract rows to out/B1_glaive plus the run_info.json provenance; return ids."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from eagle3_synth.prompts.templating import ChatTokenizer, load_tokenizer
    from eagle3_synth.prompts.conversation import Conversation
    from eagle3_synth.contract.profiles import PROFILES, resolve_markers
    from eagle3_synth.contract.row import FEATURES, dumps_messages, dumps_tools, make_row

    tokenizer = load_tokenizer(str(TOKENIZER))
    markers = resolve_markers(PROFILES["kimi_k2"], tokenizer)
    chat = ChatTokenizer(tokenizer)
    specials = set(tokenizer.all_special_ids) | {markers.reasoning_close.id, markers.tool_call_begin.id,
                                                  markers.tool_call_end.id, markers.tool_section_begin.id}
    plain = np.array([i for i in range(len(tokenizer)) if i not in specials], dtype=np.int32)
    rng = np.random.default_rng(seed)
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}]
    (out / CONFIG).mkdir(parents=True, exist_ok=True)
    writer = pq.ParquetWriter(out / CONFIG / "train-00000-of-00001.parquet", FEATURES.arrow_schema)
    total_ids, batch = 0, []
    for sample_id in range(rows):
        words = " ".join(rng.choice(["alpha", "beta", "gamma", "delta", "why", "how"], size=rng.integers(5, 200)))
        conversation = Conversation([{"role": "user", "content": f"Question {sample_id}: {words}"}],
                                    tools if sample_id % 3 == 0 else None)
        prompt = chat.prompt_ids(conversation)
        length = int(min(10_240, max(8, rng.lognormal(7.0, 1.0))))
        output = rng.choice(plain, size=length).tolist()
        finish = "length" if length == 10_240 or rng.random() < 0.05 else "stop"
        output[length // 3] = markers.reasoning_close.id
        if sample_id % 3 == 0 and length > 40:
            output[length // 3 + 2] = markers.tool_section_begin.id
            output[length // 3 + 3] = markers.tool_call_begin.id
            output[length - 4] = markers.tool_call_end.id
        if finish == "stop":
            output[-1] = markers.stop_ids[0]
        batch.append(make_row(sample_id=sample_id, source_id=f"s{sample_id}", prompt_ids=prompt, output_ids=output,
                              finish_reason=finish, messages_json=dumps_messages(conversation.messages),
                              tools_json=dumps_tools(conversation.tools), markers=markers))
        total_ids += len(prompt) + length
        if len(batch) == 1000:
            writer.write_table(pa.Table.from_pylist(batch, schema=FEATURES.arrow_schema))
            batch = []
    if batch:
        writer.write_table(pa.Table.from_pylist(batch, schema=FEATURES.arrow_schema))
    writer.close()
    info = {"fields": {"config": CONFIG, "template_kwargs": {}, "profile": "kimi_k2"},
            "meta": {"tokenizer": str(TOKENIZER), "markers": markers.to_json()}}
    (out / CONFIG / "run_info.json").write_text(json.dumps(info), encoding="utf-8")
    return total_ids


_CHILD = (
    "import resource, sys\n"
    "from eagle3_synth.cli import main\n"
    "code = main(sys.argv[1:])\n"
    "me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "cpu = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime\n"
    "sys.stderr.write(f'\\nMAXRSS_KIB {me.ru_maxrss} CPU_S {cpu}\\n')\n"
    "sys.exit(code)\n"
)


def run(argv: list[str]) -> tuple[float, float, float, str]:
    """Wall seconds, CPU seconds (process + its workers), peak RSS in MiB of the command's
    process, and its stdout. CPU seconds are the steadier figure on a shared machine."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _CHILD, *argv], capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"{argv} failed ({done.returncode}): {done.stderr[-2000:]}")
    tail = done.stderr.rsplit("MAXRSS_KIB ", 1)[1].split()
    return seconds, float(tail[2]), int(tail[0]) / 1024, done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=12_000)
    parser.add_argument("--out", help="folder to write (default: a temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the folder")
    parser.add_argument("--reuse", action="store_true", help="use the dataset already in --out")
    args = parser.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="bench-checks-"))
    try:
        started = time.perf_counter()
        if args.reuse:
            import pyarrow.dataset as pads

            files = sorted(str(p) for p in (out / CONFIG).glob("*.parquet"))
            table = pads.dataset(files).to_table(columns=["prompt_tokens", "completion_tokens"])
            ids, args.rows = sum(sum(c.to_pylist()) for c in table.columns), table.num_rows
        else:
            ids = write_dataset(out, args.rows)
        size = sum(p.stat().st_size for p in (out / CONFIG).glob("*.parquet"))
        print(f"dataset: {args.rows} rows, {ids / 1e6:.1f}M ids, {size / 2**20:.0f} MiB Parquet "
              f"(written in {time.perf_counter() - started:.0f}s)")
        export = out / "export.jsonl"
        commands = [
            ("stats", ["stats", str(out)]),
            ("inspect --where --longest 3", ["inspect", str(out), CONFIG, "--where", "think_end >= 0 and finish_reason == 'length'",
                                             "--longest", "3", "--no-messages", "--colour", "never"]),
            ("validate", ["validate", str(out)]),
            ("validate --workers 2", ["validate", str(out), "--workers", "2"]),
            ("export speculators", ["export", str(out), CONFIG, "--format", "speculators", "--out", str(export)]),
            ("export specforge", ["export", str(out), CONFIG, "--format", "specforge", "--out", str(export)]),
        ]
        print(f"{'command':32s} {'wall s':>7s} {'CPU s':>7s} {'rows/s':>8s} {'max RSS MiB':>12s}")
        for name, argv in commands:
            seconds, cpu, rss, stdout = run(argv)
            print(f"{name:32s} {seconds:7.1f} {cpu:7.1f} {args.rows / seconds:8.0f} {rss:12.0f}")
            if name == "validate" and "all valid" not in stdout:
                print(stdout)
    finally:
        if not args.keep:
            shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(main())
