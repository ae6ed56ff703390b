"""hermes: NousResearch/hermes-function-calling-v1 records (B2), function-calling and JSON-mode configs.

A record has `id`, `conversations: [{from, value}]` with `from` in system/human/gpt/tool, and (in
the function-calling configs) `tools`, a JSON string of `[{"type": "function", "function": {...}}]`.
The system turn embeds the same tools in `<tools>...</tools>` with instructions to answer in
Hermes' own `<tool_call>` format; gpt turns hold calls as `<tool_call>\\n{"name", "arguments"}
\\n</tool_call>` (several = parallel calls); tool turns hold `<tool_response>\\n{"name",
"content"}\\n</tool_response>`. JSON-mode rows have no tools: the system turn carries a `<schema>`.

Real record (func_calling_singleturn row 0, shortened):

    {"id": "85f6c398-69c7-4df2-aed1-29d614a93a26",
     "conversations": [
      {"from": "system", "value": "You are a function calling AI model. You are provided with
        function signatures within <tools> </tools> XML tags. You may call one or more functions
        to assist with the user query. Don't make assumptions about what values to plug into
        functions.\\n<tools>\\n[...]\\n</tools>\\nFor each function call return a json object ...
        \\n<tool_call>\\n{...}\\n</tool_call>\\n"},
      {"from": "human", "value": "...live feed of the front_door camera in 1080p..."},
      {"from": "gpt", "value": "<tool_call>\\n{\\"name\\": \\"get_camera_live_feed\\", ...}\\n</tool_call>\\n..."}],
     "tools": "[{\\"type\\": \\"function\\", \\"function\\": {\\"name\\": \\"get_camera_live_feed\\", ...}}]",
     "category": "IoT and Home Automation", ...}

becomes `tools` = the parsed `tools` column and messages `system: "You are a function calling AI
model. You may call one or more functions to assist with the user query. Don't make assumptions
about what values to plug into functions."`, `user: "...live feed..."` (the gpt calls come after
the last user turn and are dropped; the target model calls in its own format).

Rules: the `tools` column wins over re-parsing `<tools>` (used only when the column is absent or
empty); when tools are given, the system turn loses the `<tools>` block, everything after it (the
Hermes call-format instructions, which would contradict the target model's native format) and the
sentence announcing the XML tags -- JSON-mode system turns are kept whole; call and response
bodies may be JSON or Python dicts and may be wrapped in literal `\\n`; a call whose `name` sits
inside `arguments` is unwrapped; each response answers the oldest unanswered call of that name.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from eagle3_synth.prompts.conversation import (
    Conversation,
    ToolCallIds,
    arguments_object,
    assistant_message,
    function_tool,
    is_blank,
    loads_loose,
    prompt_turns,
    record_id,
    unique_tools,
)
from eagle3_synth.errors import PromptError
from eagle3_synth.prompts.adapters.sharegpt import ROLES, sharegpt_turns

VERSION = 1
# Fields naming the record in its dataset, first present wins (none: the reader's row is used).
ID_FIELDS: tuple[str, ...] = ("id",)

_TOOLS_BLOCK = re.compile(r"<tools>(.*?)</tools>", re.DOTALL)
_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_TOOL_RESPONSE = re.compile(r"<tool_response>(.*?)</tool_response>", re.DOTALL)
_SENTENCE_END = re.compile(r"(?<=\.)\s*")
# A trailing lead-in such as "Here are the available tools:".
_LEAD_IN = re.compile(r"[^.:]*:\s*\Z")


def _body(text: str) -> str:
    """A tag body without surrounding whitespace or literal `\\n` sequences (~730 rows)."""
    body = text.strip()
    while body.startswith("\\n") or body.endswith("\\n"):
        body = body.removeprefix("\\n").removesuffix("\\n").strip()
    return body


def tools_block(system: str) -> re.Match[str] | None:
    """The `<tools>[...]</tools>` block; an empty `<tools> </tools>` names the tags in a sentence."""
    return next((m for m in _TOOLS_BLOCK.finditer(system) if m.group(1).strip()), None)


def parse_tools(record: Mapping[str, Any], system: str) -> list[dict[str, Any]]:
    raw = record.get("tools")
    if is_blank(raw) or raw == []:
        block = tools_block(system)
        if block is None:
            return []
        raw = block.group(1).strip()
    definitions = loads_loose(raw, "tools") if isinstance(raw, str) else raw
    if not isinstance(definitions, list):
        raise PromptError(f"tools is a {type(definitions).__name__}, not a list")
    return unique_tools([function_tool(item, "tools") for item in definitions], "tools")


def clean_system(system: str) -> str:
    """The system prompt without the `<tools>` block and the Hermes call-format instructions."""
    block = tools_block(system)
    if block is None:
        return system.strip()
    # Drop the sentence announcing the block ("... within <tools> </tools> XML tags.").
    sentences = _SENTENCE_END.split(system[:block.start()].strip())
    preamble = " ".join(sentence for sentence in sentences if sentence and "<tools>" not in sentence)
    return _LEAD_IN.sub("", preamble).strip()


def parse_calls(text: str, ids: ToolCallIds) -> dict[str, Any]:
    """An assistant turn: prose outside `<tool_call>` tags is content, each tag one call."""
    calls = []
    for match in _TOOL_CALL.finditer(text):
        body = loads_loose(_body(match.group(1)), "tool call")
        if not isinstance(body, dict):
            raise PromptError(f"tool call is a {type(body).__name__}, not an object")
        if "name" not in body and isinstance(body.get("arguments"), dict) and "name" in body["arguments"]:
            inner = dict(body["arguments"])
            body = {"name": inner.pop("name"), "arguments": inner.pop("arguments", inner)}
        name = body.get("name")
        if not isinstance(name, str) or not name:
            raise PromptError(f"tool call has no name: {_body(match.group(1))[:80]!r}")
        calls.append(ids.call(name, arguments_object(body.get("arguments"), name)))
    prose = _TOOL_CALL.sub("", text).strip()
    return assistant_message(prose, calls)


def parse_responses(text: str, ids: ToolCallIds) -> list[dict[str, Any]]:
    """A tool turn: one result per `<tool_response>` (the whole turn if it has no tags)."""
    bodies = [_body(m.group(1)) for m in _TOOL_RESPONSE.finditer(text)] or [_body(text)]
    results = []
    for body in bodies:
        try:
            parsed = loads_loose(body, "tool response")
        except PromptError:
            parsed = None
        if isinstance(parsed, dict) and isinstance(parsed.get("name"), str) and "content" in parsed:
            content = parsed["content"]
            if not isinstance(content, str):
                content = json.dumps(content, ensure_ascii=False)
            results.append(ids.result(content, parsed["name"]))
        else:
            results.append(ids.result(body))
    return results


def convert(record: Mapping[str, Any], *, whole: bool = False) -> Conversation:
    """A Hermes record's conversation up to its last human turn, with its tools."""
    turns = sharegpt_turns(record, {**ROLES, "tool": "tool"})
    system = next((text for role, text in turns if role == "system"), "")
    tools = parse_tools(record, system)
    ids = ToolCallIds()
    messages: list[dict[str, Any]] = []
    for role, text in prompt_turns(turns, whole=whole):
        if role == "system":
            content = clean_system(text) if tools else text
            if content:
                messages.append({"role": "system", "content": content})
        elif role == "user":
            messages.append({"role": "user", "content": text})
        elif role == "assistant":
            messages.append(parse_calls(text, ids))
        else:
            messages.extend(parse_responses(text, ids))
    return Conversation(messages=messages, tools=tools or None, source_id=record_id(record, *ID_FIELDS))
