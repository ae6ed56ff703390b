"""The fixture tokenizers behave like the real models' tokenizers and chat templates.

Every folder under ``tests/fixtures/tokenizers/`` (built by ``scripts/make_fixture_tokenizers.py``) is
checked with the real ``transformers`` ``apply_chat_template``: which message forms render and which
fail (with the error the real template gives), where tools go (or that they are ignored), the
generation prompt per template kwarg, and that every marker is one token. Offline: nothing here
touches the network.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from functools import lru_cache
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")
import jinja2  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

TOKENIZERS = Path(__file__).resolve().parents[1] / "fixtures" / "tokenizers"

DEEPSEEK_MARKERS = [
    "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<think>", "</think>",
    "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>",
    "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>", "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>",
    "｜DSML｜", "<｜▁pad▁｜>",
]
KIMI_MARKERS = [
    "[BOS]", "[EOS]", "[EOT]", "[PAD]", "<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>",
    "<|im_middle|>", "<think>", "</think>", "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
    "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>",
]
QWEN_MARKERS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
                "<tool_response>", "</tool_response>"]
# folder: (markers, bos, eos, pad)
FOLDERS = {
    "kimi_k25": (KIMI_MARKERS, "[BOS]", "[EOS]", "[PAD]"),
    "kimi_k2_thinking": (KIMI_MARKERS, "[BOS]", "[EOS]", "[PAD]"),
    "qwen3": (QWEN_MARKERS, None, "<|im_end|>", "<|endoftext|>"),
    "qwen3_coder": (QWEN_MARKERS, None, "<|im_end|>", "<|endoftext|>"),
    **{name: (DEEPSEEK_MARKERS, "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>")
       for name in ("deepseek_v31", "deepseek_r1", "deepseek_v31_tojson", "deepseek_v4")},
    "gpt_oss": (["<|startoftext|>", "<|endoftext|>", "<|start|>", "<|end|>", "<|message|>", "<|channel|>",
                 "<|constrain|>", "<|return|>", "<|call|>"], "<|startoftext|>", "<|return|>", "<|endoftext|>"),
    "glm45": (["[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>", "<think>", "</think>",
               "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>",
               "<tool_response>", "</tool_response>", "<|endoftext|>"], None, "<|endoftext|>", "<|endoftext|>"),
    "minimax_m2": (["]~!b[", "]~b]", "[e~[", "<think>", "</think>", "<minimax:tool_call>", "</minimax:tool_call>"],
                   "]~!b[", "[e~[", "[e~["),
}
# The Kimi and Qwen3 vocabularies predate these fixtures (the tiny model was trained on Kimi's ids).
PINNED_SHA256 = {
    "kimi_k25": "40d42c9edd7db565627edbeae5c206a52bd11682de4ee8fb4e26146fe4b95ada",
    "qwen3": "911a2eb61368407597b1b5048129c13738715b9a0474e97737194391c0fc79d3",
}

WEATHER = {"type": "function", "function": {
    "name": "get_current_weather", "description": "Get the current weather for a location",
    "parameters": {"type": "object", "properties": {
        "location": {"type": "string", "description": "The city name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "description": "Forecast days"}}, "required": ["location"]}}}
TIP = {"type": "function", "function": {
    "name": "calculate_tip", "description": "Calculate the tip amount for a bill",
    "parameters": {"type": "object", "properties": {"bill_amount": {"type": "number"}}, "required": ["bill_amount"]}}}
ARGS = {"location": "Paris", "days": 3}
ARGS_STR = json.dumps(ARGS)
RESULT = '{"temperature": 22}'
ABSENT = object()


@lru_cache(maxsize=None)
def tok(name: str):
    return AutoTokenizer.from_pretrained(str(TOKENIZERS / name))  # offline, no trust_remote_code


def render(name, messages, tools=None, gen=True, **kwargs) -> str:
    return tok(name).apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=gen, **kwargs)


def prompt_ids(name, messages, tools=None, gen=True, **kwargs) -> list[int]:
    out = tok(name).apply_chat_template(messages, tools=tools, tokenize=True, add_generation_prompt=gen, **kwargs)
    return list(out["input_ids"])


def enc(name, text) -> list[int]:
    return tok(name)(text, add_special_tokens=False)["input_ids"]


def call(args=ARGS, name="get_current_weather", typ=True, cid="call_0") -> dict:
    c = {"id": cid, "function": {"name": name, "arguments": args}}
    if typ:
        c["type"] = "function"
    return c


def calling(args=ARGS, content=ABSENT, **kw) -> dict:
    m = {"role": "assistant", "tool_calls": [call(args, **kw)]}
    if content is not ABSENT:
        m["content"] = content
    return m


def agent(args=ARGS, content="", system="You are helpful.", result=RESULT) -> list[dict]:
    """system, user, assistant call, tool result (the prompt of the answer turn)."""
    msgs = [{"role": "system", "content": system}] if system is not None else []
    return msgs + [{"role": "user", "content": "Weather in Paris?"}, calling(args, content),
                   {"role": "tool", "tool_call_id": "call_0", "name": "get_current_weather", "content": result}]


HI = [{"role": "user", "content": "Hi"}]
UNDEF_CONTENT = re.escape("'dict object' has no attribute 'content'")
STR_CONCAT = re.escape('can only concatenate str (not "dict") to str')
NO_ITEMS = re.escape("'str object' has no attribute 'items'")


# --------------------------------------------------------------------------------------------------
# every folder


@pytest.mark.parametrize("name", list(FOLDERS))
def test_folder_is_a_plain_tokenizer(name):
    folder = TOKENIZERS / name
    files = sorted(p.name for p in folder.iterdir())
    assert files == ["chat_template.jinja", "tokenizer.json", "tokenizer_config.json"]  # no config.json
    t = tok(name)
    assert 1500 <= len(t) <= 2500
    markers, bos, eos, pad = FOLDERS[name]
    assert (t.bos_token, t.eos_token, t.pad_token) == (bos, eos, pad)
    assert 100_000 <= t.model_max_length <= 300_000
    config = json.loads((folder / "tokenizer_config.json").read_text())
    assert "auto_map" not in config  # nothing needs trust_remote_code
    assert enc(name, "hi") == t("hi")["input_ids"]  # no BOS added implicitly: the templates write it
    text = 'naïve café — 日本語 🎉 {"k": [1, 2]}\n\tdef f(): pass'
    assert t.decode(enc(name, text)) == text


@pytest.mark.parametrize("name", list(FOLDERS))
def test_markers_are_single_tokens_at_the_end(name):
    t = tok(name)
    markers = FOLDERS[name][0]
    seen = set()
    for marker in markers:
        tid = t.convert_tokens_to_ids(marker)
        assert isinstance(tid, int) and tid != t.unk_token_id, marker
        assert enc(name, marker) == [tid], marker
        assert tid in enc(name, f"text before{marker}text after"), marker
        assert t.decode([tid]) == marker
        assert tid >= len(t) - len(markers), marker  # appended above the BPE vocabulary
        seen.add(tid)
    assert len(seen) == len(markers)


def test_shared_vocabularies():
    def same(a, b, f="tokenizer.json"):
        return (TOKENIZERS / a / f).read_bytes() == (TOKENIZERS / b / f).read_bytes()

    assert same("kimi_k2_thinking", "kimi_k25") and same("kimi_k2_thinking", "kimi_k25", "tokenizer_config.json")
    assert same("qwen3_coder", "qwen3")
    for name in ("deepseek_r1", "deepseek_v31_tojson", "deepseek_v4"):
        assert same(name, "deepseek_v31") and same(name, "deepseek_v31", "tokenizer_config.json")
    for name, digest in PINNED_SHA256.items():
        assert hashlib.sha256((TOKENIZERS / name / "tokenizer.json").read_bytes()).hexdigest() == digest, name


@pytest.mark.parametrize("name,text", [
    ("deepseek_v4", '\n<｜DSML｜invoke name="get_current_weather">\n<｜DSML｜parameter name="location" '
                    'string="true">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n'),
    ("gpt_oss", "<|start|>assistant to=functions.get_current_weather<|channel|>commentary json<|message|>"
                '{"location": "Paris"}<|call|><|start|>functions.get_current_weather to=assistant'),
    ("glm45", "<tool_call>get_current_weather\n<arg_key>location</arg_key>\n<arg_value>Paris</arg_value>\n"),
    ("minimax_m2", '<minimax:tool_call>\n<invoke name="get_current_weather">\n<parameter name="location">Paris'
                   '</parameter>\n</invoke>\n</minimax:tool_call>'),
])
def test_family_strings_tokenize_compactly(name, text):
    # Trained on the family's own format: its strings take fewer tokens than with the Kimi vocabulary.
    ours = len(enc(name, text))
    plain = re.sub("|".join(map(re.escape, sorted(FOLDERS[name][0], key=len, reverse=True))), "\n", text)
    assert len(enc(name, plain)) <= len(enc("kimi_k25", plain))
    assert ours < len(enc("kimi_k25", text))


# --------------------------------------------------------------------------------------------------
# qwen3 and qwen3_coder


def test_qwen3_assistant_content_is_read_strictly():
    for msgs in (agent(content=ABSENT), agent(content=None)):  # None is dropped by transformers 5
        with pytest.raises(jinja2.exceptions.UndefinedError, match=UNDEF_CONTENT):
            render("qwen3", msgs, tools=[WEATHER])
    plain = [*HI, {"role": "assistant", "reasoning_content": "r"}, {"role": "user", "content": "Again"}]
    with pytest.raises(jinja2.exceptions.UndefinedError, match=UNDEF_CONTENT):
        render("qwen3", plain)
    text = render("qwen3", agent(content=""), tools=[WEATHER])
    assert '<|im_start|>assistant\n<tool_call>\n{"name": "get_current_weather", "arguments": ' + ARGS_STR in text


def test_qwen3_arguments_string_as_is_object_as_json():
    as_str = render("qwen3", agent(args='{"location":"Paris"}'))
    assert '"arguments": {"location":"Paris"}}\n</tool_call>' in as_str  # the string verbatim
    as_obj = render("qwen3", agent(args=ARGS))
    assert f'"arguments": {json.dumps(ARGS)}}}\n</tool_call>' in as_obj
    assert render("qwen3", agent(args=ARGS_STR)) == as_obj


def test_qwen3_tools_and_generation_prompt():
    text = render("qwen3", agent(), tools=[WEATHER])
    assert text.startswith("<|im_start|>system\nYou are helpful.\n\n# Tools\n")
    assert f"<tools>\n{json.dumps(WEATHER)}\n</tools>" in text
    assert text.endswith(
        f"<|im_start|>user\n<tool_response>\n{RESULT}\n</tool_response><|im_end|>\n<|im_start|>assistant\n")
    assert render("qwen3", HI).endswith("<|im_start|>assistant\n")
    assert render("qwen3", HI, enable_thinking=True).endswith("<|im_start|>assistant\n")
    assert render("qwen3", HI, enable_thinking=False).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_qwen3_coder_renders_xml_tools_and_calls():
    text = render("qwen3_coder", agent(content=""), tools=[WEATHER])
    assert text.startswith("<|im_start|>system\nYou are helpful.\n\n# Tools\n\nYou have access to the following "
                           "functions:\n\n<tools>\n<function>\n<name>get_current_weather</name>\n"
                           "<description>Get the current weather for a location</description>\n<parameters>\n"
                           "<parameter>\n<name>location</name>\n<type>string</type>\n<description>The city name"
                           "</description>\n</parameter>\n")
    assert ("<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n"
            "<function=get_current_weather>\n<parameter=location>\nParis\n</parameter>\n<parameter=days>\n3\n"
            "</parameter>\n</function>\n</tool_call><|im_end|>\n"
            f"<|im_start|>user\n<tool_response>\n{RESULT}\n</tool_response>\n<|im_end|>\n"
            "<|im_start|>assistant\n") in text
    assert render("qwen3_coder", agent(content=ABSENT), tools=[WEATHER]) == text  # content optional on a call turn
    said = render("qwen3_coder", agent(content="  Let me check.  "), tools=[WEATHER])
    assert "<|im_start|>assistant\nLet me check.\n\n<tool_call>\n<function=get_current_weather>" in said
    no_tools = render("qwen3_coder", HI)
    assert no_tools == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert prompt_ids("qwen3_coder", HI, tools=[WEATHER]) != prompt_ids("qwen3_coder", HI)


def test_qwen3_coder_rejects_string_arguments():
    for args in (ARGS_STR, '{"location": "Paris"}'):
        with pytest.raises(TypeError, match=re.escape("Can only get item pairs from a mapping.")):
            render("qwen3_coder", agent(args=args), tools=[WEATHER])


def test_qwen3_coder_generation_prompt_ignores_thinking_kwargs():
    for kw in ({}, {"enable_thinking": False}, {"enable_thinking": True}, {"thinking": True}):
        assert render("qwen3_coder", HI, **kw).endswith("<|im_end|>\n<|im_start|>assistant\n")


# --------------------------------------------------------------------------------------------------
# kimi_k2_thinking


def test_kimi_k2_thinking_generation_prompt_has_no_think():
    tail = "<|im_assistant|>assistant<|im_middle|>"
    for kw in ({}, {"thinking": True}, {"thinking": False}):
        assert render("kimi_k2_thinking", HI, **kw).endswith("<|im_end|>" + tail)
    k25 = prompt_ids("kimi_k25", agent(), tools=[WEATHER])
    assert prompt_ids("kimi_k2_thinking", agent(), tools=[WEATHER]) == k25[:-1]
    assert tok("kimi_k25").convert_ids_to_tokens(k25[-1]) == "<think>"


def test_kimi_k2_thinking_history_like_k25():
    history = [*HI, {"role": "assistant", "content": "Hello!", "reasoning_content": "greet"},
               {"role": "user", "content": "Weather?"}, calling(ARGS, content=ABSENT),
               {"role": "tool", "tool_call_id": "call_0", "content": RESULT},
               {"role": "assistant", "content": "22 degrees.", "reasoning_content": "read it"}]
    for args in (ARGS, ARGS_STR):
        history[3] = calling(args, content=ABSENT)
        assert render("kimi_k2_thinking", history, tools=[WEATHER], gen=False) == render(
            "kimi_k25", history, tools=[WEATHER], gen=False)


# --------------------------------------------------------------------------------------------------
# DeepSeek V3.1, its llama.cpp copy, R1


@pytest.mark.parametrize("name", ["deepseek_v31", "deepseek_r1", "deepseek_v31_tojson"])
def test_deepseek_templates_never_render_tools(name):
    args = ARGS_STR
    for msgs in (HI, agent(args=args), agent(args=args)[:2]):
        assert prompt_ids(name, msgs, tools=[WEATHER, TIP]) == prompt_ids(name, msgs)
        assert "get_current_weather" not in render(name, msgs[:2], tools=[WEATHER])


def test_deepseek_v31_renders_like_v31():
    msgs = [{"role": "system", "content": "Sys one."}, {"role": "system", "content": "Sys two."},
            {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "<think>hmm</think>Hello!"},
            {"role": "user", "content": "Weather in Paris?"}, calling(ARGS_STR, content=""),
            {"role": "tool", "content": RESULT}, {"role": "assistant", "content": "It is 22."},
            {"role": "user", "content": "Thanks"}]
    assert render("deepseek_v31", msgs) == (
        "<｜begin▁of▁sentence｜>Sys one.\n\nSys two.<｜User｜>Hi<｜Assistant｜></think>Hello!<｜end▁of▁sentence｜>"
        "<｜User｜>Weather in Paris?<｜Assistant｜></think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_current_weather"
        f"<｜tool▁sep｜>{ARGS_STR}<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>"
        f"<｜tool▁output▁begin｜>{RESULT}<｜tool▁output▁end｜>It is 22.<｜end▁of▁sentence｜>"
        "<｜User｜>Thanks<｜Assistant｜></think>"
    )
    calls = [call(ARGS_STR), call('{"bill_amount": 10}', "calculate_tip")]
    two = [*HI, {"role": "assistant", "content": "Sure.", "tool_calls": calls}]
    assert render("deepseek_v31", two, gen=False).endswith(
        f"<｜Assistant｜></think>Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_current_weather<｜tool▁sep｜>{ARGS_STR}"
        '<｜tool▁call▁end｜><｜tool▁call▁begin｜>calculate_tip<｜tool▁sep｜>{"bill_amount": 10}<｜tool▁call▁end｜>'
        "<｜tool▁calls▁end｜><｜end▁of▁sentence｜>")


def test_deepseek_v31_message_forms():
    with pytest.raises(TypeError, match=STR_CONCAT):
        render("deepseek_v31", agent(args=ARGS))
    for content in (ABSENT, None):
        with pytest.raises(jinja2.exceptions.UndefinedError, match=UNDEF_CONTENT):
            render("deepseek_v31", agent(args=ARGS_STR, content=content))
    assert render("deepseek_v31", agent(args=ARGS_STR, content=""))


def test_deepseek_v31_generation_prompt():
    assert render("deepseek_v31", HI) == "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜></think>"
    assert render("deepseek_v31", HI, thinking=False).endswith("<｜User｜>Hi<｜Assistant｜></think>")
    assert render("deepseek_v31", HI, thinking=True).endswith("<｜User｜>Hi<｜Assistant｜><think>")
    assert render("deepseek_v31", HI, enable_thinking=True).endswith("<｜Assistant｜></think>")  # not its kwarg
    # As in V3.1: after a tool result no generation prompt is added; the model continues after it.
    assert render("deepseek_v31", agent(args=ARGS_STR), thinking=True).endswith(
        f"<｜tool▁output▁begin｜>{RESULT}<｜tool▁output▁end｜>")


def test_deepseek_v31_tojson_variant():
    for content in (ABSENT, None, ""):  # content read with a default
        text = render("deepseek_v31_tojson", agent(args=ARGS_STR, content=content))
        assert f"<｜tool▁sep｜>{json.dumps(ARGS_STR)}<｜tool▁call▁end｜>" in text  # a JSON string is double-encoded
    text = render("deepseek_v31_tojson", agent(args=ARGS))
    assert f"<｜tool▁sep｜>{json.dumps(ARGS)}<｜tool▁call▁end｜>" in text  # an object renders as JSON
    assert render("deepseek_v31_tojson", agent(args=ARGS_STR)).replace(json.dumps(ARGS_STR), ARGS_STR) == render(
        "deepseek_v31", agent(args=ARGS_STR))
    for kw in ({}, {"thinking": True}, {"thinking": False}):
        assert render("deepseek_v31_tojson", HI, **kw) == render("deepseek_v31", HI, **kw)


def test_deepseek_r1_renders_like_r1():
    text = render("deepseek_r1", agent(args=ARGS_STR, content=""))
    assert text == (
        "<｜begin▁of▁sentence｜>You are helpful.<｜User｜>Weather in Paris?<｜Assistant｜><｜tool▁calls▁begin｜>"
        f"<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_current_weather\n```json\n{ARGS_STR}\n```<｜tool▁call▁end｜>"
        f"<｜tool▁calls▁end｜><｜end▁of▁sentence｜><｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>{RESULT}"
        "<｜tool▁output▁end｜><｜tool▁outputs▁end｜>"  # no generation prompt after tool outputs, as in R1
    )
    answered = [*agent(args=ARGS_STR, content=""), {"role": "assistant", "content": "It is 22."},
                {"role": "user", "content": "Thanks"}]
    assert render("deepseek_r1", answered).endswith(
        "<｜tool▁output▁end｜><｜tool▁outputs▁end｜>It is 22.<｜end▁of▁sentence｜><｜User｜>Thanks<｜Assistant｜><think>\n")
    history = [*HI, {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nHello!"},
               {"role": "user", "content": "Bye"}]
    assert render("deepseek_r1", history).endswith(
        "<｜User｜>Hi<｜Assistant｜>\n\nHello!<｜end▁of▁sentence｜><｜User｜>Bye<｜Assistant｜><think>\n")


def test_deepseek_r1_message_forms():
    with pytest.raises(TypeError, match=STR_CONCAT):
        render("deepseek_r1", agent(args=ARGS, content=""))
    for content in (ABSENT, None):
        with pytest.raises(jinja2.exceptions.UndefinedError, match=UNDEF_CONTENT):
            render("deepseek_r1", agent(args=ARGS_STR, content=content))
    # R1 writes the call's `type` into the prompt: a call without one fails.
    no_type = [*HI, {"role": "assistant", "content": "", "tool_calls": [call(ARGS_STR, typ=False)]}]
    with pytest.raises(jinja2.exceptions.UndefinedError, match=re.escape("'dict object' has no attribute 'type'")):
        render("deepseek_r1", no_type)


def test_deepseek_r1_generation_prompt():
    for kw in ({}, {"thinking": False}, {"thinking": True}, {"enable_thinking": False}):
        assert render("deepseek_r1", HI, **kw) == "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜><think>\n"


# --------------------------------------------------------------------------------------------------
# DeepSeek V4 (DSML)

DSML_CALL = (
    "<｜DSML｜tool_calls>\n"
    '<｜DSML｜invoke name="get_current_weather">\n'
    '<｜DSML｜parameter name="location" string="true">Paris</｜DSML｜parameter>\n'
    '<｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>\n'
    "</｜DSML｜invoke>\n"
    '<｜DSML｜invoke name="calculate_tip">\n'
    '<｜DSML｜parameter name="bill_amount" string="false">12.5</｜DSML｜parameter>\n'
    '<｜DSML｜parameter name="split" string="false">[1, 2]</｜DSML｜parameter>\n'
    "</｜DSML｜invoke>\n"
    "</｜DSML｜tool_calls>"
)


def test_deepseek_v4_renders_tools_in_the_system_prompt():
    text = render("deepseek_v4", HI, tools=[WEATHER, TIP])
    assert text.startswith("<｜begin▁of▁sentence｜>## Tools\n\n")
    lines = text.split("\n")
    assert json.dumps(WEATHER["function"]) in lines and json.dumps(TIP["function"]) in lines  # one schema a line
    assert "<｜DSML｜tool_calls>" in text and 'string="true|false"' in text
    assert prompt_ids("deepseek_v4", HI, tools=[WEATHER]) != prompt_ids("deepseek_v4", HI)
    with_sys = render("deepseek_v4", [{"role": "system", "content": "Be brief."}, *HI], tools=[WEATHER])
    assert with_sys.startswith("<｜begin▁of▁sentence｜>Be brief.\n\n## Tools\n\n")
    assert render("deepseek_v4", HI) == "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜></think>"


def test_deepseek_v4_dsml_calls():
    two = {"role": "assistant", "content": "Checking.",
           "tool_calls": [call(ARGS), call({"bill_amount": 12.5, "split": [1, 2]}, "calculate_tip")]}
    msgs = [*HI, two, {"role": "tool", "content": RESULT}, {"role": "tool", "content": "2.5"}]
    text = render("deepseek_v4", msgs, tools=[WEATHER, TIP])
    assert text.endswith(
        f"<｜User｜>Hi<｜Assistant｜></think>Checking.\n\n{DSML_CALL}<｜end▁of▁sentence｜>"
        f"<｜User｜><tool_results>\n<result>{RESULT}</result>\n<result>2.5</result>\n</tool_results>"
        "<｜Assistant｜></think>")
    bare = render("deepseek_v4", agent(content=ABSENT), tools=[WEATHER])  # content is optional
    assert "<｜Assistant｜></think><｜DSML｜tool_calls>\n<｜DSML｜invoke" in bare


def test_deepseek_v4_rejects_string_arguments():
    for args in (ARGS_STR, "{}"):
        with pytest.raises(jinja2.exceptions.TemplateError, match="get_current_weather: arguments must be an object"):
            render("deepseek_v4", agent(args=args), tools=[WEATHER])


def test_deepseek_v4_reasoning_and_generation_prompt():
    msgs = [*HI, {"role": "assistant", "content": "Hello!", "reasoning_content": "old"},
            {"role": "user", "content": "Weather?"}, {**calling(ARGS, content=""), "reasoning_content": "need tool"},
            {"role": "tool", "content": RESULT}]
    on = render("deepseek_v4", msgs, thinking=True)
    assert "</think>Hello!" in on and "old" not in on  # earlier reasoning dropped
    assert "<｜Assistant｜><think>need tool</think><｜DSML｜tool_calls>" in on  # the current turn keeps it
    assert on.endswith("</tool_results><｜Assistant｜><think>")
    off = render("deepseek_v4", msgs)
    assert "need tool" not in off and off.endswith("</tool_results><｜Assistant｜></think>")
    assert render("deepseek_v4", HI, thinking=False).endswith("<｜Assistant｜></think>")


def test_deepseek_v4_dsml_tags_merge_like_the_real_vocabulary():
    t = tok("deepseek_v4")
    dsml = t.convert_tokens_to_ids("｜DSML｜")
    close = enc("deepseek_v4", "</｜DSML｜invoke>\n")
    pieces = [t.decode([i]) for i in close]
    assert pieces == ["</", "｜DSML｜", "invoke", ">\n"]  # '>' and the newline are ONE token
    assert t.convert_ids_to_tokens(close[-1]) == ">Ċ"
    opening = enc("deepseek_v4", "<｜DSML｜tool_calls>\n")
    assert len(opening) >= 4 and opening[1] == dsml and t.decode(opening[-1:]) == ">\n"
    # Inside a rendered prompt the tags tokenize the same way.
    ids = prompt_ids("deepseek_v4", [*HI, calling(ARGS, content="")], tools=[WEATHER])
    n = len(close)
    assert any(ids[i:i + n] == close for i in range(len(ids) - n + 1))
    assert ids.count(dsml) >= 10


# --------------------------------------------------------------------------------------------------
# gpt-oss (harmony)


class _FixedDatetime(dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return cls(2031, 2, 3, 4, 5, 6)


def test_gpt_oss_system_message_date_from_strftime_now(monkeypatch):
    import transformers.utils.chat_template_utils as ctu

    monkeypatch.setattr(ctu, "datetime", _FixedDatetime)  # what strftime_now reads
    text = render("gpt_oss", HI)
    assert text == (
        "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
        "Knowledge cutoff: 2024-06\nCurrent date: 2031-02-03\n\nReasoning: medium\n\n"
        "# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>"
        "<|start|>user<|message|>Hi<|end|><|start|>assistant"
    )
    assert "\n\nReasoning: high\n\n" in render("gpt_oss", HI, reasoning_effort="high")
    monkeypatch.undo()
    assert f"Current date: {dt.datetime.now():%Y-%m}" in render("gpt_oss", HI)


def test_gpt_oss_tools_in_a_developer_message():
    text = render("gpt_oss", agent(args=ARGS), tools=[WEATHER, TIP])
    assert ("# Valid channels: analysis, commentary, final. Channel must be included for every message.\n"
            "Calls to these tools must go to the commentary channel: 'functions'.<|end|>") in text
    assert ("<|start|>developer<|message|># Instructions\n\nYou are helpful.\n\n# Tools\n\n## functions\n\n"
            "namespace functions {\n\n// Get the current weather for a location\ntype get_current_weather = (_: {\n"
            '// The city name\nlocation: string,\nunit?: "celsius" | "fahrenheit",\n// Forecast days\ndays?: number,\n'
            "}) => any;\n\n// Calculate the tip amount for a bill\ntype calculate_tip = (_: {\nbill_amount: number,\n"
            "}) => any;\n\n} // namespace functions<|end|><|start|>user<|message|>") in text
    assert "<|start|>developer" not in render("gpt_oss", HI)
    assert prompt_ids("gpt_oss", HI, tools=[WEATHER]) != prompt_ids("gpt_oss", HI)


def test_gpt_oss_calls_results_and_answers():
    text = render("gpt_oss", agent(args=ARGS, content=""), tools=[WEATHER])
    assert text.endswith(
        "<|start|>user<|message|>Weather in Paris?<|end|>"
        "<|start|>assistant to=functions.get_current_weather<|channel|>commentary json"
        f"<|message|>{json.dumps(ARGS)}<|call|>"
        "<|start|>functions.get_current_weather to=assistant<|channel|>commentary"
        f"<|message|>{json.dumps(RESULT)}<|end|>"
        "<|start|>assistant")
    as_str = render("gpt_oss", agent(args=ARGS_STR, content=ABSENT), tools=[WEATHER])
    assert f"<|message|>{json.dumps(ARGS_STR)}<|call|>" in as_str  # a JSON string is double-encoded
    done = [*agent(args=ARGS), {"role": "assistant", "content": "It is 22."}, {"role": "user", "content": "Thanks"}]
    final = "<|start|>assistant<|channel|>final<|message|>It is 22.<|end|><|start|>user<|message|>Thanks<|end|>"
    assert final in render("gpt_oss", done)
    last = render("gpt_oss", [*HI, {"role": "assistant", "content": "Hello!", "thinking": "greet"}], gen=False)
    assert last.endswith("<|start|>assistant<|channel|>analysis<|message|>greet<|end|>"
                         "<|start|>assistant<|channel|>final<|message|>Hello!<|return|>")


def test_gpt_oss_thinking_field_of_call_turns():
    msgs = agent(args=ARGS, content="")
    msgs[2] = {**msgs[2], "thinking": "I should call the weather tool."}
    kept = "<|start|>assistant<|channel|>analysis<|message|>I should call the weather tool.<|end|>"
    text = render("gpt_oss", msgs, tools=[WEATHER])
    assert kept + "<|start|>assistant to=functions.get_current_weather" in text
    later = [*msgs, {"role": "assistant", "content": "It is 22."}, {"role": "user", "content": "Thanks"}]
    assert "I should call" not in render("gpt_oss", later, tools=[WEATHER])  # earlier reasoning dropped
    history = [*HI, {"role": "assistant", "content": "Hello!", "thinking": "greet"}, {"role": "user", "content": "Bye"}]
    assert "greet" not in render("gpt_oss", history)
    both = agent(args=ARGS, content="Let me check.")
    both[2] = {**both[2], "thinking": "why"}
    with pytest.raises(jinja2.exceptions.TemplateError, match="Cannot pass both content and thinking"):
        render("gpt_oss", both)


def test_gpt_oss_generation_prompt():
    for kw in ({}, {"reasoning_effort": "low"}, {"thinking": False}, {"enable_thinking": False}):
        assert render("gpt_oss", HI, **kw).endswith("<|start|>user<|message|>Hi<|end|><|start|>assistant")
    assert tok("gpt_oss").convert_ids_to_tokens(prompt_ids("gpt_oss", HI)[-2:]) == ["<|start|>", "assistant"]


# --------------------------------------------------------------------------------------------------
# GLM-4.5


def test_glm45_renders_like_glm45():
    text = render("glm45", agent(args=ARGS, content=""), tools=[WEATHER])
    assert text.startswith("[gMASK]<sop><|system|>\n# Tools\n\n")
    assert f"<tools>\n{json.dumps(WEATHER)}\n</tools>" in text
    assert text.endswith(
        "<|system|>\nYou are helpful.<|user|>\nWeather in Paris?<|assistant|>\n<think></think>\n"
        "<tool_call>get_current_weather\n<arg_key>location</arg_key>\n<arg_value>Paris</arg_value>\n"
        "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>"
        f"<|observation|>\n<tool_response>\n{RESULT}\n</tool_response><|assistant|>")
    assert render("glm45", agent(args=ARGS, content=ABSENT), tools=[WEATHER]) == text
    assert prompt_ids("glm45", HI, tools=[WEATHER]) != prompt_ids("glm45", HI)


def test_glm45_rejects_string_arguments():
    with pytest.raises(jinja2.exceptions.UndefinedError, match=NO_ITEMS):
        render("glm45", agent(args=ARGS_STR), tools=[WEATHER])


def test_glm45_reasoning_and_generation_prompt():
    msgs = [*HI, {"role": "assistant", "content": "Hello!", "reasoning_content": "old"},
            {"role": "user", "content": "Weather?"}, {**calling(ARGS, content=""), "reasoning_content": "need tool"},
            {"role": "tool", "content": RESULT}]
    text = render("glm45", msgs)
    assert "<|assistant|>\n<think></think>\nHello!" in text and "old" not in text
    assert "<|assistant|>\n<think>need tool</think>\n<tool_call>get_current_weather" in text
    assert render("glm45", HI) == "[gMASK]<sop><|user|>\nHi<|assistant|>"
    assert render("glm45", HI, enable_thinking=True) == "[gMASK]<sop><|user|>\nHi<|assistant|>"
    # As in GLM-4.5: enable_thinking=False also marks each user turn with /nothink.
    off = render("glm45", HI, enable_thinking=False)
    assert off == "[gMASK]<sop><|user|>\nHi/nothink<|assistant|>\n<think></think>"


# --------------------------------------------------------------------------------------------------
# MiniMax-M2


def test_minimax_m2_renders_like_minimax_m2():
    text = render("minimax_m2", agent(args=ARGS, content=""), tools=[WEATHER])
    assert text.startswith("]~!b[]~b]system\nYou are helpful.\n\n# Tools\n")
    assert f"<tools>\n<tool>{json.dumps(WEATHER['function'])}</tool>\n</tools>" in text
    assert text.endswith(
        "[e~[\n]~b]user\nWeather in Paris?[e~[\n]~b]ai\n\n<minimax:tool_call>\n"
        '<invoke name="get_current_weather">\n<parameter name="location">Paris</parameter>\n'
        '<parameter name="days">3</parameter>\n</invoke>\n</minimax:tool_call>[e~[\n'
        f"]~b]tool\n<response>{RESULT}</response>[e~[\n]~b]ai\n<think>\n")
    assert render("minimax_m2", agent(args=ARGS, content=ABSENT), tools=[WEATHER]) == text
    default_system = "]~!b[]~b]system\nYou are a helpful assistant.[e~[\n"
    assert render("minimax_m2", HI) == default_system + "]~b]user\nHi[e~[\n]~b]ai\n<think>\n"
    assert prompt_ids("minimax_m2", HI, tools=[WEATHER]) != prompt_ids("minimax_m2", HI)


def test_minimax_m2_message_forms_and_generation_prompt():
    with pytest.raises(jinja2.exceptions.UndefinedError, match=NO_ITEMS):
        render("minimax_m2", agent(args=ARGS_STR), tools=[WEATHER])
    msgs = [*HI, {"role": "assistant", "content": "Hello!", "reasoning_content": "old"},
            {"role": "user", "content": "Weather?"}, {**calling(ARGS, content=""), "reasoning_content": "need tool"},
            {"role": "tool", "content": RESULT}]
    text = render("minimax_m2", msgs)
    assert "]~b]ai\nHello![e~[\n" in text and "old" not in text  # earlier reasoning dropped
    assert "]~b]ai\n<think>\nneed tool\n</think>\n\n\n<minimax:tool_call>" in text  # interleaved thinking kept
    for kw in ({}, {"thinking": False}, {"enable_thinking": False}):
        assert render("minimax_m2", HI, **kw).endswith("]~b]user\nHi[e~[\n]~b]ai\n<think>\n")
    eos = tok("minimax_m2").convert_tokens_to_ids("[e~[")
    assert prompt_ids("minimax_m2", HI).count(eos) == 2
