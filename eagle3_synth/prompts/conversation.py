"""Conversations (chat messages + tools) and the prepared-prompts JSONL format.

A prompts file holds one JSON object per line: `{"messages": [...], "tools": [...]?, "id"?: ...}`.
The line index is the `sample_id`, so a bad line is skipped without renumbering the others.

The message shapes are the ones chat templates expect (the OpenAI / transformers convention):
`{"role": "assistant", "content": str | None, "tool_calls": [{"id", "type": "function",
"function": {"name", "arguments": {...}}}]}` and `{"role": "tool", "tool_call_id", "name",
"content"}`. Source adapters (`eagle3_synth.sources`) build them with the helpers below, so every
source ends up in the same form.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eagle3_synth.errors import PromptError
from eagle3_synth.prompts.readers import iter_text_lines

ROLES = ("system", "user", "assistant", "tool")

# An assistant turn that starts with its reasoning: `<think>...</think>answer`.
_LEADING_REASONING = re.compile(r"\A\s*<think>(.*?)</think>", re.DOTALL)


@dataclass(frozen=True)
class Conversation:
    """What a chat template renders: messages up to the last user turn, plus tool definitions.

    `script`: for on-policy conversations (`--turns all`, `prompts/turns.py`), the whole source
    conversation the prompt was cut from -- later user turns and tool results are taken from it;
    None when only one turn is generated.
    """

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    source_id: str = ""
    script: list[dict[str, Any]] | None = None


def check_messages(messages: Any, where: str) -> None:
    """Raise PromptError (prefixed with `where`) unless `messages` is a list templates can render."""
    if not isinstance(messages, list) or not messages:
        raise PromptError(f"{where}: 'messages' must be a non-empty list")
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise PromptError(f"{where}: messages[{i}] is not an object")
        role = message.get("role")
        if role not in ROLES:
            raise PromptError(f"{where}: messages[{i}] has unknown role {role!r}; expected one of {ROLES}")
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            raise PromptError(f"{where}: messages[{i}] content must be a string")
        if content is None and not message.get("tool_calls"):
            raise PromptError(f"{where}: messages[{i}] has neither content nor tool_calls")


def validate_conversation(obj: Any, where: str) -> Conversation:
    """Check one prompts record and turn it into a Conversation; `where` names it in errors."""
    if not isinstance(obj, dict):
        raise PromptError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    messages = obj.get("messages")
    check_messages(messages, where)
    tools = obj.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise PromptError(f"{where}: 'tools' must be a list of tool definitions")
    source_id = obj.get("id", "")
    return Conversation(messages=messages, tools=tools or None, source_id="" if source_id is None else str(source_id))


def read_prompts_jsonl(path: str | Path) -> Iterator[tuple[int, Conversation | PromptError]]:
    """Yield `(sample_id, conversation)` per line, or `(sample_id, PromptError)` for a bad line.

    Errors are yielded, not raised, so that the caller decides between skipping and `--strict`:
    a line that is not UTF-8 or not JSON, and a binary file (one error, at its first line), too.
    """
    for line_index, line, error in iter_text_lines(str(path), "--prompts"):
        where = f"{path}:{line_index + 1} (sample_id {line_index})"
        if error is not None:
            yield line_index, PromptError(f"{where}: {error}")
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            yield line_index, PromptError(f"{where}: not valid JSON ({exc.msg})")
            continue
        try:
            yield line_index, validate_conversation(obj, where)
        except PromptError as exc:
            yield line_index, exc


# -- building conversations from source records ------------------------------------------------

def is_blank(text: Any) -> bool:
    return text is None or (isinstance(text, str) and not text.strip())


def role_turns(
    record: Any, field: str, role_key: str, text_key: str, roles: Mapping[str, str]
) -> list[tuple[str, str]]:
    """`(role, text)` per turn of `record[field]` (a list of `{role_key, text_key}` objects), roles
    mapped through `roles` (case-insensitive); PromptError names the field and the bad turn."""
    items = record.get(field)
    if not isinstance(items, list):
        raise PromptError(f"field {field!r} is missing or not a list")
    turns = []
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise PromptError(f"{field}[{i}] is not an object")
        speaker, text = item.get(role_key), item.get(text_key)
        role = roles.get(speaker.lower()) if isinstance(speaker, str) else None
        if role is None:
            raise PromptError(f"{field}[{i}] has unknown role {speaker!r}")
        if text is not None and not isinstance(text, str):
            raise PromptError(f"{field}[{i}] {text_key} is a {type(text).__name__}, not a string")
        turns.append((role, text or ""))
    return turns


def prompt_turns(turns: Sequence[tuple[str, Any]], *, whole: bool = False) -> list[tuple[str, Any]]:
    """The turns of a prompt, from `(role, payload)` pairs with roles already normalised.

    Rules, the same for every source: blank system/user/assistant turns are dropped (a tool
    turn is kept even when empty: it answers a call); turns before the first user turn are
    dropped except system turns (a ShareGPT chunk may start mid-conversation); the conversation
    is cut after its last user turn, dropping the dataset's own answer (the target model writes
    a new one) -- unless `whole`, for on-policy conversations, which keep the turns after it (the
    target rewrites every assistant turn, `prompts/turns.py`). Raises PromptError when no user turn
    is left. Payloads are parsed by the caller afterwards, so a malformed turn after the cut never
    rejects a record.
    """
    kept = [(role, payload) for role, payload in turns if role == "tool" or not is_blank(payload)]
    users = [i for i, (role, _) in enumerate(kept) if role == "user"]
    if not users:
        raise PromptError("no user turn with text")
    first, last = users[0], len(kept) - 1 if whole else users[-1]
    return [turn for turn in kept[:first] if turn[0] == "system"] + kept[first : last + 1]


def assistant_message(content: str | None, tool_calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """An earlier assistant turn; leading `<think>...</think>` goes to `reasoning_content`.

    Templates render past reasoning their own way (Kimi and Qwen3 drop it before the last user
    turn), so it must not stay inside `content` as literal marker text.
    """
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if content:
        match = _LEADING_REASONING.match(content)
        if match:
            message["reasoning_content"] = match.group(1).strip("\n")
            message["content"] = content[match.end():].lstrip("\n")
    if tool_calls:
        message["tool_calls"] = tool_calls
        if not message["content"]:
            message["content"] = None
    elif message["content"] is None:
        message["content"] = ""
    return message


def count_calls(messages: Sequence[Mapping[str, Any]]) -> int:
    """Tool calls made in these messages: where the next generated turn's call ids continue
    (`history.history_message(first_call_index=...)`)."""
    return sum(len(message.get("tool_calls") or ()) for message in messages)


class ToolCallIds:
    """Gives each call of a conversation an id and matches tool results back to their call.

    Ids follow Kimi's `functions.<name>:<n>` (n counts the calls of the conversation): the only
    template family here that renders ids is Kimi's, and it was trained on that form; the others
    ignore ids. Results are matched to the oldest unanswered call, by name when one is given.
    """

    def __init__(self) -> None:
        self._count = 0
        self._pending: list[tuple[str, str]] = []  # (id, name) of calls without a result yet

    def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        call_id = f"functions.{name}:{self._count}"
        self._count += 1
        self._pending.append((call_id, name))
        return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}

    def result(self, content: str, name: str | None = None) -> dict[str, Any]:
        for index, (call_id, call_name) in enumerate(self._pending):
            if name is None or call_name == name:
                del self._pending[index]
                return {"role": "tool", "tool_call_id": call_id, "name": call_name, "content": content}
        wanted = f" to a call of {name!r}" if name else ""
        raise PromptError(f"a tool result{wanted} has no unanswered function call before it")


def loads_loose(text: str, what: str) -> Any:
    """JSON, else a Python literal (datasets mix `{"a": true}` and `{'a': True}`); PromptError if neither."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    import ast

    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        snippet = text if len(text) <= 80 else text[:77] + "..."
        raise PromptError(f"{what} is neither JSON nor a Python literal: {snippet!r}") from None


def arguments_object(value: Any, name: str) -> dict[str, Any]:
    """A call's arguments as the object templates expect: a JSON string is parsed, null is `{}`."""
    if isinstance(value, str):
        value = loads_loose(value, f"arguments of call {name!r}") if value.strip() else None
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise PromptError(f"arguments of call {name!r} are a {type(value).__name__}, not an object")
    return value


def function_tool(definition: Any, where: str) -> dict[str, Any]:
    """A tool definition in the `{"type": "function", "function": {...}}` form."""
    wrapped = isinstance(definition, dict) and definition.get("type") == "function"
    if wrapped and isinstance(definition.get("function"), dict):
        function = definition["function"]
    elif isinstance(definition, dict):
        function = definition
    else:
        raise PromptError(f"{where}: a tool definition is a {type(definition).__name__}, not an object")
    if not isinstance(function.get("name"), str) or not function["name"]:
        raise PromptError(f"{where}: a tool definition has no name")
    return {"type": "function", "function": function}


def unique_tools(tools: list[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    """Drop repeated identical definitions; two different definitions under one name are an error."""
    seen: dict[str, dict[str, Any]] = {}
    unique = []
    for tool in tools:
        name = tool["function"]["name"]
        if name in seen:
            if seen[name] != tool:
                raise PromptError(f"{where}: two different definitions of tool {name!r}")
            continue
        seen[name] = tool
        unique.append(tool)
    return unique


def text_messages(turns: Sequence[tuple[str, str]], *, whole: bool = False) -> list[dict[str, Any]]:
    """Messages of text-only turns (no tools): `prompt_turns` applied, assistants via `assistant_message`."""
    return [
        assistant_message(text) if role == "assistant" else {"role": role, "content": text}
        for role, text in prompt_turns(turns, whole=whole)
    ]


def record_id(record: Any, *fields: str) -> str:
    """The first of `fields` the record has, as a string; `""` if none (the reader adds its row)."""
    for name in fields:
        value = record.get(name)
        if value is not None and value != "":
            return str(value)
    return ""
