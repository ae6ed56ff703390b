#!/usr/bin/env python
"""Build the two chat-tokenizer test fixtures (Kimi-K2.5 style and Qwen3 style) reproducibly.

    python scripts/make_fixture_tokenizers.py            # writes tests/fixtures/tokenizers/{kimi_k25,qwen3}/
    python scripts/make_fixture_tokenizers.py --check    # rebuilds in a temp dir, fails if anything differs

Each is a small byte-level BPE (no unknown token: any Unicode text encodes) trained with the
``tokenizers`` library on a seeded synthetic English/JSON/code corpus, plus the family's special
tokens appended at the end of the vocabulary (as in the real models, where they sit above the BPE
ids). Each marker encodes to exactly one id. The folders load offline with
``transformers.AutoTokenizer.from_pretrained(path)`` -- no ``trust_remote_code`` -- and carry a chat
template that renders like the real model's:

* kimi_k25: ``<|im_system|>tool_declare<|im_middle|>[tools]<|im_end|>``, a default system prompt, roles
  as ``<|im_user|>user<|im_middle|>...<|im_end|>``, history assistant turns as ``<think></think>content``
  plus a ``<|tool_calls_section_begin|>`` section, tool results ``## Return of <id>\\n<content>``; the
  generation prompt ends with ``<|im_assistant|>assistant<|im_middle|><think>`` (``<think></think>`` when
  the template kwarg ``thinking`` is false). ``eos_token`` is ``[EOS]``, not ``<|im_end|>``, as in Kimi.
* qwen3: tools in the system turn inside ``<tools></tools>``, ``<|im_start|>role\\n...<|im_end|>\\n``,
  ``<tool_call>`` JSON in assistant turns, tool results grouped in a user turn as ``<tool_response>``;
  the generation prompt is ``<|im_start|>assistant\\n`` (+ ``<think>\\n\\n</think>\\n\\n`` when
  ``enable_thinking=False``). ``eos_token`` is ``<|im_end|>``, ``pad_token`` ``<|endoftext|>``. As in the
  real Qwen3 vocabulary, ``<think>``, ``</think>``, ``<tool_call>``... are added tokens that are NOT
  special (``skip_special_tokens`` keeps them).
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

# --------------------------------------------------------------------------------------------------
# chat templates (jinja, rendered by transformers' sandboxed environment: trim_blocks, lstrip_blocks)

KIMI_K25_TEMPLATE = r"""{#- Kimi-K2.5-style chat template (test fixture). -#}
{%- macro render_content(msg) -%}
{%- set c = msg.get('content') -%}
{%- if c is string -%}{{- c -}}
{%- elif c is iterable and c is not mapping -%}
{%- for part in c -%}{%- if part is mapping and part.get('type') == 'text' -%}{{- part.get('text', '') -}}{%- endif -%}{%- endfor -%}
{%- endif -%}
{%- endmacro -%}
{%- if tools -%}
{{- '<|im_system|>tool_declare<|im_middle|>' -}}{{- tools | tojson(separators=(',', ':')) -}}{{- '<|im_end|>' -}}
{%- endif -%}
{%- if not messages or messages[0]['role'] != 'system' -%}
{{- '<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI.<|im_end|>' -}}
{%- endif -%}
{%- set ns = namespace(last_user=-1) -%}
{%- for m in messages -%}{%- if m['role'] == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}{%- endfor -%}
{%- for message in messages -%}
{%- set role = message['role'] -%}
{%- if role == 'user' -%}
{{- '<|im_user|>user<|im_middle|>' -}}{{- render_content(message) -}}
{%- elif role == 'assistant' -%}
{{- '<|im_assistant|>assistant<|im_middle|>' -}}
{#- Past reasoning is dropped; only turns after the last user message keep reasoning_content. -#}
{%- if loop.index0 > ns.last_user and not (thinking is defined and thinking is false) and message.get('reasoning_content') is string -%}
{{- '<think>' + message['reasoning_content'] + '</think>' -}}
{%- else -%}
{{- '<think></think>' -}}
{%- endif -%}
{{- render_content(message) -}}
{%- if message.get('tool_calls') -%}
{{- '<|tool_calls_section_begin|>' -}}
{%- for tc in message['tool_calls'] -%}
{%- set fn = tc.get('function') or tc -%}
{%- set call_id = tc.get('id') or ('functions.' ~ fn.get('name', '') ~ ':' ~ loop.index0) -%}
{%- set args = fn.get('arguments', {}) -%}
{{- '<|tool_call_begin|>' ~ call_id ~ '<|tool_call_argument_begin|>' -}}
{%- if args is string -%}{{- args -}}{%- else -%}{{- args | tojson -}}{%- endif -%}
{{- '<|tool_call_end|>' -}}
{%- endfor -%}
{{- '<|tool_calls_section_end|>' -}}
{%- endif -%}
{%- elif role == 'tool' -%}
{{- '<|im_system|>tool<|im_middle|>## Return of ' ~ (message.get('tool_call_id') or '') ~ '\n' -}}{{- render_content(message) -}}
{%- else -%}
{{- '<|im_system|>' ~ role ~ '<|im_middle|>' -}}{{- render_content(message) -}}
{%- endif -%}
{{- '<|im_end|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|im_assistant|>assistant<|im_middle|>' -}}
{%- if thinking is defined and thinking is false -%}{{- '<think></think>' -}}{%- else -%}{{- '<think>' -}}{%- endif -%}
{%- endif -%}
"""

QWEN3_TEMPLATE = r"""{#- Qwen3-style chat template (test fixture). -#}
{%- macro render_content(msg) -%}
{%- set c = msg.get('content') -%}
{%- if c is string -%}{{- c -}}
{%- elif c is iterable and c is not mapping -%}
{%- for part in c -%}{%- if part is mapping and part.get('type') == 'text' -%}{{- part.get('text', '') -}}{%- endif -%}{%- endfor -%}
{%- endif -%}
{%- endmacro -%}
{%- set has_system = messages and messages[0]['role'] == 'system' -%}
{%- if tools -%}
{{- '<|im_start|>system\n' -}}
{%- if has_system -%}{{- render_content(messages[0]) + '\n\n' -}}{%- endif -%}
{{- '# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>' -}}
{%- for tool in tools -%}{{- '\n' -}}{{- tool | tojson -}}{%- endfor -%}
{{- '\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' -}}
{%- elif has_system -%}
{{- '<|im_start|>system\n' + render_content(messages[0]) + '<|im_end|>\n' -}}
{%- endif -%}
{#- The last real user query: turns after it keep their reasoning. -#}
{%- set ns = namespace(last_query=messages | length - 1, searching=true) -%}
{%- for m in messages[::-1] -%}
{%- set idx = (messages | length - 1) - loop.index0 -%}
{%- if ns.searching and m['role'] == 'user' -%}
{%- set text = render_content(m) -%}
{%- if not (text.startswith('<tool_response>') and text.endswith('</tool_response>')) -%}
{%- set ns.searching = false -%}{%- set ns.last_query = idx -%}
{%- endif -%}
{%- endif -%}
{%- endfor -%}
{%- for message in messages -%}
{%- set role = message['role'] -%}
{%- if role == 'user' or (role == 'system' and not loop.first) -%}
{{- '<|im_start|>' + role + '\n' + render_content(message) + '<|im_end|>\n' -}}
{%- elif role == 'assistant' -%}
{%- set content = render_content(message) | string -%}
{%- set reasoning = '' -%}
{%- if message.get('reasoning_content') is string -%}
{%- set reasoning = message['reasoning_content'] -%}
{%- elif '</think>' in content -%}
{%- set reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') -%}
{%- set content = content.split('</think>')[-1].lstrip('\n') -%}
{%- endif -%}
{%- if loop.index0 > ns.last_query and (loop.last or reasoning) -%}
{{- '<|im_start|>assistant\n<think>\n' + reasoning.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') -}}
{%- else -%}
{{- '<|im_start|>assistant\n' + content -}}
{%- endif -%}
{%- for tc in message.get('tool_calls') or [] -%}
{%- if not loop.first or content -%}{{- '\n' -}}{%- endif -%}
{%- set fn = tc.get('function') or tc -%}
{%- set args = fn.get('arguments', {}) -%}
{{- '<tool_call>\n{"name": "' + fn.get('name', '') + '", "arguments": ' -}}
{%- if args is string -%}{{- args -}}{%- else -%}{{- args | tojson -}}{%- endif -%}
{{- '}\n</tool_call>' -}}
{%- endfor -%}
{{- '<|im_end|>\n' -}}
{%- elif role == 'tool' -%}
{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}
{{- '\n<tool_response>\n' + render_content(message) + '\n</tool_response>' -}}
{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' -%}{{- '<|im_end|>\n' -}}{%- endif -%}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|im_start|>assistant\n' -}}
{%- if enable_thinking is defined and enable_thinking is false -%}{{- '<think>\n\n</think>\n\n' -}}{%- endif -%}
{%- endif -%}
"""


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


def build(out_dir: Path) -> None:
    from transformers import PreTrainedTokenizerFast

    texts = corpus_texts(CORPUS_SEED, CORPUS_SIZE)

    specs = [
        ("kimi_k25", KIMI_SPLIT, 2048 - len(KIMI_ADDED), False, KIMI_ADDED, KIMI_K25_TEMPLATE,
         dict(bos_token="[BOS]", eos_token="[EOS]", pad_token="[PAD]")),
        ("qwen3", QWEN_SPLIT, 1536 - len(QWEN_ADDED), True, QWEN_ADDED, QWEN3_TEMPLATE,
         dict(bos_token=None, eos_token="<|im_end|>", pad_token="<|endoftext|>")),
    ]
    for name, split, vocab_size, nfc, added, template, named in specs:
        tok = _train_bpe(texts, split, vocab_size, nfc)
        _add_tokens(tok, added)
        named_set = {v for v in named.values() if v}
        extra = [t for t, special in added if special and t not in named_set]
        hf = PreTrainedTokenizerFast(
            tokenizer_object=tok,
            extra_special_tokens=extra,
            clean_up_tokenization_spaces=False,
            model_max_length=131072,
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
    args = ap.parse_args()
    if not args.check:
        build(args.out)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        build(Path(tmp))
        bad = []
        for name in ("kimi_k25", "qwen3"):
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
