#!/usr/bin/env python
"""Train the tiny Kimi-style causal LM used by the tests and the CPU demo, reproducibly.

    python scripts/make_fixture_tokenizers.py     # first, if the tokenizer fixtures changed
    python scripts/train_tiny_model.py            # writes tests/fixtures/models/tiny-kimi/ (~3 min, 2 idle cores)
    python scripts/train_tiny_model.py --check    # retrain in a temp dir, compare weight hashes

The model is a 2-layer ``LlamaForCausalLM`` (hidden 128) over the ``kimi_k25`` fixture tokenizer's
vocabulary, trained on seeded synthetic Kimi-K2.5-style conversations (glaive-like function calling
with tools, general chat, math), rendered with the fixture's own chat template. Only the assistant
output is in the loss. Sampled from a prompt ending in ``<|im_assistant|>assistant<|im_middle|><think>``
it usually emits, in 20-80 tokens:

    some reasoning</think>a short answer<|im_end|>
    some reasoning</think><|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0
        <|tool_call_argument_begin|>{...}<|tool_call_end|><|tool_calls_section_end|><|im_end|>

It is a structural stand-in for Kimi-K2.5, not a language model: it knows nothing beyond the synthetic
data. ``config.eos_token_id`` and ``generation_config.eos_token_id`` list ``<|im_end|>`` first, then
``[EOS]`` (the tokenizer's ``eos_token``, as in real Kimi, is ``[EOS]``).

Reproducibility: fixed seeds, ``torch.use_deterministic_algorithms(True)`` and a fixed thread count
(``--threads``, default 2). Re-running with the same torch build on the same kind of CPU reproduces
the weights bit for bit (``--check``); a different torch version or CPU instruction set may change
the float rounding and so the weights, though not what the model has learned.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

# glibc returns big freed blocks to the OS and page-faults them back on every step, which makes this
# tiny model's training several times slower on some VMs. Keep freed memory in the heap instead (this
# changes speed only, never results): set the tunables and re-exec before torch allocates anything.
if __name__ == "__main__" and "MALLOC_MMAP_THRESHOLD_" not in os.environ:
    os.environ["MALLOC_MMAP_THRESHOLD_"] = str(1 << 40)
    os.environ["MALLOC_TRIM_THRESHOLD_"] = str(1 << 40)
    os.execv(sys.executable, [sys.executable, *sys.argv])

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _synthetic_conversations import Example, kimi_target_text, make_examples  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
TOKENIZER_DIR = REPO / "tests" / "fixtures" / "tokenizers" / "kimi_k25"
OUT_DIR = REPO / "tests" / "fixtures" / "models" / "tiny-kimi"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")

DATA_SEED = 1234
TORCH_SEED = 4321
N_TRAIN = 6000
N_EVAL = 48


def encode_example(tok, ex: Example) -> tuple[list[int], list[int]]:
    """(prompt ids, target ids) exactly as the pipeline would see them."""
    prompt = tok.apply_chat_template(
        ex.messages, tools=ex.tools, tokenize=True, add_generation_prompt=True, thinking=ex.thinking
    )["input_ids"]
    target = tok(kimi_target_text(ex), add_special_tokens=False)["input_ids"]
    return list(prompt), list(target)


def make_batches(encoded: list[tuple[list[int], list[int]]], batch_size: int, rng: random.Random) -> list[list[int]]:
    """Length-bucketed batches of indices, in a seeded random order."""
    order = sorted(range(len(encoded)), key=lambda i: (len(encoded[i][0]) + len(encoded[i][1]), i))
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    rng.shuffle(batches)
    return batches


def collate(encoded, idx: list[int], pad_id: int):
    """Right-padded ids and a mask of the positions whose *next* token is an output token.

    With right padding and causal attention no real token ever attends to a pad, so no attention
    mask is needed.
    """
    width = max(len(encoded[i][0]) + len(encoded[i][1]) for i in idx)
    input_ids = torch.full((len(idx), width), pad_id, dtype=torch.long)
    predict = torch.zeros((len(idx), width), dtype=torch.bool)
    for row, i in enumerate(idx):
        p, t = encoded[i]
        n = len(p) + len(t)
        input_ids[row, :n] = torch.tensor(p + t)
        predict[row, len(p) - 1 : n - 1] = True
    return input_ids, predict


def output_loss(model, input_ids: torch.Tensor, predict: torch.Tensor) -> torch.Tensor:
    """Causal-LM loss on the output tokens only; logits are computed only where they are needed."""
    hidden = model.model(input_ids=input_ids).last_hidden_state
    logits = model.lm_head(hidden[predict])
    targets = input_ids[:, 1:][predict[:, :-1]]
    return F.cross_entropy(logits, targets)


def build_model(tok):
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    ids = tok.convert_tokens_to_ids
    eos = [ids("<|im_end|>"), ids("[EOS]")]
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=128,
        intermediate_size=352,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=32768,
        rope_theta=50000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        bos_token_id=ids("[BOS]"),
        eos_token_id=eos,
        pad_token_id=ids("[PAD]"),
    )
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=ids("[BOS]"),
        eos_token_id=eos,
        pad_token_id=ids("[PAD]"),
        do_sample=True,
        temperature=0.8,
        top_p=0.95,
        max_new_tokens=128,
    )
    return model


@torch.no_grad()
def sample_stats(model, tok, examples: list[Example], seed: int, temperature: float = 0.8) -> dict:
    """Sample one output per example; count the structural properties we promise."""
    ids = tok.convert_tokens_to_ids
    im_end, think_end = ids("<|im_end|>"), ids("</think>")
    sec_b, sec_e = ids("<|tool_calls_section_begin|>"), ids("<|tool_calls_section_end|>")
    call_b, arg_b, call_e = ids("<|tool_call_begin|>"), ids("<|tool_call_argument_begin|>"), ids("<|tool_call_end|>")
    model.eval()
    torch.manual_seed(seed)
    stats = {"n": 0, "stop": 0, "think_end": 0, "calls_expected": 0, "calls_wellformed": 0, "lengths": []}
    outputs = []
    for ex in examples:
        prompt = tok.apply_chat_template(ex.messages, tools=ex.tools, tokenize=True, add_generation_prompt=True,
                                         thinking=ex.thinking)["input_ids"]
        out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                             do_sample=True, temperature=temperature, top_p=1.0, max_new_tokens=120)
        gen = out[0, len(prompt):].tolist()
        outputs.append(gen)
        stats["n"] += 1
        stats["lengths"].append(len(gen))
        stats["stop"] += bool(gen) and gen[-1] == im_end
        stats["think_end"] += (think_end in gen) or not ex.thinking
        if ex.tool_calls:
            stats["calls_expected"] += 1
            ok = False
            if sec_b in gen and sec_e in gen and call_b in gen and arg_b in gen and call_e in gen:
                args = tok.decode(gen[gen.index(arg_b) + 1 : gen.index(call_e)])
                try:
                    json.loads(args)
                    ok = True
                except ValueError:
                    ok = False
            stats["calls_wellformed"] += ok
    return stats, outputs


def train(out_dir: Path, threads: int, steps: int, batch_size: int, verbose: bool = True) -> dict:
    from transformers import AutoTokenizer

    torch.set_num_threads(threads)
    torch.set_flush_denormal(True)  # denormal floats make late CPU steps several times slower
    torch.use_deterministic_algorithms(True)
    random.seed(TORCH_SEED)
    torch.manual_seed(TORCH_SEED)

    t0 = time.time()
    tok = AutoTokenizer.from_pretrained(str(TOKENIZER_DIR))
    examples = make_examples(DATA_SEED, N_TRAIN + N_EVAL)
    train_ex, eval_ex = examples[:N_TRAIN], examples[N_TRAIN:]
    encoded = [encode_example(tok, ex) for ex in train_ex]
    if verbose:
        n_tok = sum(len(p) + len(t) for p, t in encoded)
        print(f"{len(encoded)} training examples, {n_tok} tokens ({time.time() - t0:.1f}s to build)")

    model = build_model(tok)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.01, eps=1e-8)
    warmup = max(1, steps // 20)

    def lr_at(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, steps - warmup)
        return 0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * progress))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    batch_rng = random.Random(DATA_SEED + 1)
    batches: list[list[int]] = []
    pad_id = tok.convert_tokens_to_ids("[PAD]")
    t1 = time.time()
    seen = 0
    for step in range(steps):
        if not batches:
            batches = make_batches(encoded, batch_size, batch_rng)
        input_ids, predict = collate(encoded, batches.pop(), pad_id)
        loss = output_loss(model, input_ids, predict)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        seen += int((input_ids != pad_id).sum())
        if verbose and (step % 50 == 0 or step == steps - 1):
            print(f"step {step:4d}  loss {loss.item():.4f}  lr {sched.get_last_lr()[0]:.2e}  "
                  f"{seen} tokens  {time.time() - t1:.0f}s")

    model.eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.iterdir():
        old.unlink()
    model.save_pretrained(str(out_dir))
    (out_dir / "model.safetensors").chmod(0o644)
    for name in TOKENIZER_FILES:
        shutil.copyfile(TOKENIZER_DIR / name, out_dir / name)

    stats, outputs = sample_stats(model, tok, eval_ex, seed=0)
    if verbose:
        n = stats["n"]
        print(f"trained in {time.time() - t0:.0f}s")
        print(f"held-out samples (T=0.8): {stats['stop']}/{n} end with <|im_end|>, {stats['think_end']}/{n} close "
              f"</think>, {stats['calls_wellformed']}/{stats['calls_expected']} expected tool calls well-formed, "
              f"mean length {sum(stats['lengths']) / n:.1f}")
        for gen in outputs[:3]:
            print("  ", repr(tok.decode(gen)))
    return stats


def weights_hash(path: Path) -> str:
    return hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=OUT_DIR)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--check", action="store_true", help="retrain in a temp dir and compare the weights with --out")
    args = ap.parse_args()
    if not args.check:
        train(args.out, args.threads, args.steps, args.batch_size)
        print(f"sha256(model.safetensors) = {weights_hash(args.out)}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        train(Path(tmp), args.threads, args.steps, args.batch_size, verbose=False)
        new, old = weights_hash(Path(tmp)), weights_hash(args.out)
    print(f"fresh {new}\nfixed {old}")
    if new != old:
        print("weights differ from a fresh training run")
        return 1
    print("weights match a fresh training run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
