"""Boundary columns where markers are several tokens: gpt-oss (harmony channels) and DeepSeek-V4 (DSML).

Outputs are encoded from text with the fixture tokenizers, as a model's ids would come out, so BPE
merges across marker edges happen as they do in real outputs (DSML's `>` + newline is one token).
"""

from __future__ import annotations

import pytest

from eagle3_synth.contract.row import find_boundaries, prompt_opens_reasoning
from eagle3_synth.prompts.templating import ChatTokenizer, load_tokenizer
from eagle3_synth.prompts.conversation import Conversation
from eagle3_synth.contract.profiles import PROFILES, resolve_markers

from ..conftest import FIXTURES

HARMONY = FIXTURES / "tokenizers" / "gpt_oss"
DSML = FIXTURES / "tokenizers" / "deepseek_v4"
CALL = '<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}<|call|>'


@pytest.fixture(scope="module")
def harmony():
    tokenizer = load_tokenizer(str(HARMONY))
    return tokenizer, resolve_markers(PROFILES["gpt_oss"], tokenizer)


@pytest.fixture(scope="module")
def dsml():
    tokenizer = load_tokenizer(str(DSML))
    return tokenizer, resolve_markers(PROFILES["deepseek_dsml"], tokenizer)


def bounds(tokenizer, markers, text: str, finish_reason: str = "stop", prompt_opens: bool = False):
    ids = tokenizer.encode(text, add_special_tokens=False)
    return ids, find_boundaries(ids, markers, prompt_opens=prompt_opens, finish_reason=finish_reason)


def index_of(tokenizer, ids: list[int], token: str, nth: int = 0) -> int:
    token_id = tokenizer.convert_tokens_to_ids(token)
    return [i for i, t in enumerate(ids) if t == token_id][nth]


def test_harmony_prompt_does_not_open_reasoning(harmony):
    tokenizer, markers = harmony
    chat = ChatTokenizer(tokenizer, template_date="2026-12-01")
    history = Conversation([{"role": "user", "content": "Weather?"},
                            {"role": "assistant", "thinking": "Need the tool.", "content": None, "tool_calls": [
                                {"id": "c0", "type": "function",
                                 "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
                            {"role": "tool", "tool_call_id": "c0", "name": "get_weather", "content": "sunny"}])
    for conversation in (Conversation([{"role": "user", "content": "Hi"}]), history):
        ids = chat.prompt_ids(conversation)
        assert tokenizer.decode(ids).endswith("<|start|>assistant")
        assert not prompt_opens_reasoning(ids, markers)


def test_harmony_reasoning_then_answer(harmony):
    tokenizer, markers = harmony
    ids, b = bounds(tokenizer, markers, "<|channel|>analysis<|message|>Think it over.<|end|>"
                                        "<|start|>assistant<|channel|>final<|message|>The answer.<|return|>")
    assert b.reasoning_start == 3  # after <|channel|>, analysis, <|message|>
    assert tokenizer.decode(ids[b.reasoning_start:b.think_end]) == "Think it over."
    assert b.think_end == index_of(tokenizer, ids, "<|end|>") and b.response_start == b.think_end + 1
    assert b.tool_calls == () and b.stop_index == len(ids) - 1


@pytest.mark.parametrize("header", [
    "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>",
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>",
])
def test_harmony_reasoning_then_a_call_spans_the_whole_call_message(harmony, header):
    tokenizer, markers = harmony
    ids, b = bounds(tokenizer, markers, f"<|channel|>analysis<|message|>Need the tool.<|end|>{header}"
                                        '{"city": "Paris"}<|call|>')
    start = index_of(tokenizer, ids, "<|start|>")
    assert [(c.start, c.end) for c in b.tool_calls] == [(start, len(ids) - 1)]
    assert b.response_start == b.think_end + 1 == start
    assert b.stop_index == len(ids) - 1


def test_harmony_two_calls_when_the_engine_did_not_stop_at_the_first(harmony):
    tokenizer, markers = harmony
    ids, b = bounds(tokenizer, markers, f"<|channel|>analysis<|message|>Two lookups.<|end|>{CALL}{CALL}",
                    finish_reason="length")
    starts = [i for i, t in enumerate(ids) if t == tokenizer.convert_tokens_to_ids("<|start|>")]
    ends = [i for i, t in enumerate(ids) if t == tokenizer.convert_tokens_to_ids("<|call|>")]
    assert [(c.start, c.end) for c in b.tool_calls] == list(zip(starts, ends))


def test_harmony_first_message_a_call_whose_header_began_in_the_prompt(harmony):
    tokenizer, markers = harmony
    ids, b = bounds(tokenizer, markers, ' to=functions.get_weather<|channel|>commentary json<|message|>{}<|call|>')
    assert [(c.start, c.end) for c in b.tool_calls] == [(0, len(ids) - 1)]
    assert (b.reasoning_start, b.think_end, b.response_start) == (-1, -1, 0)


def test_harmony_a_commentary_end_is_not_reasoning(harmony):
    tokenizer, markers = harmony
    ids, b = bounds(tokenizer, markers, f"<|channel|>commentary<|message|>Checking now.<|end|>{CALL}")
    assert (b.reasoning_start, b.think_end, b.response_start) == (-1, -1, 0)
    assert len(b.tool_calls) == 1 and b.tool_calls[0].end == len(ids) - 1


def test_harmony_cut_off_inside_a_call(harmony):
    tokenizer, markers = harmony
    ids, b = bounds(tokenizer, markers, '<|channel|>analysis<|message|>Need it.<|end|><|start|>assistant '
                                        'to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Pa',
                    finish_reason="length")
    assert [(c.start, c.end) for c in b.tool_calls] == [(index_of(tokenizer, ids, "<|start|>"), -1)]
    assert b.stop_index == -1


def test_harmony_cut_off_in_reasoning(harmony):
    tokenizer, markers = harmony
    ids, b = bounds(tokenizer, markers, "<|channel|>analysis<|message|>A long thought that never", "length")
    assert (b.reasoning_start, b.think_end, b.response_start, b.stop_index) == (3, -1, -1, -1)


def dsml_call(name: str, city: str) -> str:
    return (f'<｜DSML｜invoke name="{name}">\n<｜DSML｜parameter name="city" string="true">{city}'
            "</｜DSML｜parameter>\n</｜DSML｜invoke>\n")


def test_dsml_prompt_with_thinking_opens_reasoning(dsml):
    tokenizer, markers = dsml
    ids = ChatTokenizer(tokenizer, {"thinking": True}).prompt_ids(Conversation([{"role": "user", "content": "Hi"}]))
    assert tokenizer.decode(ids).endswith("<｜Assistant｜><think>") and prompt_opens_reasoning(ids, markers)
    ids = ChatTokenizer(tokenizer).prompt_ids(Conversation([{"role": "user", "content": "Hi"}]))
    assert not prompt_opens_reasoning(ids, markers)


def test_dsml_reasoning_then_answer(dsml):
    tokenizer, markers = dsml
    ids, b = bounds(tokenizer, markers, "Think it over.</think>The answer.<｜end▁of▁sentence｜>", prompt_opens=True)
    assert b.reasoning_start == 0 and b.think_end == index_of(tokenizer, ids, "</think>")
    assert b.response_start == b.think_end + 1 and b.tool_calls == ()


@pytest.mark.parametrize("calls", [1, 2])
def test_dsml_calls_end_on_the_merged_closing_token(dsml, calls):
    tokenizer, markers = dsml
    body = "".join(dsml_call("get_weather", city) for city in ["Paris", "Rome"][:calls])
    ids, b = bounds(tokenizer, markers, f"Need the tool.</think>\n\n<｜DSML｜tool_calls>\n{body}</｜DSML｜tool_calls>"
                                        "<｜end▁of▁sentence｜>", prompt_opens=True)
    dsml_id = tokenizer.convert_tokens_to_ids("｜DSML｜")
    assert len(b.tool_calls) == calls
    for call in b.tool_calls:
        assert ids[call.start + 1] == dsml_id and tokenizer.decode(ids[call.start:call.start + 3]) == "<｜DSML｜invoke"
        # The call's last token is `>` merged with the newline after it: one token, inside the span.
        assert tokenizer.decode([ids[call.end]]) == ">\n"
        assert tokenizer.decode(ids[call.start:call.end + 1]).endswith("</｜DSML｜invoke>\n")
    section = tokenizer.decode(ids[b.response_start:b.tool_calls[0].start])
    assert section == "\n\n<｜DSML｜tool_calls>\n"


def test_dsml_tool_section_before_the_close_ends_reasoning(dsml):
    tokenizer, markers = dsml
    ids, b = bounds(tokenizer, markers, f"Plan.\n<｜DSML｜tool_calls>\n{dsml_call('f', 'x')}</｜DSML｜tool_calls>"
                                        "<｜end▁of▁sentence｜>", prompt_opens=True)
    assert b.think_end == -1 and tokenizer.decode(ids[b.response_start:b.response_start + 2]) == "<｜DSML｜"


def test_dsml_cut_off_inside_a_call_and_in_reasoning(dsml):
    tokenizer, markers = dsml
    ids, b = bounds(tokenizer, markers, '</think><｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n'
                                        '<｜DSML｜parameter name="city" string="true">Pa', "length", prompt_opens=True)
    assert len(b.tool_calls) == 1 and b.tool_calls[0].end == -1 and b.stop_index == -1
    ids, b = bounds(tokenizer, markers, "A long thought that never", "length", prompt_opens=True)
    assert (b.reasoning_start, b.think_end, b.response_start) == (0, -1, -1)
