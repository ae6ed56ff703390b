"""prompt_ids are exactly what the tokenizer's own chat template produces."""

from __future__ import annotations

import re

import pytest

from eagle3_synth.prompts.templating import ChatTokenizer
from eagle3_synth.prompts.conversation import Conversation

SPECIAL = re.compile(r"(<\|[a-z_]+\|>|</?think>)")


def encode_by_pieces(tokenizer, text: str) -> list[int]:
    """Expected ids built independently: special tokens by id, the text between them encoded alone."""
    ids: list[int] = []
    for piece in SPECIAL.split(text):
        if not piece:
            continue
        if SPECIAL.fullmatch(piece):
            ids.append(tokenizer.convert_tokens_to_ids(piece))
        else:
            ids.extend(tokenizer.encode(piece, add_special_tokens=False))
    return ids


def test_kimi_prompt_matches_template_and_ends_with_open_think(kimi_tokenizer):
    conversation = Conversation(messages=[{"role": "user", "content": "Hi there"}])
    ids = ChatTokenizer(kimi_tokenizer).prompt_ids(conversation)
    expected_text = (
        "<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI.<|im_end|>"
        "<|im_user|>user<|im_middle|>Hi there<|im_end|><|im_assistant|>assistant<|im_middle|><think>"
    )
    assert ids == encode_by_pieces(kimi_tokenizer, expected_text)
    tail = kimi_tokenizer.convert_ids_to_tokens(ids[-4:])
    assert tail[0] == "<|im_assistant|>" and tail[-2:] == ["<|im_middle|>", "<think>"]


def test_kimi_tools_and_history_are_templated(kimi_tokenizer):
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Zürich?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "functions.get_weather:0", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Zürich"}'}}]},
        {"role": "tool", "tool_call_id": "functions.get_weather:0", "name": "get_weather", "content": "12°C"},
        {"role": "user", "content": "Thanks"},
    ]
    ids = ChatTokenizer(kimi_tokenizer).prompt_ids(Conversation(messages=messages, tools=tools))
    rendered = kimi_tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True)
    assert rendered.startswith('<|im_system|>tool_declare<|im_middle|>[{"type":"function"')
    assert "<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>" in rendered
    assert "## Return of functions.get_weather:0\n12°C" in rendered
    assert ids == encode_by_pieces(kimi_tokenizer, rendered)


def test_template_kwargs_are_passed_through(kimi_tokenizer, qwen_tokenizer):
    conversation = Conversation(messages=[{"role": "user", "content": "Hi"}])
    kimi_ids = ChatTokenizer(kimi_tokenizer, {"thinking": False}).prompt_ids(conversation)
    assert kimi_tokenizer.convert_ids_to_tokens(kimi_ids[-2:]) == ["<think>", "</think>"]
    qwen_default = ChatTokenizer(qwen_tokenizer).prompt_ids(conversation)
    qwen_no_think = ChatTokenizer(qwen_tokenizer, {"enable_thinking": False}).prompt_ids(conversation)
    assert qwen_no_think[: len(qwen_default)] == qwen_default
    appended = qwen_tokenizer.convert_ids_to_tokens(qwen_no_think[len(qwen_default):])
    assert "<think>" in appended and "</think>" in appended


def test_qwen_prompt_ends_at_assistant_header(qwen_tokenizer):
    ids = ChatTokenizer(qwen_tokenizer).prompt_ids(Conversation(messages=[{"role": "user", "content": "Hi"}]))
    assert ids[-len(encode_by_pieces(qwen_tokenizer, "<|im_start|>assistant\n")):] == encode_by_pieces(
        qwen_tokenizer, "<|im_start|>assistant\n"
    )
    assert qwen_tokenizer.convert_tokens_to_ids("<think>") not in ids


def test_tokenizer_without_template_is_refused(kimi_tokenizer):
    import copy

    bare = copy.deepcopy(kimi_tokenizer)
    bare.chat_template = None
    with pytest.raises(ValueError, match="no chat_template"):
        ChatTokenizer(bare)
