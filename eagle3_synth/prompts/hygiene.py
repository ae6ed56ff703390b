"""Prompt hygiene: the rules that skip a prompt, each with a reason people can count.

Each reject is counted by reason, logged, and written to `rejects.jsonl` with its `sample_id`,
source id, reason and detail; `--strict` makes the first one fatal:
- `unparseable`: the record (or prompts line) cannot be read or converted: not UTF-8, a binary
  file, a JSON array cut before it, a Parquet row lacking the adapter's columns, a string with a
  lone surrogate (`"\\ud800"` is valid JSON; the tokenizer, Arrow and every UTF-8 writer refuse it)
  or a value that is not JSON (a Parquet `bytes` or timestamp column) anywhere in the conversation;
- `control_token`: message text contains one of the tokenizer's control tokens (`<|im_end|>`,
  `<think>`...), which templating would turn into the real control token;
- `tools_not_rendered`: the conversation has tools, but the chat template does not render `tools`
  and the model family documents no system-prompt tool description (the model would not see them);
- `template_error`: the chat template refuses the conversation in the message form probed for it
  (`forms.py`);
- `too_long`: more prompt tokens than the model's context minus `max_new_tokens`, or than the
  engine's own limit where it reports a tighter one (SGLang's context, max_req_input_len and
  speculative slots);
- `duplicate`: the same prompt ids as an earlier kept prompt (hash of the templated ids).
"""

from __future__ import annotations

import difflib
import hashlib
import inspect
import json
import re
from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from eagle3_synth.contract.row import PreparedPrompt
from eagle3_synth.errors import PromptError, ConfigError
from eagle3_synth.prompts.conversation import Conversation
from eagle3_synth.prompts.selection import Candidate
from eagle3_synth.prompts.templating import ChatTokenizer
from eagle3_synth.contract.profiles import ModelProfile
from eagle3_synth.prompts.configs import ConfigSpec

# Template kwargs checked before anything runs: a kwarg the chat template never reads, a value the
# model family does not take, or a name transformers passes to the template itself.
#
# A template kwarg is only ever read by the template, and Jinja renders an unknown kwarg as nothing:
# `--template-kwarg thinkng=false` (a typo) would run for days in the default thinking mode, and
# `thinking=maybe` is truthy. So each kwarg -- from `--template-kwarg`, `--template-kwarg-mix` and a
# config's `template_kwargs` -- is checked against:
#
# - the names the template reads: its undeclared variables (`jinja2.meta.find_undeclared_variables`
#   over the template parsed by transformers' own Jinja environment, as transformers'
#   `_get_template_variables` does, transformers 5.25 utils/chat_template_utils.py), less those reserved below.
#   `--template-kwarg-unchecked` skips this for a template that reads a kwarg indirectly (a
#   tokenizer's own `apply_chat_template` code);
# - the values the model profile lists for it (`thinking_kwargs` in contract/profiles.yaml: Kimi's
#   `thinking` is true or false, gpt-oss's `reasoning_effort` low, medium or high);
# - the reserved names, refused always: the arguments of `apply_chat_template` and
#   `render_jinja_template` (transformers 5.25 tokenization_utils_base.py
#   `PreTrainedTokenizerBase.apply_chat_template`, chat_template_utils.py `render_jinja_template`),
#   `messages` (which `render_jinja_template` passes itself), the tokenizer's special tokens (merged
#   under the kwargs in `apply_chat_template`) and the Jinja environment's globals (`raise_exception`,
#   `namespace`..., chat_template_utils.py `_cached_compile_jinja_template`).

UNCHECKED_OPTION = "--template-kwarg-unchecked"


@dataclass(frozen=True)
class TemplateNames:
    """What a tokenizer's chat template reads as kwargs, and the names no kwarg may take (with why)."""

    reads: frozenset[str]
    reserved: Mapping[str, str]


def _templates(tokenizer: Any) -> list[str]:
    """The tokenizer's chat template, or each of its named ones (`default`, `tool_use`...)."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, Mapping):
        return [t for t in template.values() if isinstance(t, str)]
    if isinstance(template, list):  # the serialized form: [{"name", "template"}]
        return [t["template"] for t in template if isinstance(t, Mapping) and isinstance(t.get("template"), str)]
    return [template] if isinstance(template, str) else []


def _parameters(function: Any) -> set[str]:
    return {name for name, p in inspect.signature(function).parameters.items()
            if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and name != "self"}


def template_names(tokenizer: Any) -> TemplateNames:
    """The kwargs the tokenizer's chat template reads and the reserved names; ConfigError if the
    template does not parse."""
    import jinja2
    import jinja2.meta
    from transformers.utils.chat_template_utils import _compile_jinja_template, render_jinja_template

    reserved: dict[str, str] = {}
    for name in _parameters(render_jinja_template) | _parameters(type(tokenizer).apply_chat_template):
        reserved[name] = "an argument of transformers' apply_chat_template, not a template kwarg"
    for name in ("messages", "tools", "add_generation_prompt"):
        reserved[name] = "eagle3-synth passes messages, tools and add_generation_prompt=True itself, per prompt"
    names = set(getattr(tokenizer, "SPECIAL_TOKENS_ATTRIBUTES", ())) | set(getattr(tokenizer, "special_tokens_map", {}))
    for name in names:
        reserved[name] = "a special token of the tokenizer, which transformers passes to the template itself"
    reads: set[str] = set()
    for template in _templates(tokenizer):
        try:
            compiled = _compile_jinja_template(template)
            found = jinja2.meta.find_undeclared_variables(compiled.environment.parse(template))
        except jinja2.TemplateSyntaxError as exc:
            raise ConfigError(f"the chat template does not parse: {exc.message} (line {exc.lineno})") from None
        for name in compiled.environment.globals:
            reserved.setdefault(name, "a function or name the template's Jinja environment defines")
        reads |= found
    return TemplateNames(reads=frozenset(reads - set(reserved)), reserved=reserved)


def _allowed(values: Sequence[Any], value: Any) -> bool:
    """`value` is one of `values`, type and all (`1` is not `true`, `"true"` is not `true`)."""
    return any(type(value) is type(v) and value == v for v in values)


def kwarg_problems(kwargs: Mapping[str, Any], origins: Mapping[str, str], names: TemplateNames,
                   profile: ModelProfile | None, *, unchecked: bool = False) -> dict[str, str]:
    """Each kwarg that cannot be right -> one line naming where it came from (`origins[name]`, an
    option or a config) and what would be: the names the template reads, or the values allowed."""
    problems: dict[str, str] = {}
    for name, value in kwargs.items():
        where = f"{origins.get(name, '--template-kwarg')} {name}"
        if name in names.reserved:
            problems[name] = f"{where}: a reserved name ({names.reserved[name]})"
            continue
        if not unchecked and name not in names.reads:
            close = difflib.get_close_matches(name, sorted(names.reads), n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            reads = ", ".join(sorted(names.reads)) or "none"
            problems[name] = (f"{where}: the chat template does not read {name!r}, so it would change nothing; "
                              f"{hint}the kwargs it reads: {reads} ({UNCHECKED_OPTION} if it reads {name!r} "
                              "another way)")
            continue
        allowed = profile.thinking_kwargs.get(name) if profile is not None else None
        if allowed and not _allowed(allowed, value):
            problems[name] = (f"{where}={json.dumps(value, ensure_ascii=False)}: profile {profile.name} takes "
                              f"{name} as one of {', '.join(json.dumps(v) for v in allowed)}")
            continue
        bad = unwritable(value, f"{where}'s value")
        if bad:
            problems[name] = bad
    return problems


def run_kwarg_problems(tokenizer: Any, profile: ModelProfile | None, config: ConfigSpec, given: Mapping[str, Any],
                       mix: Sequence[tuple[Mapping[str, Any], float]] = (), *, unchecked: bool = False) -> list[str]:
    """The problems of a run's kwargs: the config's `template_kwargs` under `--template-kwarg`
    (`given`), and every kwargs of `--template-kwarg-mix` (`mix`), each named by its origin."""
    names = template_names(tokenizer)
    origins = {name: f"config {config.name}: template_kwargs" for name in config.template_kwargs}
    origins.update({name: "--template-kwarg" for name in given})
    problems = list(kwarg_problems({**config.template_kwargs, **given}, origins, names, profile,
                                   unchecked=unchecked).values())
    for kwargs, _ in mix:
        for problem in kwarg_problems(kwargs, dict.fromkeys(kwargs, "--template-kwarg-mix"), names, profile,
                                      unchecked=unchecked).values():
            if problem not in problems:
                problems.append(problem)
    return problems


def check_run_kwargs(tokenizer: Any, profile: ModelProfile | None, config: ConfigSpec, given: Mapping[str, Any],
                     mix: Sequence[tuple[Mapping[str, Any], float]] = (), *, unchecked: bool = False) -> None:
    """`run_kwarg_problems` as one ConfigError (one line), before the engine is created."""
    problems = run_kwarg_problems(tokenizer, profile, config, given, mix, unchecked=unchecked)
    if problems:
        raise ConfigError("; ".join(problems))


REJECT_REASONS = ("unparseable", "control_token", "tools_not_rendered", "template_error", "too_long", "duplicate")
# Bump when a hygiene rule changes what is kept, so old runs are not mixed with new prompt lists.
# 2: message forms probed per template, tools_not_rendered.
HYGIENE_VERSION = 2


class Reject(Exception):
    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason


def control_tokens(tokenizer: Any) -> list[str]:
    """The tokenizer's special tokens plus `<...>` added tokens (Qwen's `<think>`, `<tool_call>`):
    strings that templating turns into control tokens wherever they appear in message text."""
    tokens = {token.content for token in tokenizer.added_tokens_decoder.values()
              if token.special or (token.content.startswith("<") and token.content.endswith(">"))}
    return sorted((t for t in tokens if t.strip()), key=len, reverse=True)


def unwritable(value: Any, where: str) -> str | None:
    """Where in `value` (JSON-like, walked depth first) a string holds a lone surrogate or a value is
    not JSON, said for people; None when every string is valid Unicode and every value is JSON.

    A lone surrogate crashes what comes after templating, not templating itself: the tokenizers'
    batch encode raises TypeError ("TextEncodeInput must be Union[...]", from
    `TokenizersBackend._encode_plus`), and `pyarrow.array` and a UTF-8 file's `write` raise
    UnicodeEncodeError ("surrogates not allowed") -- for the prompts and rejects files and the rows.
    """
    if isinstance(value, str):
        if value.isascii():
            return None
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            return (f"{where} has a lone surrogate U+{ord(value[exc.start]):04X} at character {exc.start} "
                    "(not valid Unicode: a \\ud800-style escape without its pair)")
        return None
    if value is None or isinstance(value, (bool, int, float)):
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{where} has a key that is a {type(key).__name__}, not a string"
            found = unwritable(key, f"a key of {where}") or unwritable(item, f"{where}.{key}")
            if found:
                return found
        return None
    if isinstance(value, (list, tuple)):
        return next((found for i, item in enumerate(value) if (found := unwritable(item, f"{where}[{i}]"))), None)
    return f"{where} is a {type(value).__name__}, not a JSON value"


def conversation_problem(conversation: Conversation) -> str | None:
    """`unwritable` over everything of a conversation that is templated or written."""
    return (unwritable(conversation.source_id, "the source id") or unwritable(conversation.messages, "messages")
            or unwritable(conversation.tools, "tools") or unwritable(conversation.script, "the conversation"))


def rendered_texts(conversation: Conversation) -> Iterator[tuple[str, str]]:
    """(where, text) of every string a template renders from the conversation."""
    for i, message in enumerate(conversation.messages):
        if isinstance(message.get("content"), str):
            yield f"messages[{i}]", message["content"]
        if message.get("tool_calls"):
            yield f"messages[{i}].tool_calls", json.dumps(message["tool_calls"], ensure_ascii=False)
    if conversation.tools:
        yield "tools", json.dumps(conversation.tools, ensure_ascii=False)
    # Later user turns and tool results of an on-policy conversation enter later prompts (its
    # assistant turns never do: the target rewrites them).
    for i, message in enumerate((conversation.script or [])[len(conversation.messages):], len(conversation.messages)):
        if message.get("role") != "assistant" and isinstance(message.get("content"), str):
            yield f"messages[{i}]", message["content"]


class PromptChecks:
    """The hygiene rules, split around templating: `precheck` before (unparseable, control tokens),
    `accept` after (template error, too long, duplicate). Each raises `Reject`."""

    def __init__(self, chat: ChatTokenizer, max_prompt_tokens: int | None,
                 too_long_reason: str = "the model's context minus max_new_tokens"):
        self.chat = chat
        self.max_prompt_tokens = max_prompt_tokens
        self.too_long_reason = too_long_reason
        tokens = control_tokens(chat.tokenizer)
        self.control = re.compile("|".join(map(re.escape, tokens))) if tokens else None
        self.seen: dict[bytes, int] = {}

    def precheck(self, candidate: Candidate) -> Conversation:
        if isinstance(candidate.item, PromptError):
            raise Reject("unparseable", str(candidate.item))
        conversation = candidate.item
        problem = conversation_problem(conversation)
        if problem:
            raise Reject("unparseable", problem)
        if conversation.tools and not self.chat.form.tools_visible:
            raise Reject("tools_not_rendered", f"the chat template does not render tools and this model family "
                         f"documents no system-prompt tool description: the model would not see its "
                         f"{len(conversation.tools)} tool(s)")
        if self.control is not None:
            for where, text in rendered_texts(conversation):
                match = self.control.search(text)
                if match:
                    raise Reject("control_token", f"{where} contains {match.group(0)!r}, which the tokenizer "
                                                  "reads as a control token")
        return conversation

    def accept(self, candidate: Candidate, conversation: Conversation, ids: list[int] | PromptError) -> PreparedPrompt:
        if isinstance(ids, PromptError):
            form = self.chat.form
            raise Reject("template_error", f"{ids} (message form: content {form.call_content}, arguments "
                                           f"{form.arguments})")
        if self.max_prompt_tokens is not None and len(ids) > self.max_prompt_tokens:
            raise Reject("too_long", f"{len(ids)} prompt tokens > {self.max_prompt_tokens} ({self.too_long_reason})")
        digest = hashlib.blake2b(array("q", ids).tobytes(), digest_size=16).digest()
        first = self.seen.setdefault(digest, candidate.sample_id)
        if first != candidate.sample_id:
            raise Reject("duplicate", f"same prompt ids as sample_id {first}")
        return PreparedPrompt(sample_id=candidate.sample_id, source_id=candidate.source_id, prompt_ids=ids,
                              messages=conversation.messages, tools=conversation.tools, script=conversation.script)
