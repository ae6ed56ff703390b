"""Source adapters and readers: records in each source's real schema -> exact conversations -> templates.

Fixture records live in tests/fixtures/sources/<config>/ in the source's own file format (written
in the record shapes each adapter's docstring shows for its source dataset, with the awkward cases: no tools, several tools, parallel calls, tool
responses, system turns, empty turns, non-ASCII, and malformed records of each kind).
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from eagle3_synth.prompts.templating import ChatTokenizer
from eagle3_synth.prompts.configs import BUILTIN_CONFIGS
from eagle3_synth.prompts.conversation import Conversation, assistant_message, prompt_turns
from eagle3_synth.errors import ConfigError, PromptError
from eagle3_synth.prompts.adapters import ADAPTERS, get_adapter
from eagle3_synth.prompts.readers import iter_json_array, iter_source_files

from ..conftest import FIXTURES

SOURCES = FIXTURES / "sources"


def records(config: str) -> list:
    """Records of a config's fixture files, in reading order."""
    return [r.record for r in iter_source_files(sorted(str(p) for p in (SOURCES / config).iterdir())) if r.error is None]


def convert(config: str, index: int) -> Conversation:
    return get_adapter(BUILTIN_CONFIGS[config].adapter).convert(records(config)[index])


def rejected(config: str, index: int) -> str:
    with pytest.raises(PromptError) as info:
        convert(config, index)
    return str(info.value)


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def system(text: str) -> dict:
    return {"role": "system", "content": text}


def assistant(text: str) -> dict:
    return {"role": "assistant", "content": text}


def call(name: str, n: int, arguments: dict) -> dict:
    return {"id": f"functions.{name}:{n}", "type": "function", "function": {"name": name, "arguments": arguments}}


def result(name: str, n: int, content: str) -> dict:
    return {"role": "tool", "tool_call_id": f"functions.{name}:{n}", "name": name, "content": content}


def tool_names(conversation: Conversation) -> list[str]:
    return [tool["function"]["name"] for tool in conversation.tools or []]


GLAIVE_TOOLS = system("You are a helpful assistant with access to the following functions. Use them if required -")
GLAIVE_NONE = system("You are a helpful assistant, with no access to external functions.")
HERMES_SYSTEM = system("You are a function calling AI model. You may call one or more functions to assist with the "
                       "user query. Don't make assumptions about what values to plug into functions.")


# -- glaive ------------------------------------------------------------------------------------------

def test_glaive_real_example_keeps_up_to_the_last_user_turn():
    conversation = convert("B1_glaive", 0)
    assert conversation.messages == [GLAIVE_TOOLS, user("Which language is this?"),
                                     assistant("Please provide the text."), user('"Je suis un étudiant"')]
    assert conversation.tools == [{"type": "function", "function": {
        "name": "detect_language", "description": "Detect the language of a given text",
        "parameters": {"type": "object", "properties": {"text": {"type": "string", "description": "The text to analyze"}},
                       "required": ["text"]}}}]
    assert conversation.source_id == ""  # glaive has no id column: the reader's row names it


def test_glaive_without_tools():
    conversation = convert("B1_glaive", 1)
    assert conversation.messages == [GLAIVE_NONE, user("Can you order a pizza for me?")]
    assert conversation.tools is None


def test_glaive_call_response_and_non_ascii_follow_up():
    conversation = convert("B1_glaive", 2)
    assert tool_names(conversation) == ["get_weather", "get_movie_details"]
    assert conversation.messages == [
        GLAIVE_TOOLS,
        user("Tell me about the movie Ocean's Eleven."),
        # the single-quoted arguments with an escaped apostrophe become an object
        {"role": "assistant", "content": None, "tool_calls": [call("get_movie_details", 0, {"title": "Ocean's Eleven"})]},
        result("get_movie_details", 0, '{"title": "Ocean\'s Eleven", "year": 2001}'),
        assistant("Ocean's Eleven is a 2001 heist film."),
        user("Danke! Wie ist das Wetter in München? 🌧"),
    ]


def test_glaive_prose_before_the_call_and_parameters_key():
    assert convert("B1_glaive", 3).messages == [
        GLAIVE_TOOLS,
        user("What's the price of Apple stock?"),
        {"role": "assistant", "content": "Sure, let me check that for you.",
         "tool_calls": [call("get_stock_price", 0, {"symbol": "AAPL"})]},
        result("get_stock_price", 0, '{"price": 189.5}'),
        assistant("Apple (AAPL) trades at $189.50."),
        user("Thanks! And Microsoft?"),
    ]


def test_glaive_repeated_definition_is_kept_once_and_row_may_end_on_user():
    conversation = convert("B1_glaive", 4)
    assert tool_names(conversation) == ["calculate_tip"]
    assert conversation.messages == [GLAIVE_TOOLS, user("What tip should I leave on a $50 bill at 15%?")]


def test_glaive_json_arguments_and_consecutive_assistant_turns():
    assert convert("B1_glaive", 5).messages == [
        GLAIVE_TOOLS,
        user("Tip on 80 dollars, 20 percent?"),
        {"role": "assistant", "content": None, "tool_calls": [call("calculate_tip", 0, {"bill": 80, "percent": 20})]},
        result("calculate_tip", 0, '{"tip": 16}'),
        assistant("The tip is $16."),
        assistant("Anything else?"),
        user("No, that's all."),
    ]


def test_glaive_empty_user_turn_and_leading_assistant_are_dropped():
    assert convert("B1_glaive", 6).messages == [GLAIVE_NONE, user("Tell me a joke.")]


def test_glaive_broken_call_after_the_last_user_turn_does_not_matter():
    assert convert("B1_glaive", 7).messages == [GLAIVE_TOOLS, user("Book a flight from Berlin to Rome.")]


@pytest.mark.parametrize("index,reason", [
    (8, "function call cannot be parsed (truncated?)"),
    (9, "two different definitions of tool 'get_weather'"),
    (10, "no user turn"),
    (11, "a tool result has no unanswered function call before it"),
    (12, "field 'chat' is missing"),
    (14, "system: function definition 1 is not valid JSON"),
])
def test_glaive_malformed_records_name_the_problem(index, reason):
    assert reason in rejected("B1_glaive", index)


# -- hermes ------------------------------------------------------------------------------------------

def test_hermes_singleturn_real_example():
    conversation = convert("B2_hermes_fc", 0)
    assert conversation.source_id == "85f6c398-69c7-4df2-aed1-29d614a93a26"
    # The Hermes <tools> block and its <tool_call> format instructions leave the system turn: the
    # target model gets the tools through its own template and calls in its own format.
    assert conversation.messages == [HERMES_SYSTEM, user(
        "Please show me the live feed of the front_door camera in 1080p and record it for 30 minutes.")]
    assert tool_names(conversation) == ["get_camera_live_feed", "record_camera_feed"]
    assert conversation.tools[0]["function"]["parameters"]["properties"]["stream_quality"]["enum"] == ["720p", "1080p", "4k"]


def test_hermes_parallel_calls_and_their_responses():
    conversation = convert("B2_hermes_fc", 1)
    assert tool_names(conversation) == ["get_order_status", "issue_refund"]
    assert conversation.messages == [
        HERMES_SYSTEM,
        user("Where are my orders A-17 and B-42?"),
        # one JSON body, one Python dict wrapped in literal "\n"
        {"role": "assistant", "content": None, "tool_calls": [
            call("get_order_status", 0, {"order_id": "A-17"}), call("get_order_status", 1, {"order_id": "B-42"})]},
        result("get_order_status", 0, '{"order_id": "A-17", "status": "shipped"}'),
        result("get_order_status", 1, '{"order_id": "B-42", "status": "delayed"}'),
        assistant("A-17 has shipped; B-42 is delayed."),
        user("Refund B-42 then, it arrives too late."),
    ]


def test_hermes_tools_from_the_system_block_and_name_nested_in_arguments():
    conversation = convert("B2_hermes_fc", 2)
    assert tool_names(conversation) == ["get_camera_live_feed", "record_camera_feed"]
    assert conversation.messages == [
        HERMES_SYSTEM,
        user("Record the garage camera for 10 minutes."),
        {"role": "assistant", "content": None, "tool_calls": [
            call("record_camera_feed", 0, {"camera_id": "garage", "duration_minutes": 10})]},
        result("record_camera_feed", 0, "recording started"),
        assistant("Recording has started."),
        user("Stop it after 5 minutes instead."),
    ]


def test_hermes_glaive_config_python_repr_tools_and_bare_response():
    conversation = convert("B2_hermes_fc", 5)
    assert tool_names(conversation) == ["convert_currency"]
    assert conversation.messages == [
        HERMES_SYSTEM,
        user("How much is 100 USD in EUR?"),
        {"role": "assistant", "content": None, "tool_calls": [
            call("convert_currency", 0, {"amount": 100, "from": "USD", "to": "EUR"})]},
        result("convert_currency", 0, "{'converted_amount': 92.5, 'from': 'USD', 'to': 'EUR'}"),
        assistant("100 USD is about 92.50 EUR."),
        user("¿Y en yenes?"),
    ]


def test_hermes_json_mode_keeps_its_schema_system_turn():
    conversation = convert("B2_hermes_fc", 6)
    schema = records("B2_hermes_fc")[6]["schema"]
    assert conversation.messages == [
        system("You are a helpful assistant that answers in JSON. Here's the json schema you must adhere to:\n"
               f"<schema>\n{schema}\n</schema>\n"),
        user("Give me a simple pancake recipe."),
    ]
    assert conversation.tools is None


@pytest.mark.parametrize("index,reason", [
    (3, "conversations[2] has unknown role 'function'"),
    (4, "tool call is neither JSON nor a Python literal"),
])
def test_hermes_malformed_records_name_the_problem(index, reason):
    assert reason in rejected("B2_hermes_fc", index)


# -- messages (UltraChat, Mixture-of-Thoughts) -------------------------------------------------------

def test_ultrachat_multi_turn_drops_the_last_answer():
    conversation = convert("B3_ultrachat", 0)
    assert conversation.source_id == "d938b65dfe31f05f80eb8572964c6673eddbd68eff3db6bd234d7f1e3b86c2af"
    assert conversation.messages == [
        user("Create a fully-developed protagonist who is challenged to survive within a dystopian society."),
        assistant("Name: Ava\n\n Ava was just 16 years old when the world as she knew it came crashing down."),
        user("Wow, Ava's story is so intense. Can you add more details about the society she lives in?"),
    ]


def test_ultrachat_non_ascii_and_trailing_empty_user_turn():
    assert convert("B3_ultrachat", 1).messages == [user("如何用三句话解释量子纠缠？")]
    assert convert("B3_ultrachat", 2).messages == [user("List three uses of baking soda.")]


@pytest.mark.parametrize("index,reason", [(3, "field 'messages' is missing or not a list"),
                                          (4, "messages[1] has unknown role 'bot'")])
def test_ultrachat_malformed_records_name_the_problem(index, reason):
    assert reason in rejected("B3_ultrachat", index)


def test_mixture_of_thoughts_single_turn_and_reasoning_of_an_earlier_turn():
    assert convert("B4_mixturethoughts", 0).messages == [user(
        "You will be given a competitive programming problem. Please reason step by step about the solution, "
        "then provide a complete implementation in C++17.\n\nGiven n, print the n-th Fibonacci number modulo 10^9+7.")]
    assert convert("B4_mixturethoughts", 1).messages == [
        user("What is the sum of the interior angles of a hexagon?"),
        {"role": "assistant", "content": "The sum is 720°.", "reasoning_content": "(6-2)*180 = 720."},
        user("And of a decagon? Please reason step by step, and put your final answer within \\boxed{}."),
    ]
    assert convert("B4_mixturethoughts", 1).source_id == ""
    assert "no user turn" in rejected("B4_mixturethoughts", 3)


# -- openthoughts ------------------------------------------------------------------------------------

def test_openthoughts_keeps_its_system_column():
    first = records("B5_openthoughts")[0]
    assert convert("B5_openthoughts", 0).messages == [
        system(first["system"]), user("Return your final response within \\boxed{}. How many positive divisors does 36 have?")]
    assert convert("B5_openthoughts", 2).messages == [user("Return your final response within \\boxed{}. Compute 7 × 8.")]
    assert "conversations[0] has unknown role 'narrator'" in rejected("B5_openthoughts", 3)


# -- sharegpt (ShareGPT, Magpie) ---------------------------------------------------------------------

def test_sharegpt_conversations():
    assert convert("B6_sharegpt", 0).messages == [user('Why does `dir` command in DOS see the "<.<" argument as "*.*"?')]
    assert convert("B6_sharegpt", 0).source_id == "dsOTKpn_0"
    # a chunk that starts with gpt loses its leading gpt turn
    assert convert("B6_sharegpt", 1).messages == [
        user("What about collisions?"), assistant("Collisions are resolved by chaining or open addressing."),
        user("Show me chaining in Python.")]
    # system turn and the chatgpt/bard role variants
    assert convert("B6_sharegpt", 2).messages == [
        system("You are a pirate. Answer like one."), user("Where is the treasure?"),
        assistant("Arr, buried on Skull Island!"), user("How do we get there?")]
    assert convert("B6_sharegpt", 3).messages == [user("Recommend a sci-fi novel.")]
    assert convert("B6_sharegpt", 4).messages == [
        user("日本語で自己紹介してください 🙂"), assistant("こんにちは、私はアシスタントです。"), user("ありがとう！もっと短く。")]


@pytest.mark.parametrize("index,reason", [(5, "conversations[1] has unknown role 'narrator'"),
                                          (6, "no user turn"),
                                          (7, "conversations[0] value is a int, not a string")])
def test_sharegpt_malformed_records_name_the_problem(index, reason):
    assert reason in rejected("B6_sharegpt", index)


def test_magpie_reads_uuid_and_conversations_only():
    assert convert("B7_magpie", 0).messages == [user("How do I reverse a list in Python?")]
    assert convert("B7_magpie", 0).source_id == "3a6c1f2e-5b7d-4e8f-9a0b-1c2d3e4f5a6b"
    assert convert("B7_magpie", 1).messages == [user("Écris un haïku sur l'automne.")]
    assert "field 'conversations' is missing" in rejected("B7_magpie", 3)


# -- opencodereasoning -------------------------------------------------------------------------------

def test_opencodereasoning_problem_statement():
    conversation = convert("B8_opencodereasoning", 0)
    assert conversation.source_id == "0a1b2c3d4e5f"
    assert conversation.messages == [user("You are given an array of n integers. Print the maximum sum of any "
                                          "contiguous subarray.\n\nInput\nThe first line contains n (1 ≤ n ≤ 2·10^5).")]
    assert "split_1 placeholder" in rejected("B8_opencodereasoning", 3)
    assert "field 'input' is missing or empty" in rejected("B8_opencodereasoning", 4)


# -- shared rules ------------------------------------------------------------------------------------

def test_every_adapter_rejects_a_record_that_is_not_an_object():
    for adapter in ADAPTERS.values():
        with pytest.raises(PromptError, match="not an object"):
            adapter.convert(["a", "list"])


def test_unknown_adapter_is_named():
    with pytest.raises(ConfigError, match="unknown adapter 'nope'"):
        get_adapter("nope")


def test_prompt_turns_rules():
    turns = [("assistant", "late"), ("system", "sys"), ("user", "  "), ("user", "q1"), ("tool", ""),
             ("assistant", "a1"), ("user", "q2"), ("assistant", "answer")]
    assert prompt_turns(turns) == [("system", "sys"), ("user", "q1"), ("tool", ""), ("assistant", "a1"), ("user", "q2")]


def test_assistant_reasoning_is_split_only_at_the_start():
    assert assistant_message("a <think>x</think> b") == {"role": "assistant", "content": "a <think>x</think> b"}


# -- templating with the fixture tokenizers ----------------------------------------------------------

def all_conversations() -> list[tuple[str, int, Conversation]]:
    found = []
    for config, spec in BUILTIN_CONFIGS.items():
        adapter = get_adapter(spec.adapter)
        for index, record in enumerate(records(config)):
            try:
                found.append((config, index, adapter.convert(record)))
            except PromptError:
                pass
    return found


def kimi_expectations(conversation: Conversation) -> list[str]:
    parts = []
    for message in conversation.messages:
        if message["role"] == "user":
            parts.append(f"<|im_user|>user<|im_middle|>{message['content']}<|im_end|>")
        elif message["role"] == "tool":
            parts.append(f"<|im_system|>tool<|im_middle|>## Return of {message['tool_call_id']}\n{message['content']}<|im_end|>")
        for tool_call in message.get("tool_calls") or []:
            parts.append(f"<|tool_call_begin|>{tool_call['id']}<|tool_call_argument_begin|>"
                         f"{json.dumps(tool_call['function']['arguments'], ensure_ascii=False)}<|tool_call_end|>")
    return parts


def qwen_expectations(conversation: Conversation) -> list[str]:
    parts = []
    for message in conversation.messages:
        if message["role"] == "user":
            parts.append(f"<|im_start|>user\n{message['content']}<|im_end|>")
        elif message["role"] == "tool":
            parts.append(f"<tool_response>\n{message['content']}\n</tool_response>")
        for tool_call in message.get("tool_calls") or []:
            function = tool_call["function"]
            parts.append(f'<tool_call>\n{{"name": "{function["name"]}", "arguments": '
                         f'{json.dumps(function["arguments"], ensure_ascii=False)}}}\n</tool_call>')
    return parts


def test_every_converted_fixture_templates_with_both_tokenizers(kimi_tokenizer, qwen_tokenizer):
    conversations = all_conversations()
    assert len(conversations) >= 30
    for tokenizer, expect, ending in ((kimi_tokenizer, kimi_expectations, "<|im_assistant|>assistant<|im_middle|><think>"),
                                      (qwen_tokenizer, qwen_expectations, "<|im_start|>assistant\n")):
        chat = ChatTokenizer(tokenizer)
        for config, index, conversation in conversations:
            text = tokenizer.decode(chat.prompt_ids(conversation))
            where = f"{config} record {index}"
            assert text.endswith(ending), where
            position = 0
            for part in expect(conversation):  # every turn and call appears, in order
                found = text.find(part, position)
                assert found >= 0, f"{where}: {part!r} missing or out of order in {text!r}"
                position = found + len(part)
            for tool in conversation.tools or []:
                assert f'"name":"{tool["function"]["name"]}"' in text.replace(": ", ":"), where


def test_glaive_multi_turn_exact_kimi_and_qwen_prompts(kimi_tokenizer, qwen_tokenizer):
    conversation = convert("B1_glaive", 3)
    tool = ('{"type":"function","function":{"name":"get_stock_price","description":"Get the current stock price",'
            '"parameters":{"type":"object","properties":{"symbol":{"type":"string","description":"The stock symbol, '
            'e.g. AAPL"}},"required":["symbol"]}}}')
    assert kimi_tokenizer.decode(ChatTokenizer(kimi_tokenizer).prompt_ids(conversation)) == (
        f"<|im_system|>tool_declare<|im_middle|>[{tool}]<|im_end|>"
        "<|im_system|>system<|im_middle|>You are a helpful assistant with access to the following functions. "
        "Use them if required -<|im_end|>"
        "<|im_user|>user<|im_middle|>What's the price of Apple stock?<|im_end|>"
        "<|im_assistant|>assistant<|im_middle|><think></think>Sure, let me check that for you."
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_stock_price:0<|tool_call_argument_begin|>"
        '{"symbol": "AAPL"}<|tool_call_end|><|tool_calls_section_end|><|im_end|>'
        '<|im_system|>tool<|im_middle|>## Return of functions.get_stock_price:0\n{"price": 189.5}<|im_end|>'
        "<|im_assistant|>assistant<|im_middle|><think></think>Apple (AAPL) trades at $189.50.<|im_end|>"
        "<|im_user|>user<|im_middle|>Thanks! And Microsoft?<|im_end|>"
        "<|im_assistant|>assistant<|im_middle|><think>"
    )
    qwen_tool = json.dumps(json.loads(tool))
    assert qwen_tokenizer.decode(ChatTokenizer(qwen_tokenizer).prompt_ids(conversation)) == (
        "<|im_start|>system\nYou are a helpful assistant with access to the following functions. Use them if required -"
        "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with "
        f"function signatures within <tools></tools> XML tags:\n<tools>\n{qwen_tool}\n</tools>\n\nFor each function "
        "call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n"
        '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\nWhat's the price of Apple stock?<|im_end|>\n"
        "<|im_start|>assistant\nSure, let me check that for you.\n<tool_call>\n"
        '{"name": "get_stock_price", "arguments": {"symbol": "AAPL"}}\n</tool_call><|im_end|>\n'
        '<|im_start|>user\n<tool_response>\n{"price": 189.5}\n</tool_response><|im_end|>\n'
        "<|im_start|>assistant\nApple (AAPL) trades at $189.50.<|im_end|>\n"
        "<|im_start|>user\nThanks! And Microsoft?<|im_end|>\n<|im_start|>assistant\n"
    )


def test_hermes_parallel_responses_render_as_one_qwen_user_turn(qwen_tokenizer):
    text = qwen_tokenizer.decode(ChatTokenizer(qwen_tokenizer).prompt_ids(convert("B2_hermes_fc", 1)))
    assert ('<|im_start|>user\n<tool_response>\n{"order_id": "A-17", "status": "shipped"}\n</tool_response>\n'
            '<tool_response>\n{"order_id": "B-42", "status": "delayed"}\n</tool_response><|im_end|>') in text


# -- readers -----------------------------------------------------------------------------------------

def test_jsonl_reader_reports_a_broken_line_and_goes_on(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"a": 1}\n\n{"a": \n{"a": 3}\n', encoding="utf-8")
    read = list(iter_source_files([str(path)]))
    assert [(r.row, r.record, r.error is not None) for r in read] == [(0, {"a": 1}, False), (2, None, True), (3, {"a": 3}, False)]
    assert read[1].locator == "rows.jsonl:3" and "not valid JSON" in read[1].error


@pytest.mark.parametrize("chunk", [1, 7, 64, 1 << 20])
def test_json_array_reader_matches_json_load_at_any_buffer_size(tmp_path, chunk):
    path = SOURCES / "B6_sharegpt" / "ShareGPT_V4.3_unfiltered_cleaned_split.json"
    expected = json.loads(path.read_text(encoding="utf-8"))
    assert [r.record for r in iter_json_array(str(path), chunk_chars=chunk)] == expected
    numbers = tmp_path / "numbers.json"
    numbers.write_text("[1234567, -2.5e3 ,{}]", encoding="utf-8")
    assert [r.record for r in iter_json_array(str(numbers), chunk_chars=2)] == [1234567, -2500.0, {}]


def test_json_file_holding_lines_and_parquet_file(tmp_path):
    rows = records("B7_magpie")
    lines = tmp_path / "magpie.json"
    lines.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    parquet = tmp_path / "magpie.parquet"
    pq.write_table(pa.Table.from_pylist([{"uuid": r["uuid"], "conversations": r.get("conversations")} for r in rows]),
                   parquet, row_group_size=2)
    assert [r.record for r in iter_source_files([str(lines)])] == rows
    from_parquet = list(iter_source_files([str(parquet)]))
    assert [(r.unit, r.row) for r in from_parquet] == [("magpie.parquet", i) for i in range(4)]
    assert [r.record["conversations"] for r in from_parquet] == [r.get("conversations") for r in rows]


def test_unknown_extension_and_missing_file_are_named(tmp_path):
    (tmp_path / "rows.csv").write_text("a,b\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="unknown format .csv"):
        list(iter_source_files([str(tmp_path / "rows.csv")]))
    with pytest.raises(ConfigError, match="no such file"):
        list(iter_source_files([str(tmp_path / "nope.jsonl")]))


def test_fixture_files_are_in_the_source_formats():
    """Glaive, Hermes and ShareGPT ship JSON arrays; the others are read here as JSON Lines."""
    for config in ("B1_glaive", "B2_hermes_fc", "B6_sharegpt"):
        for path in (SOURCES / config).iterdir():
            assert path.read_text(encoding="utf-8").lstrip().startswith("["), path
    assert set(BUILTIN_CONFIGS) == {p.name for p in SOURCES.iterdir()}
