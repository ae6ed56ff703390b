"""The project's own fixtures behave as the rest of the tests assume.

Fixtures (rebuilt by ``scripts/make_fixture_tokenizers.py`` and ``scripts/train_tiny_model.py``):
``tests/fixtures/tokenizers/kimi_k25``, ``tests/fixtures/tokenizers/qwen3``, ``tests/fixtures/models/tiny-kimi``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")
from transformers import AutoTokenizer  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
KIMI = FIXTURES / "tokenizers" / "kimi_k25"
QWEN = FIXTURES / "tokenizers" / "qwen3"
TINY = FIXTURES / "models" / "tiny-kimi"

KIMI_MARKERS = [
    "[BOS]", "[EOS]", "[EOT]", "[PAD]", "<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>",
    "<|im_middle|>", "<think>", "</think>", "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
    "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>",
]
QWEN_MARKERS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
    "<tool_response>", "</tool_response>",
]

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_current_weather",
        "description": "Get the current weather for a location",
        "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]},
    },
}
CALL_ID = "functions.get_current_weather:0"
CONVERSATION = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What's the weather in Paris?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": CALL_ID, "type": "function",
             "function": {"name": "get_current_weather", "arguments": '{"location": "Paris"}'}},
        ],
    },
    {"role": "tool", "tool_call_id": CALL_ID, "name": "get_current_weather", "content": '{"temperature": 22}'},
]


@pytest.fixture(scope="module")
def kimi():
    return AutoTokenizer.from_pretrained(str(KIMI))


@pytest.fixture(scope="module")
def qwen():
    return AutoTokenizer.from_pretrained(str(QWEN))


def _prompt_ids(tok, messages, tools=None, **kwargs) -> list[int]:
    out = tok.apply_chat_template(messages, tools=tools, tokenize=True, add_generation_prompt=True, **kwargs)
    return list(out["input_ids"])  # transformers 5: a BatchEncoding, not a list


def _ids(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


# --------------------------------------------------------------------------------------------------
# tokenizers


@pytest.mark.parametrize("path,markers", [(KIMI, KIMI_MARKERS), (QWEN, QWEN_MARKERS)], ids=["kimi_k25", "qwen3"])
def test_markers_are_single_tokens(path, markers):
    tok = AutoTokenizer.from_pretrained(str(path))
    seen = set()
    for marker in markers:
        tid = tok.convert_tokens_to_ids(marker)
        assert isinstance(tid, int) and tid != tok.unk_token_id, marker
        assert _ids(tok, marker) == [tid], marker
        assert tid in _ids(tok, f"text before{marker}text after"), marker
        assert tok.decode([tid]) == marker
        seen.add(tid)
    assert len(seen) == len(markers)


def test_byte_level_encodes_anything(kimi, qwen):
    text = 'naïve café — 日本語 🎉 {"k": [1, 2]}\n\tdef f(): pass'
    assert kimi.decode(_ids(kimi, text)) == text
    assert qwen.decode(_ids(qwen, text)) == text  # already NFC; qwen3 normalizes to NFC like the real one


def test_kimi_special_token_roles(kimi):
    assert kimi.eos_token == "[EOS]"  # as in real Kimi: the end-of-turn <|im_end|> is NOT eos_token
    assert kimi.bos_token == "[BOS]"
    assert kimi.pad_token == "[PAD]"
    assert "<|im_end|>" in kimi.all_special_tokens
    assert _ids(kimi, "hi") == kimi("hi")["input_ids"]  # no BOS added implicitly


def test_qwen_special_token_roles(qwen):
    assert qwen.eos_token == "<|im_end|>"
    assert qwen.pad_token == "<|endoftext|>"
    assert qwen.bos_token is None
    # As in real Qwen3: reasoning/tool markers are added tokens but not "special" ones.
    assert "<think>" not in qwen.all_special_tokens
    think = qwen.convert_tokens_to_ids("<think>")
    assert qwen.decode([think], skip_special_tokens=True) == "<think>"


def test_kimi_generation_prompt(kimi):
    ids = _prompt_ids(kimi, [{"role": "user", "content": "Hello"}])
    tail = ["<|im_assistant|>", *kimi.convert_ids_to_tokens(_ids(kimi, "assistant")), "<|im_middle|>", "<think>"]
    assert kimi.convert_ids_to_tokens(ids[-len(tail):]) == tail
    off = _prompt_ids(kimi, [{"role": "user", "content": "Hello"}], thinking=False)
    assert kimi.convert_ids_to_tokens(off[-len(tail) - 1:]) == [*tail, "</think>"]
    assert off[:-1] == ids


def test_kimi_template_renders_like_kimi_k25(kimi):
    text = kimi.apply_chat_template(CONVERSATION, tools=[WEATHER_TOOL], tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|im_system|>tool_declare<|im_middle|>" + json.dumps([WEATHER_TOOL], separators=(",", ":")) + "<|im_end|>"
        "<|im_system|>system<|im_middle|>You are a helpful assistant.<|im_end|>"
        "<|im_user|>user<|im_middle|>What's the weather in Paris?<|im_end|>"
        "<|im_assistant|>assistant<|im_middle|><think></think>"
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_current_weather:0"
        '<|tool_call_argument_begin|>{"location": "Paris"}<|tool_call_end|><|tool_calls_section_end|><|im_end|>'
        "<|im_system|>tool<|im_middle|>## Return of functions.get_current_weather:0\n"
        '{"temperature": 22}<|im_end|>'
        "<|im_assistant|>assistant<|im_middle|><think>"
    )
    # Default system prompt; past reasoning dropped; ids generated for calls without one; dict arguments.
    history = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!", "reasoning_content": "greet back"},
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]},
    ]
    text = kimi.apply_chat_template(history, tokenize=False, add_generation_prompt=False)
    assert text == (
        "<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI.<|im_end|>"
        "<|im_user|>user<|im_middle|>Hi<|im_end|>"
        "<|im_assistant|>assistant<|im_middle|><think></think>Hello!<|im_end|>"
        "<|im_user|>user<|im_middle|>Weather?<|im_end|>"
        "<|im_assistant|>assistant<|im_middle|><think></think><|tool_calls_section_begin|>"
        '<|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{"a": 1}<|tool_call_end|>'
        "<|tool_calls_section_end|><|im_end|>"
    )


def test_qwen_generation_prompt(qwen):
    ids = _prompt_ids(qwen, [{"role": "user", "content": "Hello"}])
    tail = _ids(qwen, "<|im_start|>assistant\n")
    assert ids[-len(tail):] == tail
    off = _prompt_ids(qwen, [{"role": "user", "content": "Hello"}], enable_thinking=False)
    empty = _ids(qwen, "<think>\n\n</think>\n\n")
    assert off == ids + empty
    assert qwen.convert_ids_to_tokens(empty)[0] == "<think>" and "</think>" in qwen.convert_ids_to_tokens(empty)


def test_qwen_template_renders_like_qwen3(qwen):
    text = qwen.apply_chat_template(CONVERSATION, tools=[WEATHER_TOOL], tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\nYou are a helpful assistant.\n\n# Tools\n\n"
        "You may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        + json.dumps(WEATHER_TOOL) + "\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\nWhat's the weather in Paris?<|im_end|>\n"
        '<|im_start|>assistant\n<tool_call>\n{"name": "get_current_weather", "arguments": {"location": "Paris"}}\n'
        "</tool_call><|im_end|>\n"
        '<|im_start|>user\n<tool_response>\n{"temperature": 22}\n</tool_response><|im_end|>\n'
        "<|im_start|>assistant\n"
    )
    plain = qwen.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True)
    assert plain == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


@pytest.mark.slow
def test_tokenizer_fixtures_are_reproducible():
    script = ROOT / "scripts" / "make_fixture_tokenizers.py"
    done = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


# --------------------------------------------------------------------------------------------------
# tiny model


@pytest.fixture(scope="module")
def tiny():
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(TINY))
    model.eval()
    return torch, model, AutoTokenizer.from_pretrained(str(TINY))


def test_tiny_model_folder(tiny):
    _, model, tok = tiny
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        assert (TINY / name).read_bytes() == (KIMI / name).read_bytes(), name
    assert model.config.vocab_size == len(tok)
    im_end, eos = tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("[EOS]")
    assert im_end in model.generation_config.eos_token_id and eos in model.generation_config.eos_token_id
    assert im_end in model.config.eos_token_id
    assert (TINY / "model.safetensors").stat().st_size < 8 * 1024 * 1024


def test_tiny_model_samples_have_kimi_structure(tiny):
    torch, model, tok = tiny
    messages = [
        {"role": "system", "content": "You are a helpful assistant with access to the following functions."},
        {"role": "user", "content": "What's the weather like in Berlin right now?"},
    ]
    prompt = _prompt_ids(tok, messages, tools=[WEATHER_TOOL])
    im_end, think_end = tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("</think>")
    torch.manual_seed(0)
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
            do_sample=True, temperature=0.8, top_p=1.0, max_new_tokens=100, num_return_sequences=8,
        )
    good = 0
    for row in out[:, len(prompt):].tolist():
        if im_end in row:
            row = row[: row.index(im_end) + 1]
            good += think_end in row
    assert good >= 4, [tok.decode(r) for r in out[:, len(prompt):].tolist()]
