"""What the B1-B8 mix is for: one drafter per config of a small mix, and one on the whole mix, each
served by SGLang's own EAGLE-3 speculative decoding on every config's held-out rows.

Three configs whose traffic differs in kind, each built by the tiny target from its own prompts:
B1_glaive (function calling: a system prompt, declared tools, sometimes an earlier call and its
result), B3_ultrachat (general chat and code questions) and B5_openthoughts (arithmetic word
problems). The prompts are drawn, seeded, from the generator the tiny model was trained on
(stand_ins/synthetic_conversations.py) and written as one `--prompts` file per config; every build
holds `--validation` conversations out. Four drafters are trained the train demo's way (speculators
0.9.0 on the CPU, layers 0 1, `--no-norm-before-residual`, 3 draft steps), each for the same number
of optimizer steps of the same packed length: one on each config's train split and one on the three
together. Each is then served (`eagle3-synth evaluate`, SGLang 0.5.23 in process, CPU, bf16, greedy:
SGLang's CPU backend verifies greedy only; 3 steps, one branch) on the held-out rows of all three
configs; SGLang without speculation serves them once, the reference every output is checked against.
The table: acceptance length (1 + drafts accepted per verify step, SGLang's counts) per drafter
(row) and held-out config (column), the mean over the trainer seeds (`--seeds`) with its range.

    .venv/bin/python -m benchmarks.bench_cross_config   # ~25 min on 2 CPUs
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

from benchmarks.bench_onpolicy import steps_per_epoch
from examples.train_demo import CPU_FLAGS, LAYERS, MODEL, ROOT, logged, ours, saved_drafter, theirs
from stand_ins.synthetic_conversations import (Example, general_chat, glaive_call, glaive_refuse, glaive_result,
                                               math_question)

KINDS: dict[str, tuple[Callable[[random.Random], Example], ...]] = {
    "B1_glaive": (glaive_call, glaive_call, glaive_result, glaive_refuse),
    "B3_ultrachat": (general_chat,),
    "B5_openthoughts": (math_question,),
}
TRAIN_DATA_RATIO = 0.9  # speculators 0.9.0's default (train/config/schema.py `DataArgs`), said explicitly


def prompt_records(config: str, seed: int, count: int) -> list[dict[str, Any]]:
    """`count` distinct prompts of the config's kind (a build rejects a repeated prompt)."""
    rng = random.Random(f"{seed}-{config}")
    records: list[dict[str, Any]] = []
    seen: set[str] = set()
    for _ in range(count * 50):
        if len(records) == count:
            return records
        example = rng.choice(KINDS[config])(rng)
        key = json.dumps([example.messages, example.tools], sort_keys=True)
        if key not in seen:
            seen.add(key)
            records.append({"id": f"{config}-{len(records)}", "messages": example.messages,
                            **({"tools": example.tools} if example.tools else {})})
    raise SystemExit(f"bench_cross_config: {config}: only {len(records)} distinct prompts of {count} asked")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "bench_cross_config_out")
    parser.add_argument("--prompts", type=int, default=60, help="prompts per config")
    parser.add_argument("--validation", type=int, default=12, help="prompts held out per config")
    parser.add_argument("--seed", type=int, default=11, help="seed of the prompts")
    parser.add_argument("--samples-per-prompt", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--steps", type=int, default=24, help="optimizer steps, every drafter")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="trainer seeds")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--total-seq-len", type=int, default=2048)
    parser.add_argument("--draft-vocab-size", type=int, default=2048, help="default: the whole vocabulary")
    parser.add_argument("--speculators-python", type=Path, default=ROOT / ".venv-speculators" / "bin" / "python")
    parser.add_argument("--sglang-python", type=Path, default=ROOT / ".venv-sglang" / "bin" / "python")
    return parser.parse_args(argv)


def train_drafters(args: argparse.Namespace, name: str, configs: list[str], ds: Path) -> tuple[list[Path], dict[str, Any]]:
    """The train demo's path for `configs`' train splits: ids export, draft vocabulary, prepare-data,
    hidden states, then `speculators train` for `args.steps` optimizer steps with each seed; the
    saved drafters, in the order of `args.seeds`."""
    work, logs = args.out / name, args.out / "logs"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    exports = []
    for config in configs:
        exports.append(work / f"{config}.jsonl")
        ours(["export", ds, config, "--format", "ids", "--no-text", "--out", exports[-1], "--overwrite"])
    ours(["vocab", ds, *configs, "--draft-vocab-size", args.draft_vocab_size, "--out", work / "vocab", "--overwrite"])
    vocab_size = json.loads((MODEL / "config.json").read_text())["vocab_size"]
    mapping = work / "vocab" / f"speculators-{vocab_size}-{args.draft_vocab_size}"
    py, prepared = args.speculators_python, work / "prepared"
    theirs(py, ["prepare-data", "--model", str(MODEL), *[a for f in exports for a in ("--data", str(f))],
                "--output", str(prepared), "--seq-length", str(args.total_seq_len)], logs / f"prepare-{name}.log")
    ours(["hidden-states", ds, *configs, "--format", "speculators", "--prepared", prepared, "--model", MODEL,
          "--layers", *LAYERS, "--dtype", "float32", "--no-progress"])
    rows = sum(1 for _ in (prepared / "hidden_states").glob("hs_*.safetensors"))
    per_epoch = steps_per_epoch(py, prepared, int(rows * TRAIN_DATA_RATIO), args.total_seq_len, 0)
    epochs = next(e + 1 for e in range(len(per_epoch)) if sum(per_epoch[: e + 1]) >= args.steps)
    size = args.draft_vocab_size
    drafters = []
    for seed in args.seeds:
        theirs(py, ["train", "--verifier-name-or-path", str(MODEL), "--data-path", str(prepared), "--speculator-type", "eagle3",
                    "--target-layer-ids", *LAYERS, "--on-missing", "raise", "--draft-vocab-size", str(size),
                    "--d2t-path", str(mapping / f"d2t-{size}.npy"), "--t2d-path", str(mapping / f"t2d-{size}.npy"),
                    "--total-seq-len", str(args.total_seq_len), "--train-data-ratio", str(TRAIN_DATA_RATIO),
                    "--seed", str(seed), "--epochs", str(epochs), "--max-steps", str(args.steps), "--lr", str(args.lr),
                    *CPU_FLAGS, "--no-norm-before-residual", "--save-path", str(work / f"drafter-{seed}"),
                    "--log-dir", str(logs), "--no-resume-from-checkpoint"], logs / f"train-{name}-{seed}.log", cpu_patched=True)
        drafters.append(saved_drafter(work / f"drafter-{seed}"))
    return drafters, {"rows": rows, "epochs": epochs, "steps_per_epoch": per_epoch[:epochs]}


def serve(args: argparse.Namespace, ds: Path, drafter: Path, name: str, baseline: bool) -> dict[str, Any]:
    """`eagle3-synth evaluate` of `drafter` on every config's held-out rows; its report."""
    report = args.out / "served" / f"{name}.json"
    report.parent.mkdir(exist_ok=True)
    argv = ["evaluate", str(ds), *KINDS, "--drafter", str(drafter), "--split", "validation", "--temperature", "0",
            "--num-steps", "3", "--eagle-topk", "1", "--num-draft-tokens", "4", "--dtype", "bfloat16",
            "--engine-arg", "device=cpu", "--engine-arg", "mem_fraction_static=0.1", "--report", str(report), "--overwrite",
            *([] if baseline else ["--no-baseline"])]
    logged([str(args.sglang_python.parent / "eagle3-synth"), *argv], args.out / "logs" / f"served-{name}.log",
           "bench_cross_config: `eagle3-synth evaluate`")
    return json.loads(report.read_text(encoding="utf-8"))


def spread(values: list[float]) -> str:
    """Mean (min-max); the mean alone for one value."""
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.fmean(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def table(served: dict[str, list[dict[str, Any]]]) -> str:
    """Drafter (row) by held-out config (column): the acceptance length over the seeds' reports."""
    lines = ["| trained on \\ served on | " + " | ".join(KINDS) + " | all |", "|---|" + "---|" * (len(KINDS) + 1)]
    for name, reports in served.items():
        cells = [spread([r["configs"][c]["acceptance_length"] for r in reports]) for c in KINDS]
        cells.append(spread([r["overall"]["acceptance_length"] for r in reports]))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for python, make in ((args.speculators_python, "speculators-venv"), (args.sglang_python, "sglang-venv")):
        if not python.is_file():
            raise SystemExit(f"bench_cross_config: {python} is missing: create it with `make {make}`")
    started = time.perf_counter()
    ds = args.out / "ds"
    (args.out / "logs").mkdir(parents=True, exist_ok=True)
    for config in KINDS:  # builds resume
        prompts = args.out / f"prompts-{config}.jsonl"
        prompts.write_text("".join(json.dumps(r) + "\n" for r in prompt_records(config, args.seed, args.prompts)),
                           encoding="utf-8")
        ours(["build", config, "--prompts", prompts, "--model", MODEL, "--validation", args.validation, "--seed", 0,
              "--samples-per-prompt", args.samples_per_prompt, "--max-new-tokens", args.max_new_tokens,
              "--temperature", args.temperature, "--out", ds])
    plans: dict[str, Any] = {}
    served: dict[str, list[dict[str, Any]]] = {}
    for name, configs in (*((c, [c]) for c in KINDS), ("the mix", list(KINDS))):
        drafters, plans[name] = train_drafters(args, name.replace(" ", "_"), configs, ds)
        for seed, drafter in zip(args.seeds, drafters):
            report = serve(args, ds, drafter, f"{name.replace(' ', '_')}-{seed}", baseline=not served)
            served.setdefault(name, []).append(report)
            print(f"  {name} seed {seed}: served acceptance length {report['overall']['acceptance_length']:.3f}", flush=True)
    first = served[next(iter(served))][0]
    results = {"plans": plans, "seeds": args.seeds,
               "acceptance_length": {n: {c: [r["configs"][c]["acceptance_length"] for r in reports] for c in KINDS}
                                     for n, reports in served.items()},
               "rows": {c: first["configs"][c]["rows"] for c in KINDS}, "baseline": first["greedy"]["baseline"],
               "seconds": time.perf_counter() - started}
    (args.out / "results.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    print(f"\n{table(served)}\n\nheld-out rows per config: {results['rows']}; {args.steps} steps each, seeds {args.seeds}; "
          f"{results['seconds']:.0f} s in all (results: {args.out / 'results.json'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
