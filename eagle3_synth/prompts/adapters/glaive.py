"""glaive: glaiveai/glaive-function-calling-v2 text-format records (B1).

A record is two strings. `system` is `SYSTEM: <preamble> -` followed by zero or more pretty-printed
JSON function definitions `{name, description, parameters}` (concatenated, not a list); `chat`
holds the turns, each starting at a line with `USER:`, `ASSISTANT:` or `FUNCTION RESPONSE:`,
assistant turns ending in ` <|endoftext|>`. A call is `<functioncall> {"name": "f", "arguments":
'{"k": "v"}'}`: the arguments are a single-quoted JSON string, so the call as a whole is not JSON.

Real record (row 25475's shape, shortened):

    {"system": "SYSTEM: You are a helpful assistant with access to the following functions. Use
                them if required -\\n{\\n    \\"name\\": \\"detect_language\\", ...}\\n",
     "chat": "USER: Which language is this?\\n\\n\\nASSISTANT: Please provide the text.
              <|endoftext|>\\n\\n\\nUSER: \\"Je suis un étudiant\\"\\n\\n\\nASSISTANT: <functioncall>
              {\\"name\\": \\"detect_language\\", \\"arguments\\": '{\\"text\\": \\"Je suis un
              étudiant\\"}'} <|endoftext|>\\n\\n\\nFUNCTION RESPONSE: {\\"language\\": \\"French\\"}
              \\n\\n\\nASSISTANT: The text is in French. <|endoftext|>\\n\\n\\n"}

becomes `tools=[{"type": "function", "function": {"name": "detect_language", ...}}]` and messages
`system: "You are a helpful assistant with access to the following functions. Use them if
required -"`, `user: "Which language is this?"`, `assistant: "Please provide the text."`,
`user: "\\"Je suis un étudiant\\""` -- the call, its response and the answer come after the last
user turn and are dropped.

Rules: `<|endoftext|>` (glaive's turn terminator, a control token for some tokenizers) is removed;
prose before `<functioncall>` stays as the assistant's content; `"parameters"` is accepted for
`"arguments"`; `\\'` inside the quoted arguments is unescaped; each FUNCTION RESPONSE answers the
oldest unanswered call; identical repeated definitions are dropped, two different definitions under
one name reject the record. A role marker counts only at the start of a line.
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
    loads_loose,
    prompt_turns,
    unique_tools,
)
from eagle3_synth.errors import PromptError

VERSION = 1
# Fields naming the record in its dataset, first present wins (none: the reader's row is used).
ID_FIELDS: tuple[str, ...] = ()

ROLE_MARKERS = {"USER": "user", "ASSISTANT": "assistant", "FUNCTION RESPONSE": "tool"}
_MARKER = re.compile(r"^(USER|ASSISTANT|FUNCTION RESPONSE):[ \t]?", re.MULTILINE)
_END_OF_TEXT = "<|endoftext|>"
_CALL = "<functioncall>"
# {"name": "f", "arguments": '<json>'} with the single-quoted string running to the final '}.
_QUOTED_CALL = re.compile(
    r"\{\s*\"name\"\s*:\s*\"(?P<name>[^\"]*)\"\s*,\s*\"(?:arguments|parameters)\"\s*:\s*'(?P<args>.*)'\s*\}",
    re.DOTALL,
)


def parse_system(system: str) -> tuple[str, list[dict[str, Any]]]:
    """(system prompt without the definitions, tool definitions) of a `system` field."""
    text = system.strip()
    if text.startswith("SYSTEM:"):
        text = text[len("SYSTEM:"):].strip()
    start = text.find("{")
    if start < 0:
        return text, []
    preamble, rest = text[:start].strip(), text[start:]
    decoder = json.JSONDecoder()
    tools, position = [], 0
    while position < len(rest) and rest[position] == "{":
        try:
            definition, position = decoder.raw_decode(rest, position)
        except json.JSONDecodeError as exc:
            raise PromptError(f"system: function definition {len(tools) + 1} is not valid JSON ({exc.msg})") from None
        tools.append(function_tool(definition, "system"))
        while position < len(rest) and rest[position].isspace():
            position += 1
    trailing = rest[position:].strip()
    prompt = "\n\n".join(part for part in (preamble, trailing) if part)
    return prompt, unique_tools(tools, "system")


def split_chat(chat: str) -> list[tuple[str, str]]:
    """`(role, text)` per turn, `<|endoftext|>` removed, text stripped."""
    markers = list(_MARKER.finditer(chat))
    if not markers or chat[: markers[0].start()].strip():
        raise PromptError("chat does not start with USER:, ASSISTANT: or FUNCTION RESPONSE:")
    turns = []
    for i, marker in enumerate(markers):
        end = markers[i + 1].start() if i + 1 < len(markers) else len(chat)
        text = chat[marker.end():end].replace(_END_OF_TEXT, "").strip()
        turns.append((ROLE_MARKERS[marker.group(1)], text))
    return turns


def parse_call(text: str) -> tuple[str, Any]:
    """(name, raw arguments) of the text after `<functioncall>`."""
    call: Any = None
    try:
        call = json.loads(text)
    except ValueError:
        match = _QUOTED_CALL.fullmatch(text)
        if match:
            return match.group("name"), match.group("args").replace("\\'", "'")
        try:
            call = loads_loose(text, "call")
        except PromptError:
            snippet = text if len(text) <= 80 else text[:77] + "..."
            raise PromptError(f"function call cannot be parsed (truncated?): {snippet!r}") from None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not call["name"]:
        raise PromptError(f"function call has no name: {text[:80]!r}")
    return call["name"], call.get("arguments", call.get("parameters"))


def convert(record: Mapping[str, Any], *, whole: bool = False) -> Conversation:
    """A glaive record's conversation up to its last USER turn; tools from its `system`."""
    system, chat = record.get("system"), record.get("chat")
    if not isinstance(chat, str):
        raise PromptError("field 'chat' is missing or not a string")
    if system is not None and not isinstance(system, str):
        raise PromptError("field 'system' is not a string")
    prompt, tools = parse_system(system or "")
    ids = ToolCallIds()
    messages: list[dict[str, Any]] = [{"role": "system", "content": prompt}] if prompt else []
    for role, text in prompt_turns(split_chat(chat), whole=whole):
        if role == "user":
            messages.append({"role": "user", "content": text})
        elif role == "tool":
            messages.append(ids.result(text))
        else:
            prose, *calls = text.split(_CALL)
            tool_calls = []
            for call in calls:
                name, arguments = parse_call(call.strip())
                tool_calls.append(ids.call(name, arguments_object(arguments, name)))
            messages.append(assistant_message(prose.strip(), tool_calls))
    return Conversation(messages=messages, tools=tools or None)
