"""Write the bundled sample prompts (a handful per config) to eagle3_synth/prompts/samples/.

Each line is the prepared-prompts format: {"messages": [...], "tools": [...]?, "id": ...}. The
shapes follow each source dataset (see shared/SOURCES.md) and the adapters' conventions (tool-call
ids `functions.<name>:<n>`, see eagle3_synth.conversation.ToolCallIds); contents are short so the
demo is fast. Prompts from the real sources: `eagle3-synth build CONFIG --source-file ... | --from-source`.

    python scripts/make_sample_prompts.py           # write them
    python scripts/make_sample_prompts.py --check   # compare (tests/scripts runs it)
"""

import json
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "eagle3_synth" / "prompts" / "samples"


def tool(name, description, properties, required):
    return {"type": "function", "function": {"name": name, "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required}}}


WEATHER = tool("get_weather", "Get the current weather for a city",
               {"city": {"type": "string", "description": "City name"}}, ["city"])
CONVERT = tool("convert_currency", "Convert an amount from one currency to another",
               {"amount": {"type": "number"}, "from": {"type": "string"}, "to": {"type": "string"}},
               ["amount", "from", "to"])
LANGUAGE = tool("detect_language", "Detect the language of a given text",
                {"text": {"type": "string", "description": "The text"}}, ["text"])
# The function the tiny model calls for weather (it knows the names of its synthetic training data).
CURRENT_WEATHER = {"type": "function", "function": {
    "name": "get_current_weather", "description": "Get the current weather in a location",
    "parameters": {"type": "object", "properties": {"location": {"type": "string", "description": "City name"},
                                                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["location"]}}}
NEWS = tool("get_news", "Get the latest news headlines for a topic",
            {"topic": {"type": "string"}}, ["topic"])
SYSTEM_TOOLS = "You are a helpful assistant with access to the following functions. Use them if required -"
SYSTEM_NONE = "You are a helpful assistant, with no access to external functions."

SAMPLES = {
    "B1_glaive": [
        {"id": "glaive-0", "tools": [WEATHER], "messages": [
            {"role": "system", "content": SYSTEM_TOOLS},
            {"role": "user", "content": "What is the weather like in Paris right now?"}]},
        {"id": "glaive-1", "tools": [CONVERT], "messages": [
            {"role": "system", "content": SYSTEM_TOOLS},
            {"role": "user", "content": "Can you convert 250 US dollars to euros?"}]},
        {"id": "glaive-2", "tools": [LANGUAGE], "messages": [
            {"role": "system", "content": SYSTEM_TOOLS},
            {"role": "user", "content": "Which language is this?"},
            {"role": "assistant", "content": "Please provide the text."},
            {"role": "user", "content": "\"Je suis un étudiant\""}]},
        {"id": "glaive-3", "messages": [
            {"role": "system", "content": SYSTEM_NONE},
            {"role": "user", "content": "Explain what a binary search does in two sentences."}]},
        {"id": "glaive-4", "tools": [NEWS], "messages": [
            {"role": "system", "content": SYSTEM_TOOLS},
            {"role": "user", "content": "Show me the latest news about space exploration."},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "functions.get_news:0", "type": "function",
             "function": {"name": "get_news", "arguments": {"topic": "space exploration"}}}]},
            {"role": "tool", "tool_call_id": "functions.get_news:0", "name": "get_news",
             "content": "{\"headlines\": [\"Probe reaches Jupiter orbit\", \"New crew launches to the station\"]}"},
            {"role": "user", "content": "And what about the weather in Houston?"}]},
        {"id": "glaive-5", "tools": [WEATHER, CONVERT], "messages": [
            {"role": "system", "content": SYSTEM_TOOLS},
            {"role": "user", "content": "I am flying to Tokyo. How warm is it there?"}]},
    ],
    "B2_hermes_fc": [
        {"id": "hermes-0", "tools": [WEATHER, NEWS], "messages": [
            {"role": "system", "content": "You are a function calling AI model. You may call one or more functions to assist with the user query."},
            {"role": "user", "content": "Get the weather in Berlin and the latest news about football."}]},
        {"id": "hermes-1", "tools": [CONVERT], "messages": [
            {"role": "system", "content": "You are a function calling AI model. You may call one or more functions to assist with the user query."},
            {"role": "user", "content": "Convert 100 GBP to JPY and 40 EUR to USD."}]},
        # A whole conversation with the source's call and its result: with --turns all (B2's default)
        # the target's own call of get_current_weather is answered by it (the demo's tool loop).
        {"id": "hermes-2", "tools": [CURRENT_WEATHER], "messages": [
            {"role": "system", "content": "You are a function calling AI model. You may call one or more functions to assist with the user query."},
            {"role": "user", "content": "What is the weather like in Paris right now?"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "functions.get_current_weather:0", "type": "function",
             "function": {"name": "get_current_weather", "arguments": {"location": "Paris", "unit": "celsius"}}}]},
            {"role": "tool", "tool_call_id": "functions.get_current_weather:0", "name": "get_current_weather",
             "content": "{\"temperature\": 18, \"unit\": \"celsius\", \"description\": \"light rain\"}"},
            {"role": "assistant", "content": "It is 18 °C with light rain in Paris."},
            {"role": "user", "content": "Thanks! Should I take an umbrella?"}]},
    ],
    "B3_ultrachat": [
        {"id": "d938b65d", "messages": [
            {"role": "user", "content": "Write a short story about a lighthouse keeper."},
            {"role": "assistant", "content": "The keeper climbed the stairs every evening..."},
            {"role": "user", "content": "Make the ending happier."}]},
        {"id": "a17f0c22", "messages": [{"role": "user", "content": "What are three tips for learning a new language?"}]},
    ],
    "B4_mixturethoughts": [
        {"id": "", "messages": [{"role": "user", "content": "What is the sum of the first 20 odd numbers? Please reason step by step."}]},
        {"id": "", "messages": [{"role": "user", "content": "Write a Python function that checks whether a string is a palindrome."}]},
    ],
    "B5_openthoughts": [
        {"id": "", "messages": [
            {"role": "system", "content": "Your role as an assistant involves thoroughly exploring questions through a systematic long thinking process before providing the final precise and accurate solutions."},
            {"role": "user", "content": "Return your final response within \\boxed{}. How many positive divisors does 36 have?"}]},
    ],
    "B6_sharegpt": [
        {"id": "dsOTKpn_0", "messages": [{"role": "user", "content": "Why does the dir command in DOS see \"<.<\" as \"*.*\"?"}]},
    ],
    "B7_magpie": [
        {"id": "3a6c1f2e", "messages": [{"role": "user", "content": "How do I reverse a list in Python?"}]},
    ],
    "B8_opencodereasoning": [
        {"id": "0a1b2c", "messages": [{"role": "user", "content": "You are given an array of n integers. Print the maximum sum of any contiguous subarray. Write a Python solution."}]},
    ],
}

def lines(records: list[dict]) -> str:
    return "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records)


def main() -> int:
    """Write every config's file; `--check`: compare instead, exit 1 naming a file that differs."""
    check = "--check" in sys.argv[1:]
    stale = []
    OUT.mkdir(parents=True, exist_ok=True)
    for config, records in SAMPLES.items():
        path = OUT / f"{config}.jsonl"
        if check:
            if not path.is_file() or path.read_text(encoding="utf-8") != lines(records):
                stale.append(str(path))
            continue
        path.write_text(lines(records), encoding="utf-8")
        print(f"{config}: {len(records)} prompts")
    if stale:
        print("differ from scripts/make_sample_prompts.py: " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
