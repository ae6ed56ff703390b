"""The message form a model's own chat template renders, found by probing it once per run.

Real templates disagree on the shape of an assistant turn that calls tools (docs/data.md, "Model
families"): the Qwen3 and DeepSeek-V3.1 templates concatenate `content`, which transformers 5.x
has dropped when it was None, so they need `""`; DeepSeek-V3.1/R1 as shipped concatenate a call's
`arguments` as a string (an object raises TypeError), llama.cpp's copies of them `tojson` it (a
string comes out double-encoded), DeepSeek-V4, Qwen3-Coder and GLM iterate an object. No one form
fits every template, so `probe_message_form` renders small conversations in each form and picks
the one this template renders faithfully; it is used for every prompt of the run and recorded in
run info. A form changes only the container of the text (None vs `""`, a JSON object vs its JSON
string); no text of the conversation is altered.

The probe also finds templates that never render `tools` (same ids with and without them): there
the profile's documented system-prompt tool description is used (below), and
where the family documents none, prompts with tools are rejected as `tools_not_rendered`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from eagle3_synth.errors import PromptError, ConfigError
from eagle3_synth.prompts.conversation import Conversation

# Documented system-prompt tool descriptions, for chat templates that never render `tools`.
#
# The DeepSeek-V3.1 and R1 templates as shipped ignore the `tools` argument; DeepSeek-V3.1's model
# card documents instead how tools are described to the model: the system prompt followed by a blank
# line and a "## Tools" section (card, section "Toolcall"):
#
#     <｜begin▁of▁sentence｜>{system prompt}\n\n{tool_description}<｜User｜>{query}<｜Assistant｜></think>
#
# with one "### name" block per tool (its description and `json.dumps` of its parameters) and the
# call format the model was trained on. Serving stacks that support DeepSeek-V3.1 tool calling build
# the same text. Applying it is a deterministic function of the tools and the profile, done when
# templating: the stored `messages`/`tools` columns keep the conversation as given, and `validate`
# re-applies it.

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


class Renders(Protocol):
    """What the probe needs of a chat tokenizer (templating.ChatTokenizer): render in a given form."""

    def render(self, conversation: Conversation, *, form: "MessageForm | None" = None) -> str: ...

CONTENT_FORMS = ("as_given", "empty")


@dataclass(frozen=True)
class MessageForm:
    """How conversations are handed to this template (see the module doc)."""

    # A call-only assistant turn's content: "as_given" (None, which transformers drops) or "empty" ("").
    call_content: str = "as_given"
    # A call's arguments: "as_given", "object" (a JSON string is parsed) or "string" (an object is
    # dumped as json.dumps(ensure_ascii=False) writes it, which is what the template's tojson writes).
    arguments: str = "as_given"
    # Whether the template renders `tools`; when it does not, `tool_description` names the
    # documented system-prompt description used instead (None: prompts with tools are rejected).
    tools_rendered: bool = True
    tool_description: str | None = None
    # The message field this family's template reads earlier reasoning from: `reasoning_content`
    # (what adapters write), or gpt-oss's `thinking`, where the field is renamed when templating.
    reasoning_field: str = "reasoning_content"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> "MessageForm":
        return cls(**data) if data else cls()

    @property
    def tools_visible(self) -> bool:
        return self.tools_rendered or self.tool_description is not None

    def apply(self, conversation: Conversation) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
        """(messages, tools) to render; PromptError when a call's arguments cannot take the form."""
        messages = [self._message(m) for m in conversation.messages]
        tools = conversation.tools
        if tools and not self.tools_rendered and self.tool_description is not None:
            return with_tool_description(messages, tools, self.tool_description), None
        return messages, tools

    def _message(self, message: dict[str, Any]) -> dict[str, Any]:
        if self.reasoning_field != "reasoning_content" and "reasoning_content" in message \
                and self.reasoning_field not in message:
            message = {(self.reasoning_field if k == "reasoning_content" else k): v for k, v in message.items()}
        calls = message.get("tool_calls")
        if not calls or (self.call_content == "as_given" and self.arguments == "as_given"):
            return message
        out = dict(message)
        if self.call_content == "empty" and out.get("content") is None:
            out["content"] = ""
        if self.arguments != "as_given":
            out["tool_calls"] = [self._call(call) for call in calls]
        return out

    def _call(self, call: dict[str, Any]) -> dict[str, Any]:
        function = call.get("function")
        if not isinstance(function, dict) or "arguments" not in function:
            return call
        arguments = function["arguments"]
        if self.arguments == "string" and not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        elif self.arguments == "object" and isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except ValueError:
                raise PromptError(f"arguments of call {function.get('name')!r} are not JSON, and this chat template "
                                  "needs them as an object") from None
        return {**call, "function": {**function, "arguments": arguments}}


# -- probing ----------------------------------------------------------------------------------------

_PROBE_ARGS = {"probe_city": "Probe Town 7"}
_PROBE_TOOL = {"type": "function", "function": {
    "name": "probe_lookup", "description": "Look a probe up",
    "parameters": {"type": "object", "properties": {"probe_city": {"type": "string"}}, "required": ["probe_city"]}}}
_PROBE_CALL = {"id": "functions.probe_lookup:0", "type": "function",
               "function": {"name": "probe_lookup", "arguments": _PROBE_ARGS}}


def _probe_conversations(arguments: Any) -> list[Conversation]:
    """A call in the history (before the last user turn) and a call answered last (the turn to
    generate follows a tool result), each with a call-only assistant turn (content None)."""
    call = {**_PROBE_CALL, "function": {**_PROBE_CALL["function"], "arguments": arguments}}
    head = [{"role": "system", "content": "You are a probe."}, {"role": "user", "content": "Where is the probe?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "name": "probe_lookup", "content": "probe found"}]
    return [Conversation([*head, {"role": "user", "content": "Thanks, and now?"}], [_PROBE_TOOL]),
            Conversation(head, [_PROBE_TOOL])]


@dataclass
class ProbeReport:
    """What each form did on this template, for run info and `doctor`."""

    form: MessageForm
    # (content form, arguments given as) -> "ok", "double-encoded", "arguments not shown" or the error
    outcomes: dict[str, str] = field(default_factory=dict)
    renders_calls: bool = True  # False: no form renders an assistant tool call at all
    faithful: bool = True  # False: the chosen form renders, but not the call's arguments as given

    def lines(self) -> list[str]:
        return [f"{key}: {value}" for key, value in self.outcomes.items()]


def _outcome(chat: Renders, form: MessageForm, raw_arguments: Any) -> str:
    try:
        texts = [chat.render(conversation, form=form) for conversation in _probe_conversations(raw_arguments)]
    except PromptError as exc:
        return str(exc).removeprefix("chat template failed: ")
    for text in texts:
        if '\\"probe_city' in text:
            return "double-encoded (arguments rendered as an escaped JSON string)"
        if "probe_city" not in text or "Probe Town 7" not in text:
            return "arguments not shown"
    return "ok"


def tools_rendered(chat: Renders) -> bool:
    """Whether the template renders `tools` at all: the same text with and without them means no."""
    plain = MessageForm()
    question = [{"role": "user", "content": "Where is the probe?"}]
    try:
        with_tools = chat.render(Conversation(question, [_PROBE_TOOL]), form=plain)
        without = chat.render(Conversation(question, None), form=plain)
    except PromptError:
        return True  # a template that refuses this is reported by the prompts themselves
    return with_tools != without


def probe_message_form(chat: Renders, tool_description: str | None,
                       reasoning_field: str = "reasoning_content") -> ProbeReport:
    """The form this template renders (see the module doc); `tool_description` and
    `reasoning_field` are the profile's."""
    rendered = tools_rendered(chat)
    tools = {"tools_rendered": rendered, "tool_description": None if rendered else tool_description,
             "reasoning_field": reasoning_field}
    outcomes: dict[str, str] = {}
    choice: tuple[str, str, bool] | None = None  # (content, arguments, faithful)
    fallback: tuple[str, str, bool] | None = None
    for content in CONTENT_FORMS:
        as_object = _outcome(chat, MessageForm(content, "as_given", **tools), _PROBE_ARGS)
        as_string = _outcome(chat, MessageForm(content, "as_given", **tools), json.dumps(_PROBE_ARGS))
        outcomes[f"content {content}, arguments object"] = as_object
        outcomes[f"content {content}, arguments string"] = as_string
        if choice is None:
            if as_object == "ok" and as_string == "ok":
                choice = (content, "as_given", True)
            elif as_object == "ok":
                choice = (content, "object", True)
            elif as_string == "ok":
                choice = (content, "string", True)
        if fallback is None:
            rendering = [arg for arg, outcome in (("object", as_object), ("string", as_string))
                         if outcome in ("ok", "arguments not shown") or outcome.startswith("double-encoded")]
            if rendering:
                fallback = (content, rendering[0], False)
    picked = choice or fallback
    if picked is None:
        return ProbeReport(MessageForm(**tools), outcomes, renders_calls=False, faithful=False)
    content, arguments, faithful = picked
    return ProbeReport(MessageForm(content, arguments, **tools), outcomes, renders_calls=True, faithful=faithful)
