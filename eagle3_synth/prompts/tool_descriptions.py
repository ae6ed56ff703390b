"""Documented system-prompt tool descriptions, for chat templates that never render `tools`.

The DeepSeek-V3.1 and R1 templates as shipped ignore the `tools` argument; DeepSeek-V3.1's model
card documents instead how tools are described to the model: the system prompt followed by a blank
line and a "## Tools" section (card, section "Toolcall"):

    <｜begin▁of▁sentence｜>{system prompt}\\n\\n{tool_description}<｜User｜>{query}<｜Assistant｜></think>

with one "### name" block per tool (its description and `json.dumps` of its parameters) and the
call format the model was trained on. Serving stacks that support DeepSeek-V3.1 tool calling build
the same text. Applying it is a deterministic function of the tools and the profile, done when
templating: the stored `messages`/`tools` columns keep the conversation as given, and `validate`
re-applies it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from eagle3_synth.errors import ConfigError

_DEEPSEEK_V31_FORMAT = (
    "IMPORTANT: ALWAYS adhere to this exact format for tool use:\n"
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>tool_call_name<｜tool▁sep｜>tool_call_arguments"
    "<｜tool▁call▁end｜>{{additional_tool_calls}}<｜tool▁calls▁end｜>\n"
    "\n"
    "Where:\n"
    "\n"
    "- `tool_call_name` must be an exact match to one of the available tools\n"
    "- `tool_call_arguments` must be valid JSON that strictly follows the tool's Parameters Schema\n"
    "- For multiple tool calls, chain them directly without separators or spaces"
)


def deepseek_v31(tools: Sequence[dict[str, Any]]) -> str:
    """The "## Tools" section of DeepSeek-V3.1's model card for `tools` (OpenAI function form)."""
    blocks = []
    for tool in tools:
        function = tool.get("function", tool)
        blocks.append(f"### {function['name']}\n"
                      f"Description: {function.get('description', '')}\n\n"
                      f"Parameters: {json.dumps(function.get('parameters', {}))}")
    return "## Tools\nYou have access to the following tools:\n\n" + "\n\n".join(blocks) + "\n\n" + _DEEPSEEK_V31_FORMAT


TOOL_DESCRIPTIONS: dict[str, Callable[[Sequence[dict[str, Any]]], str]] = {
    "deepseek_v31": deepseek_v31,
}


def with_tool_description(messages: list[dict[str, Any]], tools: Sequence[dict[str, Any]], name: str
                          ) -> list[dict[str, Any]]:
    """`messages` with the description `name` of `tools` appended to the system prompt (a system
    message is added in front when there is none). The input list is not changed."""
    try:
        describe = TOOL_DESCRIPTIONS[name]
    except KeyError:
        raise ConfigError(f"unknown tool description {name!r}; known: {sorted(TOOL_DESCRIPTIONS)}") from None
    description = describe(tools)
    if messages and messages[0].get("role") == "system" and isinstance(messages[0].get("content"), str):
        system = messages[0]["content"]
        first = {**messages[0], "content": f"{system}\n\n{description}" if system else description}
        return [first, *messages[1:]]
    return [{"role": "system", "content": description}, *messages]
