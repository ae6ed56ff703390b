"""Conversations (chat messages + tools) and the prepared-prompts JSONL format.

A prompts file holds one JSON object per line: `{"messages": [...], "tools": [...]?, "id"?: ...}`.
The line index is the `sample_id`, so a bad line is skipped without renumbering the others.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import PromptError

ROLES = ("system", "user", "assistant", "tool")


@dataclass(frozen=True)
class Conversation:
    """What a chat template renders: messages up to the last user turn, plus tool definitions."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    source_id: str = ""


def validate_conversation(obj: Any, where: str) -> Conversation:
    """Check one prompts record and turn it into a Conversation; `where` names it in errors."""
    if not isinstance(obj, dict):
        raise PromptError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    messages = obj.get("messages")
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
    tools = obj.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise PromptError(f"{where}: 'tools' must be a list of tool definitions")
    source_id = obj.get("id", "")
    return Conversation(messages=messages, tools=tools or None, source_id="" if source_id is None else str(source_id))


def read_prompts_jsonl(path: str | Path) -> Iterator[tuple[int, Conversation | PromptError]]:
    """Yield `(sample_id, conversation)` per line, or `(sample_id, PromptError)` for a bad line.

    Errors are yielded, not raised, so that the caller decides between skipping and `--strict`.
    """
    with open(path, encoding="utf-8") as handle:
        for line_index, line in enumerate(handle):
            where = f"{path}:{line_index + 1} (sample_id {line_index})"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                yield line_index, PromptError(f"{where}: not valid JSON ({exc.msg})")
                continue
            try:
                yield line_index, validate_conversation(obj, where)
            except PromptError as exc:
                yield line_index, exc
