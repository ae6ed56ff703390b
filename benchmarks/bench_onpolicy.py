"""Does on-policy data train a better drafter than the dataset's own answers?

The same tiny EAGLE-3 drafter (speculators 0.9.0's own training loop on the CPU, the path of
`make train-demo`, examples/train_demo.py) is trained on three datasets built from the same source
conversations, with the same supervised-token budget, steps and trainer seed, and evaluated on the
same held-out on-policy conversations:

  (a) off-policy: the source's own assistant answers, templated with the model's template
      (every turn, on the source's history), through the same build/export/hidden-states path;
  (b) on-policy, `--turns last`: the target writes each conversation's final answer;
  (c) on-policy, `--turns all`: the target writes every turn, on its own history.

Sources: the bundled sample prompts carry no final answers (adapters drop them) and the source
fixtures are a few edge-case records, so the conversations are drawn here from the generator the
tiny model was trained on (stand_ins/synthetic_conversations.py: chat, code and arithmetic
questions with their answers), 2-3 user turns each, with a seed of their own, written as a
`--prompts` file (config B3_ultrachat: multi-turn chat). Their answers carry no reasoning, as a
chat dataset's do not; the tiny model always reasons first.

(a) goes through the replay engine: a record per turn whose output ids are the source answer's
span in the template's rendering of the conversation up to that answer (what follows the turn's
prompt, up to and including the end-of-turn token), so `--turns all` prompts carry the source's
history and every id, mask and state comes from the package's own path. Tokenizing the answer text
is inherent to off-policy data; it happens here only, never in the package.

Evaluation (speculators 0.9.0's own metric, `full_acc_k`, train/trainer.py `Trainer.val_epoch`):
each condition's prepared training rows are followed by the held-out rows in one folder and
`--train-data-ratio` is set so that speculators' own split (`train/data.py: ArrowDataset.__init__`:
rows `[int(n * ratio), n)` are validation) is exactly the held-out rows; the validation set keeps
one packing for every seed (`train/dataloader.py: create_train_val_loaders`). (a) on its own
held-out rows: its last checkpoint is loaded with `--from-pretrained` (train/config/schema.py
`DraftArgs`) and run for one step at `--lr 0` (AdamW changes nothing) before the same validation
pass. Expected acceptance length of a K-step chain drafter:
tau = 1 + sum_k full_acc_k (the accepted draft tokens, plus the target's bonus token).

Served (`eagle3-synth evaluate`, the SGLang venv's interpreter, `--sglang-python`): every drafter
of every condition and seed is served by SGLang 0.5.23's own EAGLE-3 speculative decoding (in
process, CPU, bf16, 3 draft steps in a chain) on the prompts of the held-out on-policy rows, greedy
(SGLang's CPU backend verifies greedy only): the acceptance length SGLang counts, 1 + drafts
accepted per verify step. The drafters are trained as the train demo's, on layers 0 1 with
`--no-norm-before-residual`, the layers and the drafter layer SGLang serves.

    .venv/bin/python -m benchmarks.bench_onpolicy --speculators-python .venv-speculators/bin/python \
        --sglang-python .venv-sglang/bin/python   # ~27 min on 2 CPUs
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from examples.train_demo import CPU_FLAGS, LAYERS, MODEL, ROOT, logged, ours, saved_drafter, theirs, validation_epochs

CONFIG = "B3_ultrachat"
CONDITIONS = ("offpolicy", "last", "all")
# speculators' packing sampler, run in its own environment: optimizer steps in each of the first epochs.
_STEPS_PER_EPOCH = """
import sys, json
from datasets import load_from_disk
from speculators.train.distributed_batch_sampler import MultipackDistributedBatchSamplerV2 as S
path, n, seq, seed, epochs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
s = S(batch_max_length=seq, lengths=list(load_from_disk(path)["seq_len"][:n]), num_replicas=1, rank=0, seed=seed)
out = []
for e in range(epochs):
    s.set_epoch(e); out.append(len(s))
print(json.dumps(out))
"""


def source_conversations(seed: int, count: int) -> list[dict[str, Any]]:
    """`count` chat conversations of 2-3 user turns, each answered (the dataset's own answers); no two
    open with the same question (a build rejects the second as a duplicate prompt)."""
    from stand_ins.synthetic_conversations import general_chat, math_question

    rng = random.Random(seed)
    conversations: list[dict[str, Any]] = []
    openings: set[str] = set()
    while len(conversations) < count:
        messages: list[dict[str, str]] = []
        for _ in range(rng.choice((2, 2, 3))):
            example = rng.choice((general_chat, general_chat, math_question))(rng)
            messages += [{"role": "user", "content": example.messages[-1]["content"]},
                         {"role": "assistant", "content": example.response}]
        if messages[0]["content"] not in openings:
            openings.add(messages[0]["content"])
            conversations.append({"id": f"synth-{seed}-{len(conversations)}", "messages": messages})
    return conversations


def answer_ids(tokenizer: Any, messages: list[dict[str, str]], stop_ids: set[int]) -> list[list[int]]:
    """Per assistant message: the ids the template renders for it after its turn's prompt, up to and
    including the first stop id (the end-of-turn token). Refuses a rendering whose prompt is not a
    prefix of the conversation's (the answer would not follow the prompt)."""
    def render(part: list[dict[str, str]], generation_prompt: bool) -> list[int]:
        text = tokenizer.apply_chat_template(part, tokenize=False, add_generation_prompt=generation_prompt)
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    answers = []
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        prompt, full = render(messages[:i], True), render(messages[: i + 1], False)
        if full[: len(prompt)] != prompt:
            raise SystemExit(f"bench_onpolicy: turn {i}: the prompt's rendering is not a prefix of the conversation's")
        rest = full[len(prompt):]
        end = next((k for k, t in enumerate(rest) if t in stop_ids), None)
        if end is None:
            raise SystemExit(f"bench_onpolicy: turn {i}: the template renders no stop id after the answer")
        answers.append(rest[: end + 1])
    return answers


def replay_records(conversations: list[dict[str, Any]], answers: list[list[list[int]]]) -> list[dict[str, Any]]:
    """Replay records for a `--prompts` run with `--turns all`, one sample per prompt: conversation c
    (line c) owns sample ids `first .. first + turns - 1`, `first` = c + the earlier conversations'
    turns beyond their first (eagle3_synth/prompts/rollouts.py, module doc)."""
    records, first = [], 0
    for turns in answers:
        records += [{"sample_id": first + k, "output_ids": ids, "finish_reason": "stop"} for k, ids in enumerate(turns)]
        first += len(turns)
    return records


def loss_tokens(rows: list[dict[str, Any]]) -> int:
    return sum(sum(r["loss_mask"]) for r in rows)


def cut_to_budget(rows: list[dict[str, Any]], budget: int, seed: int = 0) -> list[dict[str, Any]]:
    """Rows in a seeded order until exactly `budget` loss-masked tokens: the last row taken keeps
    its ids (its hidden states are the same) and loses the tail of its mask beyond the budget."""
    if loss_tokens(rows) < budget:
        raise SystemExit(f"bench_onpolicy: {loss_tokens(rows)} supervised tokens, fewer than the budget {budget}")
    order = list(rows)
    random.Random(seed).shuffle(order)
    taken, total = [], 0
    for row in order:
        if total == budget:
            break
        n = sum(row["loss_mask"])
        if total + n > budget:
            keep, mask = budget - total, []
            for bit in row["loss_mask"]:
                mask.append(bit if keep > 0 else 0)
                keep -= bit
            row = {**row, "loss_mask": mask}
            n = sum(mask)
        taken.append(row)
        total += n
    return taken


def acceptance_length(full_acc: list[float]) -> float:
    """Expected tokens per target forward of a chain drafter: 1 (the bonus token) + sum_k full_acc_k,
    full_acc_k being the share of positions whose first k+1 draft tokens are all accepted."""
    return 1.0 + sum(full_acc)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def merged(first: Path, held_out: Path, out: Path) -> tuple[int, float]:
    """One prepared folder: `first`'s rows, then `held_out`'s, with their hidden-states files (hard
    links, renumbered); returns the held-out row count and the `--train-data-ratio` whose split
    (`int(n * ratio)`, train/data.py `ArrowDataset.__init__`) starts exactly at the held-out
    rows."""
    from datasets import concatenate_datasets, load_from_disk

    shutil.rmtree(out, ignore_errors=True)
    a, b = load_from_disk(str(first)), load_from_disk(str(held_out))
    concatenate_datasets([a, b]).save_to_disk(str(out))
    (out / "hidden_states").mkdir()
    for i in range(len(a)):
        os.link(first / "hidden_states" / f"hs_{i}.safetensors", out / "hidden_states" / f"hs_{i}.safetensors")
    for j in range(len(b)):
        os.link(held_out / "hidden_states" / f"hs_{j}.safetensors", out / "hidden_states" / f"hs_{len(a) + j}.safetensors")
    ratio = (len(a) + 0.5) / (len(a) + len(b))
    assert int((len(a) + len(b)) * ratio) == len(a)
    return len(b), ratio


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "bench_onpolicy_out")
    parser.add_argument("--conversations", type=int, default=120, help="source conversations (2-3 user turns each)")
    parser.add_argument("--validation", type=int, default=20, help="conversations held out (every build)")
    parser.add_argument("--source-seed", type=int, default=7, help="seed of the source conversations")
    parser.add_argument("--samples-last", type=int, default=2, help="(b) rollouts per conversation")
    parser.add_argument("--samples-all", type=int, default=1, help="(c) and validation rollouts per conversation")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--steps", type=int, default=24, help="optimizer steps, every condition")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="trainer seeds")
    parser.add_argument("--lr", type=float, default=3e-3, help="3x speculators' default: few steps")
    parser.add_argument("--total-seq-len", type=int, default=2048)
    parser.add_argument("--draft-vocab-size", type=int, default=2048,
                        help="default: the whole vocabulary, so no condition loses positions to its vocabulary")
    parser.add_argument("--speculators-python", type=Path, default=ROOT / ".venv-speculators" / "bin" / "python")
    parser.add_argument("--sglang-python", type=Path, default=ROOT / ".venv-sglang" / "bin" / "python",
                        help="SGLang 0.5.23's venv (make sglang-venv): serves every drafter; missing: no served column")
    return parser.parse_args(argv)


def check_offpolicy_rows(ds: Path, conversations: list[dict[str, Any]], tokenizer: Any) -> int:
    """Every (a) row, both splits: prompt_ids + output_ids are the template's rendering of its source
    conversation up to the answer it carries (the replay records went to the turns meant)."""
    from datasets import load_dataset

    by_id = {c["id"]: c["messages"] for c in conversations}
    checked = 0
    for split in ("train", "validation"):
        for row in load_dataset(str(ds), CONFIG, split=split):
            messages = by_id[row["source_id"]]
            end = [i for i, m in enumerate(messages) if m["role"] == "assistant"][row["turn"]] + 1
            text = tokenizer.apply_chat_template(messages[:end], tokenize=False)
            if list(row["prompt_ids"]) + list(row["output_ids"]) != tokenizer(text, add_special_tokens=False)["input_ids"]:
                raise SystemExit(f"bench_onpolicy: {ds} {split} row {row['sample_id']} is not its source's rendering")
            checked += 1
    return checked


def float32_copy(checkpoint: Path, out: Path) -> Path:
    """The checkpoint with its floating weights in float32: the trainer saves bfloat16
    (train/checkpointer.py `BaseCheckpointer.save_checkpoint`) and, on the CPU with float32 hidden
    states, runs without autocast, so a bfloat16 layer would meet float32 inputs. bfloat16 ->
    float32 is exact."""
    from safetensors.torch import load_file, save_file

    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(checkpoint, out)
    for weights in out.glob("*.safetensors"):
        tensors = load_file(str(weights))
        save_file({k: v.float() if v.is_floating_point() else v for k, v in tensors.items()}, str(weights), metadata={"format": "pt"})
    config = json.loads((out / "config.json").read_text())
    for key in ("torch_dtype", "dtype"):
        if key in config:
            config[key] = "float32"
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return out


def steps_per_epoch(python: Path, prepared: Path, n_train: int, seq: int, seed: int, epochs: int = 40) -> list[int]:
    done = subprocess.run([str(python), "-c", _STEPS_PER_EPOCH, str(prepared), str(n_train), str(seq), str(seed), str(epochs)],
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def speculators_train(args: argparse.Namespace, data: Path, ratio: float, seed: int, save: Path, logs: Path, name: str,
                      vocab: Path, extra: list[str]) -> dict[str, float]:
    """One `speculators train` run (examples/speculators_cpu.py); its last validation record."""
    metrics = logs / f"{name}.metrics.jsonl"
    metrics.unlink(missing_ok=True)
    shutil.rmtree(save, ignore_errors=True)
    size = args.draft_vocab_size
    theirs(args.speculators_python,
           ["train", "--verifier-name-or-path", str(MODEL), "--data-path", str(data), "--speculator-type", "eagle3",
            "--target-layer-ids", *LAYERS, "--on-missing", "raise", "--draft-vocab-size", str(size),
            "--d2t-path", str(vocab / f"d2t-{size}.npy"), "--t2d-path", str(vocab / f"t2d-{size}.npy"),
            "--total-seq-len", str(args.total_seq_len), "--train-data-ratio", repr(ratio), "--seed", str(seed),
            *extra, *CPU_FLAGS, "--no-norm-before-residual",
            "--save-path", str(save), "--log-dir", str(logs), "--no-resume-from-checkpoint"],
           logs / f"{name}.log", env={"SPECULATORS_METRICS_JSONL": str(metrics)}, cpu_patched=True)
    epochs = validation_epochs(metrics)
    if not epochs:
        raise SystemExit(f"bench_onpolicy: {name}: the trainer logged no validation metrics ({logs / (name + '.log')})")
    return epochs[-1]


def served_acceptance(python: Path, ds: Path, drafter: Path, report: Path, log: Path, baseline: bool) -> dict[str, Any]:
    """`eagle3-synth evaluate` of one drafter on the held-out on-policy rows (greedy, 3 steps in a
    chain, as trained): SGLang's acceptance length and per-position acceptance, and whether every
    output equals the target's own (with `baseline`: SGLang without speculation)."""
    argv = ["evaluate", str(ds), CONFIG, "--drafter", str(drafter), "--split", "validation", "--temperature", "0",
            "--num-steps", "3", "--eagle-topk", "1", "--num-draft-tokens", "4", "--dtype", "bfloat16",
            "--engine-arg", "device=cpu", "--engine-arg", "mem_fraction_static=0.1", "--report", str(report), "--overwrite",
            *([] if baseline else ["--no-baseline"])]
    logged([str(python.parent / "eagle3-synth"), *argv], log, "bench_onpolicy: `eagle3-synth evaluate`")
    result = json.loads(report.read_text(encoding="utf-8"))
    overall = result["overall"]
    return {"acceptance_length": overall["acceptance_length"], "per_position": overall["per_position"],
            "rows": overall["rows"], "greedy": result["greedy"]}


def accuracies(val: dict[str, float]) -> list[float]:
    keys = sorted((k for k in val if k.startswith("full_acc_")), key=lambda k: int(k.split("_")[2]))
    return [val[k] for k in keys]


def summary(runs: list[list[float]]) -> dict[str, Any]:
    """Mean, min and max over seeds of each position's full_acc and of tau."""
    columns = [list(c) for c in zip(*runs)] + [[acceptance_length(r) for r in runs]]
    return {"mean": [statistics.fmean(c) for c in columns], "min": [min(c) for c in columns],
            "max": [max(c) for c in columns], "std": [statistics.pstdev(c) for c in columns]}


def spread(values: list[float]) -> str:
    return f"{statistics.fmean(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def table(results: dict[str, Any]) -> str:
    k = len(next(iter(results["eval"].values()))["mean"]) - 1
    lines = ["| condition | train rows | " + " | ".join(f"full_acc_{i}" for i in range(k)) + " | tau = 1 + sum | served acceptance length |",
             "|---|---|" + "---|" * (k + 2)]
    for name, s in results["eval"].items():
        cells = [f"{m:.3f} ({lo:.3f}-{hi:.3f})" for m, lo, hi in zip(s["mean"], s["min"], s["max"])]
        served = s.get("served")
        cells.append(spread([r["acceptance_length"] for r in served]) if served else "-")
        lines.append(f"| {name} | {s['rows']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from transformers import AutoTokenizer

    args = parse_args(argv)
    py = args.speculators_python
    if not py.is_file():
        raise SystemExit(f"bench_onpolicy: {py} is missing: create it with `make speculators-venv`")
    out = args.out
    logs, train, val, prepared, drafters, mixes = (out / n for n in ("logs", "train", "val", "prepared", "drafters", "merged"))
    for folder in (logs, train, val, prepared, mixes):
        folder.mkdir(parents=True, exist_ok=True)
    clock: dict[str, float] = {}
    started = time.perf_counter()

    # 1. The source conversations, (a)'s replay records, and the three builds (builds resume).
    tokenizer = AutoTokenizer.from_pretrained(str(MODEL))
    stop_ids = set(json.loads((MODEL / "generation_config.json").read_text())["eos_token_id"])
    conversations = source_conversations(args.source_seed, args.conversations)
    answers = [answer_ids(tokenizer, c["messages"], stop_ids) for c in conversations]
    write_jsonl(out / "conversations.jsonl", conversations)
    write_jsonl(out / "replay.jsonl", replay_records(conversations, answers))
    common = ["--prompts", out / "conversations.jsonl", "--model", MODEL, "--validation", args.validation, "--seed", 0]
    # The source's answers are what they are: (a)'s cap is its longest answer when that is over ours.
    longest = max(len(ids) for turns in answers for ids in turns)
    ours(["build", CONFIG, *common, "--max-new-tokens", max(args.max_new_tokens, longest), "--turns", "all",
          "--engine", "replay", "--replay", out / "replay.jsonl", "--out", out / "ds_offpolicy"])
    checked = check_offpolicy_rows(out / "ds_offpolicy", conversations, tokenizer)
    print(f"  (a): {checked} rows, each its source conversation's rendering up to its answer", flush=True)
    for name, turns, samples in (("last", "last", args.samples_last), ("all", "all", args.samples_all)):
        ours(["build", CONFIG, *common, "--max-new-tokens", args.max_new_tokens, "--turns", turns,
              "--samples-per-prompt", samples, "--temperature", args.temperature, "--out", out / f"ds_{name}"])
    clock["builds"] = time.perf_counter() - started

    # 2. ids rows; every condition cut to the same supervised-token budget; one draft vocabulary.
    rows = {}
    for name in CONDITIONS:
        ours(["export", out / f"ds_{name}", CONFIG, "--format", "ids", "--no-text", "--out", train / f"{name}.jsonl", "--overwrite"])
        rows[name] = read_jsonl(train / f"{name}.jsonl")
    for name, ds in (("onpolicy", "ds_all"), ("offpolicy", "ds_offpolicy")):
        ours(["export", out / ds, CONFIG, "--split", "validation", "--format", "ids", "--no-text",
              "--out", val / f"{name}.jsonl", "--overwrite"])
    budget = min(loss_tokens(r) for r in rows.values())
    budgets = {}
    for name in CONDITIONS:
        cut = cut_to_budget(rows[name], budget)
        write_jsonl(train / f"{name}.cut.jsonl", cut)
        budgets[name] = {"rows_built": len(rows[name]), "supervised_built": loss_tokens(rows[name]), "rows": len(cut),
                         "supervised": loss_tokens(cut), "tokens": sum(len(r["input_ids"]) for r in cut)}
        print(f"  {name}: {budgets[name]}", flush=True)
    ours(["vocab", out / "ds_all", CONFIG, "--draft-vocab-size", args.draft_vocab_size, "--out", out / "vocab", "--overwrite"])
    vocab_size = json.loads((MODEL / "config.json").read_text())["vocab_size"]
    vocab = out / "vocab" / f"speculators-{vocab_size}-{args.draft_vocab_size}"

    # 3. speculators prepare-data, then our hidden states for exactly its rows.
    folders = {**{n: (train / f"{n}.cut.jsonl", f"ds_{n}", "train") for n in CONDITIONS},
               "val_onpolicy": (val / "onpolicy.jsonl", "ds_all", "validation"),
               "val_offpolicy": (val / "offpolicy.jsonl", "ds_offpolicy", "validation")}
    for name, (rows_file, ds, split) in folders.items():
        shutil.rmtree(prepared / name, ignore_errors=True)
        theirs(py, ["prepare-data", "--model", str(MODEL), "--data", str(rows_file), "--output", str(prepared / name),
                    "--seq-length", str(args.total_seq_len)], logs / f"prepare-{name}.log")
        ours(["hidden-states", out / ds, CONFIG, "--split", split, "--format", "speculators", "--prepared", prepared / name,
              "--model", MODEL, "--layers", *LAYERS, "--dtype", "float32", "--no-progress"])
    clock["export, prepare-data, hidden-states"] = time.perf_counter() - started - clock["builds"]

    # 4. Train each condition with each seed: the same steps; validation = the on-policy held-out rows.
    split = {n: merged(prepared / n, prepared / "val_onpolicy", mixes / n) for n in CONDITIONS}
    split["offpolicy_own"] = merged(prepared / "offpolicy", prepared / "val_offpolicy", mixes / "offpolicy_own")
    runs: dict[str, list[list[float]]] = {}
    plans = {}
    t_train = time.perf_counter()
    for seed in args.seeds:
        for name in CONDITIONS:
            n_train = budgets[name]["rows"]
            per_epoch = steps_per_epoch(py, mixes / name, n_train, args.total_seq_len, seed)
            epochs = next(e + 1 for e in range(len(per_epoch)) if sum(per_epoch[: e + 1]) >= args.steps)
            plans[f"{name}-{seed}"] = {"epochs": epochs, "steps_per_epoch": per_epoch[:epochs]}
            last = speculators_train(args, mixes / name, split[name][1], seed, drafters / f"{name}-{seed}", logs,
                                     f"train-{name}-{seed}", vocab,
                                     ["--epochs", str(epochs), "--max-steps", str(args.steps), "--lr", str(args.lr)])
            runs.setdefault(name, []).append(accuracies(last))
            print(f"  {name} seed {seed}: full_acc {accuracies(last)}", flush=True)
    clock["trainings"] = time.perf_counter() - t_train

    # 5. (a)'s drafters on (a)'s own held-out rows, and one check of that route against the trainer's
    # own figure: (c)'s first drafter on the on-policy rows it was validated on during training.
    t_eval = time.perf_counter()

    def evaluate(name: str, seed: int, data: str) -> list[float]:
        last = max((p for p in (drafters / f"{name}-{seed}").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
        checkpoint = float32_copy(last, out / "eval" / f"{name}-{seed}-float32")
        return accuracies(speculators_train(args, mixes / data, split[data][1], seed, out / "eval" / f"{name}-{seed}-{data}",
                                            logs, f"eval-{name}-{seed}-{data}", vocab,
                                            ["--from-pretrained", str(checkpoint), "--epochs", "1", "--max-steps", "1", "--lr", "0"]))

    runs["offpolicy on its own held-out rows"] = [evaluate("offpolicy", s, "offpolicy_own") for s in args.seeds]
    route_check = {"in training": runs["all"][0], "from the checkpoint": evaluate("all", args.seeds[0], "all")}
    clock["evaluations"] = time.perf_counter() - t_eval

    # 6. Served: each drafter by SGLang's EAGLE-3 on the held-out on-policy rows' prompts (greedy);
    # SGLang without speculation once, as the reference every output is checked against.
    served: dict[str, list[dict[str, Any]]] = {}
    t_served = time.perf_counter()
    if args.sglang_python.is_file():
        (out / "served").mkdir(exist_ok=True)
        for seed in args.seeds:
            for name in CONDITIONS:
                result = served_acceptance(args.sglang_python, out / "ds_all", saved_drafter(drafters / f"{name}-{seed}"),
                                           out / "served" / f"{name}-{seed}.json", logs / f"served-{name}-{seed}.log",
                                           baseline=not served)
                served.setdefault(name, []).append(result)
                print(f"  {name} seed {seed}: served acceptance length {result['acceptance_length']:.3f}", flush=True)
    else:
        print(f"bench_onpolicy: {args.sglang_python} is missing (make sglang-venv): no served column", flush=True)
    clock["served"] = time.perf_counter() - t_served
    clock["all"] = time.perf_counter() - started

    names = {"offpolicy": "(a) off-policy", "last": "(b) on-policy, --turns last", "all": "(c) on-policy, --turns all",
             "offpolicy on its own held-out rows": "(a) on its own held-out rows"}
    results = {"budget": budget, "budgets": budgets, "steps": args.steps, "seeds": args.seeds, "plans": plans,
               "held_out_rows": {"onpolicy": split["all"][0], "offpolicy": split["offpolicy_own"][0]},
               "runs": runs, "route_check": route_check, "seconds": clock,
               "eval": {names[n]: {**summary(r), "rows": budgets["offpolicy" if n.startswith("offpolicy") else n]["rows"],
                                   "served": served.get(n, [])}
                        for n, r in runs.items()}}
    (out / "results.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    print(f"\n{table(results)}\n\nsupervised tokens per condition: {budget}; {args.steps} steps; seeds {args.seeds}; "
          f"held-out rows: {results['held_out_rows']}; {clock['all']:.0f} s in all (results: {out / 'results.json'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
