"""Every boundary rule of the data contract, on hand-written output ids, for both profiles."""

from __future__ import annotations

import pytest

from eagle3_synth.contract.row import ToolCallSpan, find_boundaries, prompt_opens_reasoning


class Ids:
    """Builds id lists from marker names and text, with the fixture tokenizer's real ids."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def __call__(self, *parts: str) -> list[int]:
        ids: list[int] = []
        for part in parts:
            token_id = self.tokenizer.convert_tokens_to_ids(part)
            if part.startswith(("<", "[")) and token_id is not None and token_id != self.tokenizer.unk_token_id:
                ids.append(token_id)
            else:
                ids.extend(self.tokenizer.encode(part, add_special_tokens=False))
        return ids


@pytest.fixture
def kimi(kimi_tokenizer):
    return Ids(kimi_tokenizer)


@pytest.fixture
def qwen(qwen_tokenizer):
    return Ids(qwen_tokenizer)


def positions(ids: list[int], token: int) -> list[int]:
    return [i for i, t in enumerate(ids) if t == token]


def test_kimi_prompt_opens_reasoning(kimi, kimi_markers):
    prompt = kimi("<|im_user|>", "user", "<|im_middle|>", "hi", "<|im_end|>", "<|im_assistant|>", "assistant",
                  "<|im_middle|>", "<think>")
    assert prompt_opens_reasoning(prompt, kimi_markers)
    output = kimi("Let me think.", "</think>", "Hello!", "<|im_end|>")
    b = find_boundaries(output, kimi_markers, prompt_opens=True, finish_reason="stop")
    think_end = output.index(kimi_markers.reasoning_close.id)
    assert (b.reasoning_start, b.think_end, b.response_start) == (0, think_end, think_end + 1)
    assert b.stop_index == len(output) - 1 and output[b.stop_index] in kimi_markers.stop_ids
    assert b.tool_calls == ()


def test_closed_history_does_not_open_reasoning(kimi, kimi_markers):
    # An earlier assistant turn rendered as <think></think>, and a thinking=False prompt.
    prompt = kimi("<|im_assistant|>", "assistant", "<|im_middle|>", "<think>", "</think>", "ok", "<|im_end|>",
                  "<|im_assistant|>", "assistant", "<|im_middle|>", "<think>", "</think>")
    assert not prompt_opens_reasoning(prompt, kimi_markers)


def test_qwen_model_emits_open_marker(qwen, qwen_markers):
    prompt = qwen("<|im_start|>", "user\nhi", "<|im_end|>", "\n", "<|im_start|>", "assistant\n")
    assert not prompt_opens_reasoning(prompt, qwen_markers)
    output = qwen("<think>", "\nhmm\n", "</think>", "\n\nHi there.", "<|im_end|>")
    b = find_boundaries(output, qwen_markers, prompt_opens=False, finish_reason="stop")
    think_end = output.index(qwen_markers.reasoning_close.id)
    assert b.reasoning_start == 1
    assert b.think_end == think_end and b.response_start == think_end + 1
    assert b.stop_index == len(output) - 1


def test_qwen_prefilled_think_with_newline_counts_as_open(qwen, qwen_markers):
    # Qwen3-Thinking-2507 templates end the generation prompt with "<think>\n".
    prompt = qwen("<|im_start|>", "assistant\n", "<think>", "\n")
    assert prompt_opens_reasoning(prompt, qwen_markers)


def test_kimi_tool_section_before_close_ends_reasoning_implicitly(kimi, kimi_markers):
    output = kimi("I should call the tool", "<|tool_calls_section_begin|>", "<|tool_call_begin|>",
                  "functions.get_weather:0", "<|tool_call_argument_begin|>", '{"city": "Paris"}',
                  "<|tool_call_end|>", "<|tool_calls_section_end|>", "<|im_end|>")
    b = find_boundaries(output, kimi_markers, prompt_opens=True, finish_reason="stop")
    assert b.reasoning_start == 0 and b.think_end == -1
    assert b.response_start == output.index(kimi_markers.tool_section_begin.id)
    begin = output.index(kimi_markers.tool_call_begin.id)
    end = output.index(kimi_markers.tool_call_end.id)
    assert b.tool_calls == (ToolCallSpan(begin, end),)


def test_truncated_inside_reasoning(kimi, kimi_markers):
    output = kimi("Still thinking about this and")
    b = find_boundaries(output, kimi_markers, prompt_opens=True, finish_reason="length")
    assert (b.reasoning_start, b.think_end, b.response_start, b.stop_index) == (0, -1, -1, -1)


def test_truncated_inside_tool_call(kimi, kimi_markers):
    output = kimi("plan", "</think>", "<|tool_calls_section_begin|>", "<|tool_call_begin|>", "functions.f:0",
                  "<|tool_call_argument_begin|>", '{"a": ')
    b = find_boundaries(output, kimi_markers, prompt_opens=True, finish_reason="length")
    assert b.tool_calls == (ToolCallSpan(output.index(kimi_markers.tool_call_begin.id), -1),)
    assert b.stop_index == -1 and b.think_end == output.index(kimi_markers.reasoning_close.id)


def test_several_tool_calls(kimi, kimi_markers):
    call = ("<|tool_call_begin|>", "functions.f:0", "<|tool_call_argument_begin|>", "{}", "<|tool_call_end|>")
    output = kimi("plan", "</think>", "<|tool_calls_section_begin|>", *call, *call, *call,
                  "<|tool_calls_section_end|>", "<|im_end|>")
    b = find_boundaries(output, kimi_markers, prompt_opens=True, finish_reason="stop")
    begins = positions(output, kimi_markers.tool_call_begin.id)
    ends = positions(output, kimi_markers.tool_call_end.id)
    assert len(begins) == 3
    assert b.tool_calls == tuple(ToolCallSpan(s, e) for s, e in zip(begins, ends))


def test_qwen_tool_calls_without_section_marker(qwen, qwen_markers):
    output = qwen("<think>", "need weather", "</think>", "\n\n", "<tool_call>", '\n{"name": "w", "arguments": {}}\n',
                  "</tool_call>", "\n", "<tool_call>", '\n{"name": "x", "arguments": {}}\n', "</tool_call>", "<|im_end|>")
    b = find_boundaries(output, qwen_markers, prompt_opens=False, finish_reason="stop")
    begins = positions(output, qwen_markers.tool_call_begin.id)
    ends = positions(output, qwen_markers.tool_call_end.id)
    assert b.tool_calls == tuple(ToolCallSpan(s, e) for s, e in zip(begins, ends))
    assert b.response_start == output.index(qwen_markers.reasoning_close.id) + 1


def test_qwen_tool_call_before_close_ends_reasoning(qwen, qwen_markers):
    output = qwen("<think>", "call it", "<tool_call>", '{"name": "w"}', "</tool_call>", "<|im_end|>")
    b = find_boundaries(output, qwen_markers, prompt_opens=False, finish_reason="stop")
    assert b.reasoning_start == 1 and b.think_end == -1
    assert b.response_start == output.index(qwen_markers.tool_call_begin.id)


@pytest.mark.parametrize("profile", ["kimi", "qwen"])
def test_no_reasoning_at_all(profile, request):
    ids = request.getfixturevalue(profile)
    markers = request.getfixturevalue(f"{profile}_markers")
    output = ids("Just an answer.", "<|im_end|>")
    b = find_boundaries(output, markers, prompt_opens=False, finish_reason="stop")
    assert (b.reasoning_start, b.think_end, b.response_start) == (-1, -1, 0)
    assert b.stop_index == len(output) - 1


def test_close_without_open_means_implicit_open(qwen, qwen_markers):
    # DeepSeek-R1-style: the template opened reasoning without a marker the prompt shows.
    output = qwen("thinking", "</think>", "answer", "<|im_end|>")
    b = find_boundaries(output, qwen_markers, prompt_opens=False, finish_reason="stop")
    assert b.reasoning_start == 0 and b.response_start == b.think_end + 1


def test_abort_and_empty_output(kimi_markers):
    b = find_boundaries([], kimi_markers, prompt_opens=True, finish_reason="abort")
    assert (b.reasoning_start, b.think_end, b.response_start, b.stop_index, b.tool_calls) == (0, -1, -1, -1, ())
