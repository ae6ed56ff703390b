"""`make specforge-train-demo`: a tiny EAGLE-3 drafter trained on the CPU by SpecForge 0.2.0's own
offline training loop, on hidden states this package wrote.

Every step is the offline path of docs/training/specforge.md, run on the bundled 4-layer tiny model
(tests/fixtures/models/tiny-kimi-4l, vocabulary 2,048: SpecForge's drafter takes three of the target's
layers and SGLang captures only layers below the last, which tiny-kimi's two layers cannot give) and
printed as the command it is:

1. `eagle3-synth build` each config from its bundled sample prompts, several sampled rollouts per
   prompt, with `--validation N` (a count, default 1) for each config with two or more bundled
   prompts: whole conversations held out as a `validation` split;
2. `eagle3-synth vocab` over the mix (SpecForge's `.pt` d2t/t2d mapping);
3. `eagle3-synth hidden-states ... --format specforge` for the train split and, into a folder of its
   own, the validation split (`--layers 1 2 3`, vLLM's numbering: the outputs of layers 0, 1 and 2,
   which SGLang can capture; `model.aux_hidden_state_layer_ids: [0, 1, 2]` in SpecForge's and
   SGLang's own numbering);
4. the draft config SpecForge itself derives from the target, with our draft vocabulary size and
   those layer ids (`examples/specforge_cpu.py draft-config`), and a run.yaml in SpecForge's schema;
5. `specforge train --config run.yaml` through examples/specforge_cpu.py (SpecForge's CLI with its
   triton loss stood in for by plain torch), evaluating on the validation folder at the end of
   every epoch (`training.eval_interval` = the optimizer steps of one epoch);
6. `specforge export --to sglang` (SpecForge's own exporter, `export/to_sglang.py`), then
   `eagle3-synth evaluate` on the held-out rows with the SGLang venv's interpreter (`make
   sglang-venv`): the drafter served by SGLang's EAGLE-3 speculative decoding, greedy, as many draft
   steps as the trained `ttt_length`, printed beside SpecForge's own `simulated_acc_len`.

SpecForge logs a `step N: {...}` line per optimizer step and per evaluation
(`training/assembly.py: _logger`); they are kept as JSON lines (logs/metrics.jsonl) and printed per
epoch: the mean of the epoch's training steps (`loss`, `acc`, `acceptance_rate`) and the evaluation
after it (`eval/avg_loss`, `eval/avg_acc`, `eval/per_position_acc`, `eval/simulated_acc_len`,
SpecForge's own names). Reruns reuse the built dataset (builds resume) and redo the rest. Needs
`make specforge-venv`; the package itself never imports SpecForge.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import shlex
import shutil
import sys
import time
from pathlib import Path

from examples.train_demo import ROOT, bundled_conversations, logged, ours, served, show  # the same eagle3-synth steps

CPU_MAIN = "examples.specforge_cpu"  # run as `python -m`, as this demo is
MODEL = ROOT / "tests" / "fixtures" / "models" / "tiny-kimi-4l"
# SpecForge's EAGLE-3 drafter takes exactly three layers (modeling/draft/llama3_eagle.py
# `LlamaForCausalLMEagle3.__init__`).
# SGLang captures the inputs of decoder layers 0..n-1 (engines/sglang/aux_layers.py): on 4 layers,
# the outputs of layers 0, 1, 2 are vLLM's 1, 2, 3 (what hidden-states takes) and SpecForge's and
# SGLang's 0, 1, 2 (what the drafter's config names; SGLang's llama.py adds one).
LAYERS = ("1", "2", "3")
DRAFT_LAYER_IDS = (0, 1, 2)
STEP_LINE = re.compile(r"^step (\d+): (\{.*\})$")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from eagle3_synth.prompts.configs import BUILTIN_CONFIGS

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "specforge_demo_out", help="work folder (default specforge_demo_out/)")
    parser.add_argument("--configs", nargs="+", default=list(BUILTIN_CONFIGS), metavar="CONFIG",
                        help="configs built and mixed (default: all eight)")
    parser.add_argument("--samples-per-prompt", type=int, default=6, help="rollouts per bundled prompt")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--validation", default="1",
                        help="build --validation: conversations held out per config for SpecForge's evaluation, a "
                             "count or a fraction (default 1: a config has only a few bundled prompts, and a "
                             "split left empty is refused); configs with one bundled prompt keep it for train")
    parser.add_argument("--draft-vocab-size", type=int, default=256)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=1e-3, help="training.learning_rate (SpecForge's default is 1e-4)")
    parser.add_argument("--ttt-length", type=int, default=3, help="training.ttt_length: draft steps unrolled (default 7)")
    parser.add_argument("--max-steps", type=int, help="training.max_steps: stop after this many optimizer steps")
    parser.add_argument("--specforge-python", type=Path, default=ROOT / ".venv-specforge" / "bin" / "python",
                        help="the interpreter SpecForge 0.2.0 is installed for (make specforge-venv)")
    parser.add_argument("--sglang-python", type=Path, default=ROOT / ".venv-sglang" / "bin" / "python",
                        help="the interpreter SGLang 0.5.23 and this package are installed for (make sglang-venv); "
                             "without it the served acceptance is skipped")
    return parser.parse_args(argv)


def theirs(python: Path, argv: list[str], log: Path) -> None:
    """One command of examples/specforge_cpu.py in SpecForge's venv; its output goes to `log`, the last
    lines are shown if it fails."""
    show(argv, prog=f"python -m {CPU_MAIN}")
    logged([str(python), "-m", CPU_MAIN, *argv], log, f"specforge_demo: `specforge {argv[0]}`")


def run_yaml(*, target: Path, draft: Path | None, vocab: Path, train: Path, validation: Path, epochs: int,
             lr: float, ttt_length: int, eval_interval: int, max_steps: int | None, output: Path) -> str:
    """A run config in SpecForge 0.2.0's schema (config/schema.py `Config`, its sections named as the keys;
    unknown keys are refused, `StrictConfigModel`)."""
    lines = [
        "model:",
        f"  target_model_path: {target}   # the lm_head folder hidden-states wrote (tied embeddings)",
        f"  aux_hidden_state_layer_ids: [{', '.join(map(str, DRAFT_LAYER_IDS))}]   # the layers hidden-states "
        f"captured (--layers {' '.join(LAYERS)}), into the draft config",
        *([f"  draft_model_config: {draft}   # draft_vocab_size ours, not the derived 32000"] if draft else []),
        f"  vocab_mapping_path: {vocab}",
        "data:",
        f"  hidden_states_path: {train}   # set: the run is offline (`Config.mode`)",
        f"  eval_hidden_states_path: {validation}   # needs eval_interval (`Config._validate_run_structure`)",
        "  dataloader_num_workers: 0   # no loader processes on 2 cores",
        "training:",
        "  strategy: eagle3",
        f"  num_epochs: {epochs}",
        *([f"  max_steps: {max_steps}"] if max_steps else []),
        "  batch_size: 1",
        "  fsdp_sharding: NO_SHARD   # plain DDP, the draft on the CPU (FSDPTrainingBackend.prepare_model)",
        f"  learning_rate: {lr}",
        f"  ttt_length: {ttt_length}",
        "  attention_backend: sdpa   # not the default flex_attention (torch.compile'd: WrappedFlexAttention)",
        f"  eval_interval: {eval_interval}   # the optimizer steps of one epoch",
        "  log_interval: 1",
        f"output_dir: {output}",
    ]
    return "\n".join(lines) + "\n"


def read_metrics(log: Path) -> list[dict]:
    """SpecForge's logged `step N: {...}` lines (its `_logger` prints a dict of floats and float lists)."""
    records = []
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        match = STEP_LINE.match(line.strip())
        if match:
            records.append({"step": int(match.group(1)), **ast.literal_eval(match.group(2))})
    return records


def epoch_lines(records: list[dict], steps_per_epoch: int) -> list[str]:
    """Per epoch: the mean of its training steps' metrics and the evaluation logged at its last step."""
    lines = []
    train = [r for r in records if "loss" in r]
    evals = {r["step"]: r for r in records if "eval/avg_loss" in r}
    for epoch in range(1, -(-max((r["step"] for r in train), default=0) // steps_per_epoch) + 1):
        steps = [r for r in train if (epoch - 1) * steps_per_epoch < r["step"] <= epoch * steps_per_epoch]
        mean = {k: sum(r[k] for r in steps) / len(steps) for k in ("loss", "acc", "acceptance_rate")}
        line = (f"  epoch {epoch} (steps {steps[0]['step']}-{steps[-1]['step']}): train loss {mean['loss']:.3f}, "
                f"acc {mean['acc']:.3f}, acceptance_rate {mean['acceptance_rate']:.3f}")
        ev = evals.get(steps[-1]["step"])
        if ev:
            line += (f" | eval avg_loss {ev['eval/avg_loss']:.3f}, avg_acc {ev['eval/avg_acc']:.3f}, per_position_acc "
                     + " / ".join(f"{a:.3f}" for a in ev["eval/per_position_acc"])
                     + f", simulated_acc_len {ev['eval/simulated_acc_len']:.3f}")
        lines.append(line)
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    python = args.specforge_python
    if not python.is_file():
        raise SystemExit(f"specforge_demo: {python} is missing: create it with `make specforge-venv`")
    started = time.perf_counter()
    out: Path = args.out
    ds, vocab, run = out / "ds", out / "vocab", out / "run"
    states = {split: out / f"hs-{split}" for split in ("train", "validation")}
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)

    # A config with one bundled prompt cannot hold a conversation out and keep one for train.
    held_out = [c for c in args.configs if bundled_conversations(c) > 1]
    for config in args.configs:
        ours(["build", config, "--model", MODEL, "--out", ds, "--samples-per-prompt", args.samples_per_prompt,
              "--max-new-tokens", args.max_new_tokens, "--temperature", args.temperature, "--seed", 0,
              *(["--validation", args.validation] if config in held_out else [])])
    ours(["vocab", ds, *args.configs, "--draft-vocab-size", args.draft_vocab_size, "--out", vocab, "--overwrite"])
    # Hidden states and training are redone on each run.
    for stale in (*states.values(), run):
        shutil.rmtree(stale, ignore_errors=True)
    if not held_out:
        raise SystemExit("specforge_demo: no config with two or more bundled prompts to hold one out for validation")
    for split, folder in states.items():
        ours(["hidden-states", ds, *(args.configs if split == "train" else held_out), "--format", "specforge",
              "--out", folder, "--split", split, "--model", MODEL, "--layers", *LAYERS, "--no-progress"])
    rows = {split: len(list(folder.glob("*.ckpt"))) for split, folder in states.items()}
    run.mkdir(parents=True)

    model_config = json.loads((MODEL / "config.json").read_text(encoding="utf-8"))
    common = dict(target=states["train"] / "target_model", vocab=vocab / f"specforge-vocab-{model_config['vocab_size']}-"
                  f"{args.draft_vocab_size}.pt", train=states["train"], validation=states["validation"],
                  epochs=args.epochs, lr=args.lr, ttt_length=args.ttt_length, eval_interval=rows["train"],
                  max_steps=args.max_steps, output=run / "out")
    (run / "derive.yaml").write_text(run_yaml(draft=None, **common), encoding="utf-8")
    theirs(python, ["draft-config", str(run / "derive.yaml"), str(args.draft_vocab_size), str(run / "draft.json")],
           logs / "draft-config.log")
    (run / "run.yaml").write_text(run_yaml(draft=run / "draft.json", **common), encoding="utf-8")
    print(f"\n$ cat {shlex.quote(str(run / 'run.yaml'))}\n" + (run / "run.yaml").read_text(encoding="utf-8"), end="")
    theirs(python, ["train", "--config", str(run / "run.yaml")], logs / "train.log")

    records = read_metrics(logs / "train.log")
    (logs / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    lines = epoch_lines(records, steps_per_epoch=rows["train"])
    if not lines:
        raise SystemExit(f"specforge_demo: SpecForge logged no training step (see {logs / 'train.log'})")
    print(f"\nEAGLE-3 drafter trained by SpecForge on the CPU ({rows['train']} train rows, {rows['validation']} "
          f"validation rows, {time.perf_counter() - started:.0f} s in all; checkpoints in {run / 'out'}):")
    for line in lines:
        print(line)
    sglang_draft = run / "sglang-draft"
    theirs(python, ["export", "--to", "sglang", "--checkpoint", str(run / "out"), "--draft-config", str(run / "draft.json"),
                    "--output-dir", str(sglang_draft), "--vocab-mapping", str(common["vocab"])], logs / "export.log")
    served(args.sglang_python, ds, held_out, sglang_draft, logs, who="specforge_demo", steps=args.ttt_length)
    return 0


if __name__ == "__main__":
    sys.exit(main())
