"""A generated turn as its history message, per fixture family, and back through the family's template.

Outputs are written as the model writes them (text encoded with the fixture tokenizer, so BPE merges
across multi-token marker edges happen as in real outputs), each call in the layout the family's
template renders, so the round trip can ask for the call's exact text in the rendered history.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass

import pytest

from eagle3_synth.contract.row import find_boundaries, prompt_opens_reasoning
from eagle3_synth.contract.profiles import PROFILES, resolve_markers
from eagle3_synth.prompts.conversation import Conversation
from eagle3_synth.prompts.history import history_message
from eagle3_synth.prompts.templating import ChatTokenizer, load_tokenizer

from ..support.families import EXPECTED, TOKENIZERS

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}}]
CALLS = [("Paris", 3), ("Rome", 5)]
REASONING = "Need the weather first."
ANSWER = "It is 4."
PREAMBLE = "Checking."


def arguments(city: str, days: int) -> str:
    return json.dumps({"city": city, "days": days})


@dataclass(frozen=True)
class Family:
    """How one family's model writes a turn (its fixture template's layout)."""

    opens: bool  # the generation prompt opened reasoning (the output has no open marker)
    open: str
    close: str
    answer: str  # after the close marker, stop token included
    call: str  # one call; {city}, {days}, {args} (JSON), {n} (index)
    stop: str = ""  # after the calls
    section: tuple[str, str] = ("", "")
    joiner: str = ""  # between two calls
    preamble: str = PREAMBLE  # content before the calls ("" where the template renders none)
    two_calls: bool = True
    keeps_reasoning: dict | None = None  # template kwargs with which a turn after the last user keeps it


KIMI = Family(True, "", "</think>", "It is 4.<|im_end|>",
              "<|tool_call_begin|>functions.get_weather:{n}<|tool_call_argument_begin|>{args}<|tool_call_end|>",
              "<|im_end|>", ("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"), keeps_reasoning={})
QWEN3 = Family(False, "<think>\n", "\n</think>\n\n", "It is 4.<|im_end|>",
               '<tool_call>\n{{"name": "get_weather", "arguments": {args}}}\n</tool_call>', "<|im_end|>",
               joiner="\n", preamble=PREAMBLE + "\n", keeps_reasoning={})
DEEPSEEK_V31 = Family(True, "", "</think>", "It is 4.<｜end▁of▁sentence｜>",
                      "<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{args}<｜tool▁call▁end｜>", "<｜end▁of▁sentence｜>",
                      ("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"))
FAMILIES = {
    "kimi_k25": KIMI,
    "kimi_k2_thinking": dataclasses.replace(KIMI, opens=False, open="<think>"),
    "qwen3": QWEN3,
    "qwen3_coder": dataclasses.replace(
        QWEN3, keeps_reasoning=None,
        call="<tool_call>\n<function=get_weather>\n<parameter=city>\n{city}\n</parameter>\n<parameter=days>\n{days}\n"
             "</parameter>\n</function>\n</tool_call>"),
    "deepseek_v31": DEEPSEEK_V31,
    "deepseek_v31_tojson": DEEPSEEK_V31,
    "deepseek_r1": dataclasses.replace(
        DEEPSEEK_V31, joiner="\n",
        call="<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{args}\n```<｜tool▁call▁end｜>"),
    "deepseek_v4": Family(
        True, "", "</think>", "It is 4.<｜end▁of▁sentence｜>",
        '<｜DSML｜invoke name="get_weather">\n<｜DSML｜parameter name="city" string="true">{city}</｜DSML｜parameter>\n'
        '<｜DSML｜parameter name="days" string="false">{days}</｜DSML｜parameter>\n</｜DSML｜invoke>\n',
        "<｜end▁of▁sentence｜>", ("\n\n<｜DSML｜tool_calls>\n", "</｜DSML｜tool_calls>"),
        keeps_reasoning={"thinking": True}),
    "gpt_oss": Family(
        False, "<|channel|>analysis<|message|>", "<|end|>",
        "<|start|>assistant<|channel|>final<|message|>It is 4.<|return|>",
        "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{args}<|call|>",
        preamble="", two_calls=False, keeps_reasoning={}),
    "glm45": Family(
        False, "<think>", "</think>", "\nIt is 4.<|user|>",
        "\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>{city}</arg_value>\n<arg_key>days</arg_key>\n"
        "<arg_value>{days}</arg_value>\n</tool_call>", "<|observation|>", preamble="\n" + PREAMBLE, keeps_reasoning={}),
    "minimax_m2": Family(
        True, "", "\n</think>\n\n", "It is 4.[e~[",
        '<invoke name="get_weather">\n<parameter name="city">{city}</parameter>\n<parameter name="days">{days}'
        "</parameter>\n</invoke>\n", "[e~[", ("\n<minimax:tool_call>\n", "</minimax:tool_call>"), keeps_reasoning={}),
}
assert set(FAMILIES) == set(EXPECTED)


def call_text(family: Family, n: int) -> str:
    city, days = CALLS[n]
    return family.call.format(city=city, days=days, args=arguments(city, days), n=n)


def write(family: Family, shape: str) -> tuple[str, str]:
    """(output text, finish reason) of one shape: answer, one_call, two_calls, cut_off."""
    head = family.open + REASONING + family.close
    if shape == "answer":
        return head + family.answer, "stop"
    begin, end = family.section
    if shape == "cut_off":
        first = call_text(family, 0)
        return head + family.preamble + begin + first[: first.index("Paris") + 2], "length"
    calls = family.joiner.join(call_text(family, n) for n in range(2 if shape == "two_calls" else 1))
    return head + family.preamble + begin + calls + end + family.stop, "stop"


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request):
    folder = request.param
    tokenizer = load_tokenizer(str(TOKENIZERS / folder))
    profile = PROFILES[EXPECTED[folder][0]]
    return folder, FAMILIES[folder], tokenizer, profile, resolve_markers(profile, tokenizer)


def generate(family, shape: str, tools=TOOLS) -> tuple[dict, list[int]]:
    _, spec, tokenizer, profile, markers = family
    text, finish = write(spec, shape)
    ids = tokenizer.encode(text, add_special_tokens=False)
    boundaries = find_boundaries(ids, markers, prompt_opens=spec.opens, finish_reason=finish)
    return history_message(ids, boundaries, tokenizer, markers, profile, tools=tools), ids


def expected_id(folder: str, n: int) -> str:
    return f"functions.get_weather:{n}" if folder.startswith("kimi") else f"call_{n}"


SHAPES = ["answer", "one_call", "two_calls", "cut_off"]


def test_each_family_writes_after_its_own_generation_prompt(family):
    """The outputs above start where the fixture template's generation prompt (reasoning on) ends."""
    folder, spec, tokenizer, profile, markers = family
    kwargs = {"thinking": True} if folder.startswith("deepseek") else {}
    ids = ChatTokenizer(tokenizer, kwargs, profile=profile).prompt_ids(Conversation([{"role": "user", "content": "Hi"}]))
    assert prompt_opens_reasoning(ids, markers) == spec.opens


@pytest.mark.parametrize("shape", SHAPES)
def test_history_message_of_each_shape(family, shape):
    folder, spec, _, profile, _ = family
    if shape == "two_calls" and not spec.two_calls:
        pytest.skip("one call per message: the engine stops at <|call|>")
    message, _ = generate(family, shape)
    field = profile.reasoning_field
    assert field == ("thinking" if folder == "gpt_oss" else "reasoning_content")
    calls = {"answer": 0, "one_call": 1, "two_calls": 2, "cut_off": 0}[shape]
    expected = {"role": "assistant", "content": ANSWER if shape == "answer" else spec.preamble.strip(), field: REASONING}
    if calls:
        expected["tool_calls"] = [
            {"id": expected_id(folder, n), "type": "function",
             "function": {"name": "get_weather", "arguments": arguments(*CALLS[n])}} for n in range(calls)]
    assert message == expected


def test_xml_parameters_without_the_tools_are_read_as_each_parser_reads_them(family):
    folder = family[0]
    message, _ = generate(family, "one_call", tools=None)
    days = json.loads(message["tool_calls"][0]["function"]["arguments"])["days"]
    # Qwen3-Coder and MiniMax keep untyped values as text; GLM reads them as JSON; DSML says string="false".
    assert days == ("3" if folder in ("qwen3_coder", "minimax_m2") else 3)


def render(family, messages: list[dict], kwargs: dict | None = None) -> str:
    _, _, tokenizer, profile, _ = family
    chat = ChatTokenizer(tokenizer, kwargs, profile=profile)
    return chat.render(Conversation(messages, TOOLS))


def results(message: dict) -> list[dict]:
    return [{"role": "tool", "tool_call_id": call["id"], "name": call["function"]["name"], "content": "sunny"}
            for call in message.get("tool_calls", [])]


@pytest.mark.parametrize("shape", ["answer", "one_call", "two_calls"])
def test_the_history_turn_renders_as_the_model_wrote_it(family, shape):
    folder, spec, _, _, _ = family
    if shape == "two_calls" and not spec.two_calls:
        pytest.skip("one call per message")
    message, _ = generate(family, shape)
    user = {"role": "user", "content": "Weather in Paris?"}
    text = render(family, [user, message, *results(message), {"role": "user", "content": "Thanks."}])
    turn = text[text.index("Weather in Paris?") + len("Weather in Paris?"):]
    if shape == "answer":
        assert message["content"] in turn
        return
    for n, call in enumerate(message["tool_calls"]):
        assert call_text(spec, n) in turn, (folder, call_text(spec, n), turn)
    if spec.preamble:
        assert PREAMBLE in turn
    if folder == "qwen3":  # the rendered <tool_call> JSON is the generated call
        rendered = [json.loads(body) for body in re.findall(r"<tool_call>\n(.*?)\n</tool_call>", turn, re.DOTALL)]
        assert rendered == [{"name": "get_weather", "arguments": json.loads(arguments(*CALLS[n]))}
                            for n in range(len(message["tool_calls"]))]


def test_reasoning_of_a_turn_in_progress_is_rendered_where_the_template_keeps_it(family):
    folder, spec, _, profile, _ = family
    if spec.keeps_reasoning is None:
        pytest.skip("this template drops earlier reasoning")
    message, _ = generate(family, "one_call")
    text = render(family, [{"role": "user", "content": "Weather?"}, message, *results(message)], spec.keeps_reasoning)
    assert REASONING in text and call_text(spec, 0) in text, folder


def test_a_profile_without_a_parser_keeps_each_call_as_its_raw_text():
    tokenizer = load_tokenizer(str(TOKENIZERS / "qwen3"))
    profile = dataclasses.replace(PROFILES["qwen3"], name="my_family")
    markers = resolve_markers(profile, tokenizer)
    text, finish = write(QWEN3, "two_calls")
    ids = tokenizer.encode(text, add_special_tokens=False)
    message = history_message(ids, find_boundaries(ids, markers, prompt_opens=False, finish_reason=finish),
                              tokenizer, markers, profile)
    assert message["reasoning_content"] == REASONING and message["content"] == PREAMBLE
    bodies = [call_text(QWEN3, n).removeprefix("<tool_call>").removesuffix("</tool_call>") for n in range(2)]
    assert message["tool_calls"] == [{"id": f"call_{n}", "type": "function", "function": {"name": "", "arguments": body}}
                                     for n, body in enumerate(bodies)]


def test_reasoning_cut_off_and_reasoning_ended_by_a_tool_section(family):
    folder, spec, tokenizer, profile, markers = family
    text = spec.open + REASONING + " and more"
    ids = tokenizer.encode(text, add_special_tokens=False)
    message = history_message(ids, find_boundaries(ids, markers, prompt_opens=spec.opens, finish_reason="length"),
                              tokenizer, markers, profile)
    assert message == {"role": "assistant", "content": "", profile.reasoning_field: REASONING + " and more"}
    if not folder.startswith("kimi"):
        return
    # Kimi opens its tool section before </think>: reasoning ends there, the call is kept.
    text = spec.open + REASONING + spec.section[0] + call_text(spec, 0) + spec.section[1] + spec.stop
    ids = tokenizer.encode(text, add_special_tokens=False)
    message = history_message(ids, find_boundaries(ids, markers, prompt_opens=spec.opens, finish_reason="stop"),
                              tokenizer, markers, profile)
    assert message["reasoning_content"] == REASONING and message["content"] == ""
    assert message["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": arguments(*CALLS[0])}


def test_first_call_index_numbers_the_ids():
    tokenizer = load_tokenizer(str(TOKENIZERS / "qwen3"))
    profile = PROFILES["qwen3"]
    markers = resolve_markers(profile, tokenizer)
    text, finish = write(QWEN3, "two_calls")
    ids = tokenizer.encode(text, add_special_tokens=False)
    message = history_message(ids, find_boundaries(ids, markers, prompt_opens=False, finish_reason=finish),
                              tokenizer, markers, profile, first_call_index=4)
    assert [call["id"] for call in message["tool_calls"]] == ["call_4", "call_5"]


def test_a_harmony_call_whose_name_merged_into_the_begin_marker():
    """`functions.calculate`: the marker's last token is `.calculate` -- the name is not lost."""
    tokenizer = load_tokenizer(str(TOKENIZERS / "gpt_oss"))
    profile = PROFILES["gpt_oss"]
    markers = resolve_markers(profile, tokenizer)
    text = ('<|channel|>analysis<|message|>Add them.<|end|><|start|>assistant to=functions.calculate<|channel|>'
            'commentary json<|message|>{"expression": "2+2"}<|call|>')
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.convert_tokens_to_ids(".calculate") in ids
    message = history_message(ids, find_boundaries(ids, markers, prompt_opens=False, finish_reason="stop"),
                              tokenizer, markers, profile)
    assert message["thinking"] == "Add them." and message["content"] == ""
    assert message["tool_calls"][0]["function"] == {"name": "calculate", "arguments": '{"expression": "2+2"}'}


def test_a_kimi_call_with_a_bare_counter_id_takes_its_name_from_the_tools():
    tokenizer = load_tokenizer(str(TOKENIZERS / "kimi_k25"))
    profile = PROFILES["kimi_k2"]
    markers = resolve_markers(profile, tokenizer)
    text = ("Look it up.</think><|tool_calls_section_begin|><|tool_call_begin|>3<|tool_call_argument_begin|>"
            '{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|><|im_end|>')
    ids = tokenizer.encode(text, add_special_tokens=False)
    boundaries = find_boundaries(ids, markers, prompt_opens=True, finish_reason="stop")
    other = {"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"zone": {"type": "string"}}}}}
    for tools, name in ((TOOLS, "get_weather"), ([other, *TOOLS], "get_weather"), (None, "")):
        call = history_message(ids, boundaries, tokenizer, markers, profile, tools=tools)["tool_calls"][0]
        assert call["id"] == "3" and call["function"] == {"name": name, "arguments": '{"city": "Paris"}'}
