#!/usr/bin/env python
"""Build the chat-tokenizer test fixtures under tests/fixtures/tokenizers/ reproducibly.

    python scripts/make_fixture_tokenizers.py            # writes every folder of FOLDERS
    python scripts/make_fixture_tokenizers.py --check    # rebuilds in a temp dir, fails if anything differs

Each vocabulary is a small byte-level BPE (no unknown token: any Unicode text encodes) trained with
the ``tokenizers`` library on a seeded synthetic English/JSON/code corpus (``corpus_texts``) -- for
the newer families plus texts in the family's own format (``_fixture_corpus.family_texts``) -- with
the family's special tokens appended at the end of the vocabulary (as in the real models, where they
sit above the BPE ids). Each marker encodes to exactly one id. The folders load offline with
``transformers.AutoTokenizer.from_pretrained(path)`` -- no ``trust_remote_code`` -- and carry a chat
template (``_fixture_templates``) that renders, accepts and rejects messages like the real model's:

* kimi_k25: ``<|im_system|>tool_declare<|im_middle|>[tools]<|im_end|>``, a default system prompt, roles
  as ``<|im_user|>user<|im_middle|>...<|im_end|>``, history assistant turns as ``<think></think>content``
  plus a ``<|tool_calls_section_begin|>`` section, tool results ``## Return of <id>\\n<content>``; the
  generation prompt ends with ``<|im_assistant|>assistant<|im_middle|><think>`` (``<think></think>`` when
  the template kwarg ``thinking`` is false). ``eos_token`` is ``[EOS]``, not ``<|im_end|>``, as in Kimi.
* kimi_k2_thinking: the kimi_k25 tokenizer; the generation prompt stops at ``<|im_middle|>``.
* qwen3: tools in the system turn inside ``<tools></tools>``, ``<|im_start|>role\\n...<|im_end|>\\n``,
  ``<tool_call>`` JSON in assistant turns (an assistant turn needs a ``content`` key), tool results grouped
  in a user turn as ``<tool_response>``; the generation prompt is ``<|im_start|>assistant\\n`` (+
  ``<think>\\n\\n</think>\\n\\n`` when ``enable_thinking=False``). ``eos_token`` is ``<|im_end|>``,
  ``pad_token`` ``<|endoftext|>``. As in the real Qwen3 vocabulary, ``<think>``, ``</think>``,
  ``<tool_call>``... are added tokens that are NOT special (``skip_special_tokens`` keeps them).
* qwen3_coder: the qwen3 tokenizer with Qwen3-Coder's XML tools and ``<function=...>`` calls.
* deepseek_v31, deepseek_r1, deepseek_v31_tojson, deepseek_v4: one DeepSeek-style vocabulary (full-width
  bars, ``▁``, ``｜DSML｜``); V3.1 / R1 / llama.cpp's V3.1 / DSML templates.
* gpt_oss: harmony tokens and template (eos ``<|return|>``).
* glm45: GLM-4.5 tokens and template (``[gMASK]<sop>``, ``<arg_key>``/``<arg_value>`` calls).
* minimax_m2: MiniMax-M2 tokens and template (``]~b]role``, ``[e~[``, ``<minimax:tool_call>``).
"""

from __future__ import annotations

import argparse
import filecmp
import os
import sys
import tempfile
from pathlib import Path

# Single-threaded, seeded: the BPE trainer's output must not depend on the machine.
os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _fixture_templates as T  # noqa: E402
from _fixture_corpus import family_texts  # noqa: E402
from _synthetic_conversations import corpus_texts  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
OUT_DIR = REPO / "tests" / "fixtures" / "tokenizers"
CORPUS_SEED = 20240917
CORPUS_SIZE = 6000

# GPT-4 / tiktoken-like split (Kimi's tiktoken pattern, without its Han-specific classes).
KIMI_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
GPT4_SPLIT = KIMI_SPLIT  # DeepSeek (fixture), GLM-4.5, MiniMax-M2: punctuation absorbs the newlines after it
# o200k (gpt-oss) split: case-aware words, punctuation absorbs newlines and '/'.
O200K_SPLIT = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Qwen2/Qwen3 split: single digits.
QWEN_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# (token, special) in id order; appended after the BPE vocabulary.
KIMI_ADDED = [
    ("[BOS]", True), ("[EOS]", True), ("<|im_end|>", True), ("<|im_user|>", True),
    ("<|im_assistant|>", True), ("<|im_system|>", True), ("<|im_middle|>", True), ("[EOT]", True),
    ("<think>", True), ("</think>", True),
    ("<|tool_calls_section_begin|>", True), ("<|tool_calls_section_end|>", True),
    ("<|tool_call_begin|>", True), ("<|tool_call_argument_begin|>", True), ("<|tool_call_end|>", True),
    ("[PAD]", True),
]
QWEN_ADDED = [
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
    ("<tool_call>", False), ("</tool_call>", False), ("<tool_response>", False), ("</tool_response>", False),
    ("<think>", False), ("</think>", False),
]
# As in DeepSeek's vocabulary: sentence bounds and pad are special; role, reasoning and tool markers are not.
DEEPSEEK_ADDED = [
    ("<｜begin▁of▁sentence｜>", True), ("<｜end▁of▁sentence｜>", True), ("<｜User｜>", False), ("<｜Assistant｜>", False),
    ("<think>", False), ("</think>", False), ("<｜tool▁calls▁begin｜>", False), ("<｜tool▁calls▁end｜>", False),
    ("<｜tool▁call▁begin｜>", False), ("<｜tool▁call▁end｜>", False), ("<｜tool▁sep｜>", False),
    ("<｜tool▁outputs▁begin｜>", False), ("<｜tool▁outputs▁end｜>", False), ("<｜tool▁output▁begin｜>", False),
    ("<｜tool▁output▁end｜>", False), ("｜DSML｜", False), ("<｜▁pad▁｜>", True),
]
HARMONY_ADDED = [
    ("<|startoftext|>", True), ("<|endoftext|>", True), ("<|start|>", True), ("<|end|>", True),
    ("<|message|>", True), ("<|channel|>", True), ("<|constrain|>", True), ("<|return|>", True), ("<|call|>", True),
]
GLM_ADDED = [
    ("<|endoftext|>", True), ("[gMASK]", True), ("<sop>", True), ("<|system|>", True), ("<|user|>", True),
    ("<|assistant|>", True), ("<|observation|>", True), ("<think>", True), ("</think>", True),
    ("<tool_call>", True), ("</tool_call>", True), ("<arg_key>", True), ("</arg_key>", True),
    ("<arg_value>", True), ("</arg_value>", True), ("<tool_response>", True), ("</tool_response>", True),
]
MINIMAX_ADDED = [
    ("]~!b[", True), ("]~b]", True), ("[e~[", True), ("<think>", True), ("</think>", True),
    ("<minimax:tool_call>", True), ("</minimax:tool_call>", True),
]

# name: (split, total vocabulary size, NFC, added tokens, trained on family-format texts too)
VOCABS = {
    "kimi": (KIMI_SPLIT, 2048, False, KIMI_ADDED, False),
    "qwen": (QWEN_SPLIT, 1536, True, QWEN_ADDED, False),
    "deepseek": (GPT4_SPLIT, 2048, False, DEEPSEEK_ADDED, True),
    "gpt_oss": (O200K_SPLIT, 2048, False, HARMONY_ADDED, True),
    "glm": (GPT4_SPLIT, 2048, False, GLM_ADDED, True),
    "minimax": (GPT4_SPLIT, 2048, False, MINIMAX_ADDED, True),
}
_KIMI = dict(bos_token="[BOS]", eos_token="[EOS]", pad_token="[PAD]")
_QWEN = dict(bos_token=None, eos_token="<|im_end|>", pad_token="<|endoftext|>")
_DEEPSEEK = dict(bos_token="<｜begin▁of▁sentence｜>", eos_token="<｜end▁of▁sentence｜>", pad_token="<｜▁pad▁｜>")
# folder: (vocabulary, chat template, named special tokens, model_max_length)
FOLDERS = {
    "kimi_k25": ("kimi", T.KIMI_K25_TEMPLATE, _KIMI, 131072),
    "qwen3": ("qwen", T.QWEN3_TEMPLATE, _QWEN, 131072),
    "kimi_k2_thinking": ("kimi", T.KIMI_K2_THINKING_TEMPLATE, _KIMI, 131072),
    "deepseek_v31": ("deepseek", T.DEEPSEEK_V31_TEMPLATE, _DEEPSEEK, 131072),
    "deepseek_r1": ("deepseek", T.DEEPSEEK_R1_TEMPLATE, _DEEPSEEK, 131072),
    "deepseek_v31_tojson": ("deepseek", T.DEEPSEEK_V31_TOJSON_TEMPLATE, _DEEPSEEK, 131072),
    "deepseek_v4": ("deepseek", T.DEEPSEEK_V4_TEMPLATE, _DEEPSEEK, 131072),
    "gpt_oss": ("gpt_oss", T.GPT_OSS_TEMPLATE,
                dict(bos_token="<|startoftext|>", eos_token="<|return|>", pad_token="<|endoftext|>"), 131072),
    "qwen3_coder": ("qwen", T.QWEN3_CODER_TEMPLATE, _QWEN, 262144),
    "glm45": ("glm", T.GLM45_TEMPLATE, dict(bos_token=None, eos_token="<|endoftext|>", pad_token="<|endoftext|>"),
              131072),
    "minimax_m2": ("minimax", T.MINIMAX_M2_TEMPLATE, dict(bos_token="]~!b[", eos_token="[e~[", pad_token="[e~["),
                   196608),
}

# --------------------------------------------------------------------------------------------------


def _train_bpe(texts: list[str], split: str, vocab_size: int, nfc: bool) -> Tokenizer:
    tok = Tokenizer(models.BPE())  # no unk_token: byte-level covers every input
    if nfc:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(split), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def _add_tokens(tok: Tokenizer, added: list[tuple[str, bool]]) -> None:
    for content, special in added:  # one at a time: ids follow list order
        t = AddedToken(content, special=special, normalized=False, single_word=False, lstrip=False, rstrip=False)
        n = tok.add_special_tokens([t]) if special else tok.add_tokens([t])
        assert n == 1, content


def build(out_dir: Path, folders: list[str] | None = None) -> None:
    from transformers import PreTrainedTokenizerFast

    texts = corpus_texts(CORPUS_SEED, CORPUS_SIZE)
    trained: dict[str, Tokenizer] = {}
    for name in folders or list(FOLDERS):
        vocab, template, named, max_length = FOLDERS[name]
        split, total, nfc, added, family = VOCABS[vocab]
        if vocab not in trained:
            extra_texts = family_texts(vocab, [t for t, _ in added]) if family else []
            tok = _train_bpe(texts + extra_texts, split, total - len(added), nfc)
            _add_tokens(tok, added)
            trained[vocab] = tok
        tok = Tokenizer.from_str(trained[vocab].to_str())  # a fresh copy per folder
        named_set = {v for v in named.values() if v}
        extra = [t for t, special in added if special and t not in named_set]
        hf = PreTrainedTokenizerFast(
            tokenizer_object=tok,
            extra_special_tokens=extra,
            clean_up_tokenization_spaces=False,
            model_max_length=max_length,
            **named,
        )
        hf.chat_template = template
        target = out_dir / name
        target.mkdir(parents=True, exist_ok=True)
        for old in target.iterdir():
            old.unlink()
        hf.save_pretrained(str(target))
        print(f"{name}: {len(hf)} tokens -> {target}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=OUT_DIR)
    ap.add_argument("--check", action="store_true", help="rebuild in a temp dir and compare with --out")
    ap.add_argument("folders", nargs="*", metavar="FOLDER", help=f"only these (default: all of {', '.join(FOLDERS)})")
    args = ap.parse_args()
    folders = args.folders or list(FOLDERS)
    if unknown := [f for f in folders if f not in FOLDERS]:
        ap.error(f"unknown folder(s) {', '.join(unknown)}; choose from {', '.join(FOLDERS)}")
    if not args.check:
        build(args.out, folders)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        build(Path(tmp), folders)
        bad = []
        for name in folders:
            cmp = filecmp.dircmp(Path(tmp) / name, args.out / name)
            bad += [f"{name}/{f}" for f in cmp.diff_files + cmp.left_only + cmp.right_only]
            _, mismatch, errors = filecmp.cmpfiles(Path(tmp) / name, args.out / name, cmp.common_files, shallow=False)
            bad += [f"{name}/{f}" for f in mismatch + errors]
        if bad:
            print("differs from a fresh build:", ", ".join(sorted(set(bad))))
            return 1
        print("fixtures match a fresh build")
    return 0


if __name__ == "__main__":
    sys.exit(main())
