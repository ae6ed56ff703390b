"""`make train-demo`: a tiny EAGLE-3 drafter trained on the CPU by speculators' own training loop.

Every step is the path of docs/training/speculators.md, run on the bundled tiny model
(tests/fixtures/models/tiny-kimi, 2 decoder layers, vocabulary 2,048) and printed as the command
it is:

1. `eagle3-synth build` each config (all eight by default) from its bundled sample prompts,
   several sampled rollouts per prompt (`--samples-per-prompt`, temperature > 0), short outputs,
   with `--validation N` (default 1) for each config with two or more bundled prompts: whole
   conversations held out, never trained on;
2. `eagle3-synth export --format ids` per config (the train split), and `eagle3-synth vocab` over the mix;
3. `speculators prepare-data` on the exports (speculators 0.9.0, its own virtual environment:
   `make speculators-venv`);
4. `eagle3-synth hidden-states ... --format speculators --prepared` for those prepared rows (the
   tiny model has 2 layers, so `--layers 0 1`: EAGLE-3's default `[2, n//2, n-3]` needs 5, and
   SGLang serves only layers it can capture, the inputs of layers 0..n-1: engines/sglang/aux_layers.py);
5. `speculators train` through examples/speculators_cpu.py (speculators' CLI with its two
   accelerator-only calls patched), with `--on-missing raise`: a hidden-states file the trainer
   cannot read stops it rather than asking a vLLM server; and `--no-norm-before-residual`, the
   drafter layer SGLang serves (speculators' default differs: evaluate.py);
6. `eagle3-synth evaluate` on the held-out rows, with the SGLang venv's interpreter (`make
   sglang-venv`): the drafter served by SGLang's own EAGLE-3 speculative decoding, greedy, 3 draft
   steps in a chain (what speculators validated).

It prints the validation accuracy per epoch (`full_acc_k`: the share of positions whose k+1 first
draft tokens all match the target's, from the trainer's own metrics), then the served acceptance
length beside it. Reruns reuse the built dataset (builds resume) and redo the rest. The package
itself never imports speculators.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "tests" / "fixtures" / "models" / "tiny-kimi"
CPU_MAIN = "examples.speculators_cpu"  # run as `python -m`, as this demo is
LAYERS = ("0", "1")
# speculators' own flags off its GPU-only paths (train/config/schema.py, 0.9.0): sdpa instead of
# flex attention (`DraftArgs`), the eager loss instead of the fused triton one (`LossArgs`), no
# worker processes and float32 hidden states (`DataArgs`; no bf16 autocast on the CPU).
CPU_FLAGS = ("--draft-attn-impl", "sdpa", "--loss-implementation", "eager", "--num-workers", "0",
             "--hidden-states-dtype", "float32")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from eagle3_synth.prompts.configs import BUILTIN_CONFIGS

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "train_demo_out", help="work folder (default train_demo_out/)")
    parser.add_argument("--configs", nargs="+", default=list(BUILTIN_CONFIGS), metavar="CONFIG",
                        help="configs built and mixed (default: all eight)")
    parser.add_argument("--samples-per-prompt", type=int, default=12, help="rollouts per bundled prompt")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--draft-vocab-size", type=int, default=256)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--lr", type=float, default=1e-3, help="speculators' --lr (its default)")
    parser.add_argument("--total-seq-len", type=int, default=2048,
                        help="speculators' --total-seq-len: tokens packed into one training batch")
    parser.add_argument("--max-steps", type=int, help="stop training after this many optimizer steps")
    parser.add_argument("--validation", type=int, default=1, metavar="N",
                        help="build --validation: conversations held out per config, evaluated served")
    parser.add_argument("--speculators-python", type=Path, default=ROOT / ".venv-speculators" / "bin" / "python",
                        help="the interpreter speculators 0.9.0 is installed for (make speculators-venv)")
    parser.add_argument("--layers", nargs="+", default=list(LAYERS), metavar="ID",
                        help=f"vLLM ids of the aux layers (default {' '.join(LAYERS)}; with --hidden-states-engine "
                        "sglang: 1 2, as SGLang cannot capture the embeddings)")
    parser.add_argument("--hidden-states-engine", choices=("transformers", "sglang"), default="transformers",
                        help="who computes the hidden states: transformers (default) or SGLang in its venv "
                        "(`hidden-states --engine sglang`, bf16)")
    parser.add_argument("--states-dtype", default="float32", help="hidden-states --dtype with transformers (default "
                        "float32; SGLang on a CPU runs bfloat16 only)")
    parser.add_argument("--seed", type=int, help="speculators train --seed")
    parser.add_argument("--sglang-python", type=Path, default=ROOT / ".venv-sglang" / "bin" / "python",
                        help="the interpreter SGLang 0.5.23 and this package are installed for (make sglang-venv); "
                             "served evaluation is skipped, said, where it is missing")
    return parser.parse_args(argv)


def bundled_conversations(config: str) -> int:
    """How many sample prompts a config bundles (its demo's conversations)."""
    from eagle3_synth.prompts.configs import sample_prompts_path

    with open(sample_prompts_path(config), encoding="utf-8") as handle:
        return sum(1 for line in handle if line.strip())


def show(argv: list[str], prog: str = "eagle3-synth") -> None:
    print(f"\n$ {prog} " + " ".join(shlex.quote(str(a)) for a in argv), flush=True)


def ours(argv: list[str]) -> None:
    """One eagle3-synth command, in this process (as examples/demo.py)."""
    from eagle3_synth.cli import main as cli

    show(argv)
    code = cli([str(a) for a in argv])
    if code != 0:
        raise SystemExit(f"train_demo: `eagle3-synth {argv[0]}` exited with {code}")


def logged(command: list[str], log: Path, what: str, env: dict[str, str] | None = None) -> None:
    """Run a trainer's command with its long console output in `log`; its last lines are shown,
    naming `what` ran, if it fails."""
    with open(log, "w", encoding="utf-8") as out:
        code = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env, check=False).returncode
    if code != 0:
        tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-25:]
        raise SystemExit("\n".join(tail) + f"\n{what} exited with {code} (whole log: {log})")
    print(f"  ok (log: {log})", flush=True)


def theirs(python: Path, argv: list[str], log: Path, env: dict[str, str] | None = None, cpu_patched: bool = False) -> None:
    """One speculators command in its own environment (`cpu_patched`: through examples/speculators_cpu.py)."""
    show(argv, prog=f"python -m {CPU_MAIN}" if cpu_patched else "speculators")
    command = [str(python), "-m", CPU_MAIN if cpu_patched else "speculators", *argv]
    # Wide lines: rich wraps the trainer's console to the terminal width, which a log file lacks.
    logged(command, log, f"train_demo: `speculators {argv[0]}`", env={**os.environ, "COLUMNS": "200", **(env or {})})


def validation_epochs(metrics: Path) -> list[dict[str, float]]:
    """The trainer's per-epoch validation metrics, in order (records it logged with a "val" key)."""
    if not metrics.is_file():
        return []
    records = [json.loads(line) for line in metrics.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [{"epoch": r["epoch"], **r["val"]} for r in records if isinstance(r.get("val"), dict)]


def accuracy_lines(epochs: list[dict[str, float]]) -> list[str]:
    lines = []
    for e in epochs:
        accs = [e[k] for k in sorted(k for k in e if k.startswith("full_acc_"))]
        lines.append(f"  epoch {int(e['epoch']) + 1}: validation full_acc " + " / ".join(f"{a:.3f}" for a in accs)
                     + f" (draft steps 1..{len(accs)}), loss {e.get('loss_epoch', float('nan')):.3f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    python = args.speculators_python
    if not python.is_file():
        raise SystemExit(f"train_demo: {python} is missing: create it with `make speculators-venv`")
    started = time.perf_counter()
    out: Path = args.out
    ds, train, vocab, prepared, drafter = (out / n for n in ("ds", "train", "vocab", "prepared", "drafter"))
    for folder in (train, out / "logs"):
        folder.mkdir(parents=True, exist_ok=True)

    # A config with one bundled prompt cannot hold a conversation out and keep one for train.
    held_out = [c for c in args.configs if args.validation and bundled_conversations(c) > 1]
    for config in args.configs:
        ours(["build", config, "--model", MODEL, "--out", ds, "--samples-per-prompt", args.samples_per_prompt,
              "--max-new-tokens", args.max_new_tokens, "--temperature", args.temperature, "--seed", 0,
              *(["--validation", args.validation] if config in held_out else [])])
    exports = []
    for config in args.configs:
        exports.append(train / f"{config}.jsonl")
        ours(["export", ds, config, "--format", "ids", "--no-text", "--out", exports[-1], "--overwrite"])
    ours(["vocab", ds, *args.configs, "--draft-vocab-size", args.draft_vocab_size, "--out", vocab, "--overwrite"])

    # prepare-data, hidden states and training are redone on each run: a fresh shuffle needs fresh files.
    for stale in (prepared, drafter):
        shutil.rmtree(stale, ignore_errors=True)
    model_config = json.loads((MODEL / "config.json").read_text(encoding="utf-8"))
    theirs(python, ["prepare-data", "--model", str(MODEL), *[a for f in exports for a in ("--data", str(f))],
                    "--output", str(prepared), "--seq-length", "2048"], out / "logs" / "prepare-data.log")
    states = ["hidden-states", ds, *args.configs, "--format", "speculators", "--prepared", prepared, "--model", MODEL,
              "--layers", *args.layers, "--no-progress"]
    if args.hidden_states_engine == "sglang":
        # mem_fraction_static 0.1: a KV cache of a few GB, not one sized to all free memory (docs/guides/engines.md).
        states += ["--engine", "sglang", "--dtype", "bfloat16", "--engine-arg", "device=cpu",
                   "--engine-arg", "mem_fraction_static=0.1"]
        show(states)
        logged([str(args.sglang_python.parent / "eagle3-synth"), *map(str, states)], out / "logs" / "hidden-states.log",
               "train_demo: `eagle3-synth hidden-states --engine sglang`")
    else:
        ours([*states, "--dtype", args.states_dtype])

    mapping = vocab / f"speculators-{model_config['vocab_size']}-{args.draft_vocab_size}"
    metrics = out / "logs" / "metrics.jsonl"
    metrics.unlink(missing_ok=True)
    steps = ["--max-steps", str(args.max_steps)] if args.max_steps else []
    theirs(python, ["train", "--verifier-name-or-path", str(MODEL), "--data-path", str(prepared),
                    "--speculator-type", "eagle3", "--target-layer-ids", *args.layers, "--on-missing", "raise",
                    *(["--seed", str(args.seed)] if args.seed is not None else []),
                    "--draft-vocab-size", str(args.draft_vocab_size),
                    "--d2t-path", str(mapping / f"d2t-{args.draft_vocab_size}.npy"),
                    "--t2d-path", str(mapping / f"t2d-{args.draft_vocab_size}.npy"),
                    "--total-seq-len", str(args.total_seq_len), "--epochs", str(args.epochs), "--lr", str(args.lr), *steps, *CPU_FLAGS,
                    "--no-norm-before-residual",
                    "--save-path", str(drafter), "--log-dir", str(out / "logs"), "--no-resume-from-checkpoint"],
           out / "logs" / "train.log", env={"SPECULATORS_METRICS_JSONL": str(metrics)}, cpu_patched=True)

    epochs = validation_epochs(metrics)
    if not epochs:
        raise SystemExit(f"train_demo: the trainer logged no validation metrics ({metrics}; see {out / 'logs' / 'train.log'})")
    print(f"\nEAGLE-3 drafter trained by speculators on the CPU ({len(epochs)} epochs, {time.perf_counter() - started:.0f} s "
          f"in all; checkpoints in {drafter}):")
    for line in accuracy_lines(epochs):
        print(line)
    if held_out and str(model_config["num_hidden_layers"]) in args.layers:
        print(f"\nserved acceptance: skipped (layer {model_config['num_hidden_layers']}, the last layer's output, is not "
              "one SGLang's EAGLE-3 can hand a drafter: engines/sglang/aux_layers.py)")
    elif held_out:
        served(args.sglang_python, ds, held_out, saved_drafter(drafter), out / "logs")
    return 0


def saved_drafter(folder: Path) -> Path:
    """The last checkpoint speculators saved under `folder` (one subfolder per checkpoint)."""
    checkpoints = sorted((c.parent for c in folder.glob("*/config.json")), key=lambda c: c.stat().st_mtime)
    if not checkpoints:
        raise SystemExit(f"train_demo: speculators saved no checkpoint under {folder}")
    return checkpoints[-1]


def served(python: Path, ds: Path, configs: list[str], drafter: Path, logs: Path, who: str = "train_demo",
           steps: int = 3) -> None:
    """`eagle3-synth evaluate` on the held-out rows, in the SGLang venv (SGLang's in-process Engine on
    the CPU, bf16, greedy): the acceptance length SGLang's speculative decoder serves, `steps` draft
    steps in a chain (what the drafter was trained to unroll)."""
    if not python.is_file():
        print(f"\nserved acceptance: skipped ({python} is missing: create it with `make sglang-venv`)")
        return
    report = logs / "evaluate.json"
    # One branch: the chain the trainer unrolled (speculators: full_acc_k, k = 1..3) and validated.
    argv = ["evaluate", str(ds), *configs, "--drafter", str(drafter), "--split", "validation", "--temperature", "0",
            "--num-steps", str(steps), "--eagle-topk", "1", "--num-draft-tokens", str(steps + 1),
            "--dtype", "bfloat16", "--engine-arg", "device=cpu", "--engine-arg", "mem_fraction_static=0.1",
            "--report", str(report), "--overwrite"]
    show(argv)
    logged([str(python.parent / "eagle3-synth"), *argv], logs / "evaluate.log", f"{who}: `eagle3-synth evaluate`")
    result = json.loads(report.read_text(encoding="utf-8"))
    overall, greedy = result["overall"], result["greedy"]["baseline"]
    positions = " / ".join(f"{p:.3f}" for p in overall["per_position"])
    settings = result["settings"]
    print(f"\nServed by SGLang's EAGLE-3 on the held-out rows ({overall['rows']} rows, greedy; steps / topk / draft tokens "
          f"{settings.get('speculative_num_steps')} / {settings.get('speculative_eagle_topk')} / "
          f"{settings.get('speculative_num_draft_tokens')}):")
    print(f"  acceptance length {overall['acceptance_length']:.3f} (1 + drafts accepted per verify step), "
          f"per position {positions}; {greedy['checked'] - greedy['unequal']} of {greedy['checked']} outputs equal "
          "to the target's without speculation")
    if greedy["unequal"]:  # each a bug or a near-tie in bf16: where it first differs, to look at
        print(f"  unequal: {', '.join(greedy['unequal_rows'])}")


if __name__ == "__main__":
    sys.exit(main())
