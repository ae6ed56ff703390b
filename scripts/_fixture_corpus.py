"""Family-format training texts for the fixture BPEs (used by ``make_fixture_tokenizers.py``).

A family's BPE is trained on ``corpus_texts(...)`` plus these texts: seeded synthetic conversations
rendered through the family's own chat template(s), each followed by the turn the model would emit in
that family's format (reasoning, answer, native tool calls), so that family-specific strings (DSML
tags, harmony headers, XML call tags, ...) tokenize compactly. The texts are split on the family's
added tokens before training, as encoding splits them out first.

Templates are rendered by a jinja environment set up like transformers' (sandboxed, trim_blocks,
lstrip_blocks, ``tojson`` = ``json.dumps(ensure_ascii=False)``, ``raise_exception``), except that
``strftime_now`` returns a fixed date: the corpus, hence the vocabulary, must not depend on the day.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any, Callable

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

import _fixture_templates as T
from _synthetic_conversations import Example, make_examples

FIXED_DATE = "2025-06-01"
FAMILY_SEED = 20250601
FAMILY_SIZE = 300


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise(message):
    raise jinja2.exceptions.TemplateError(message)


_ENV = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
_ENV.filters["tojson"] = _tojson
_ENV.globals.update(raise_exception=_raise, strftime_now=lambda fmt: FIXED_DATE)


def render(template: str, messages: list[dict], tools=None, add_generation_prompt: bool = True, **kwargs) -> str:
    messages = [{k: v for k, v in m.items() if v is not None} for m in messages]  # as transformers 5 does
    return _ENV.from_string(template).render(
        messages=messages, tools=tools, add_generation_prompt=add_generation_prompt, **kwargs)


def _messages(ex: Example, args_object: bool) -> list[dict]:
    msgs = copy.deepcopy(ex.messages)
    if args_object:
        for m in msgs:
            for call in m.get("tool_calls", []):
                if isinstance(call["function"]["arguments"], str):
                    call["function"]["arguments"] = json.loads(call["function"]["arguments"])
    return msgs


def _value(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v)


# --------------------------------------------------------------------------------------------------
# the generated turn, per format (what follows the generation prompt)


def _deepseek_v31_turn(ex: Example) -> str:
    out = (ex.reasoning + "</think>" if ex.thinking else "") + ex.response
    if ex.tool_calls:
        out += "<｜tool▁calls▁begin｜>" + "".join(
            f"<｜tool▁call▁begin｜>{c['name']}<｜tool▁sep｜>{json.dumps(c['arguments'])}<｜tool▁call▁end｜>"
            for c in ex.tool_calls) + "<｜tool▁calls▁end｜>"
    return out + "<｜end▁of▁sentence｜>"


def _deepseek_r1_turn(ex: Example) -> str:
    out = ex.reasoning + "\n</think>\n\n" + ex.response
    if ex.tool_calls:
        out += "<｜tool▁calls▁begin｜>" + "\n".join(
            f"<｜tool▁call▁begin｜>function<｜tool▁sep｜>{c['name']}\n```json\n{json.dumps(c['arguments'])}\n```"
            "<｜tool▁call▁end｜>" for c in ex.tool_calls) + "<｜tool▁calls▁end｜>"
    return out + "<｜end▁of▁sentence｜>"


def _dsml_turn(ex: Example) -> str:
    out = (ex.reasoning + "</think>" if ex.thinking else "") + ex.response
    if ex.tool_calls:
        out += ("\n\n" if ex.response else "") + "<｜DSML｜tool_calls>\n"
        for c in ex.tool_calls:
            out += f'<｜DSML｜invoke name="{c["name"]}">\n'
            for k, v in c["arguments"].items():
                kind = "true" if isinstance(v, str) else "false"
                out += f'<｜DSML｜parameter name="{k}" string="{kind}">{_value(v)}</｜DSML｜parameter>\n'
            out += "</｜DSML｜invoke>\n"
        out += "</｜DSML｜tool_calls>"
    return out + "<｜end▁of▁sentence｜>"


def _harmony_turn(ex: Example) -> str:
    out = f"<|channel|>analysis<|message|>{ex.reasoning}<|end|><|start|>assistant"
    if ex.tool_calls:
        c = ex.tool_calls[0]
        return out + (f" to=functions.{c['name']}<|channel|>commentary <|constrain|>json<|message|>"
                      f"{json.dumps(c['arguments'])}<|call|>")
    return out + f"<|channel|>final<|message|>{ex.response}<|return|>"


def _glm_turn(ex: Example) -> str:
    out = (f"\n<think>{ex.reasoning}</think>" if ex.thinking else "") + (f"\n{ex.response}" if ex.response else "")
    for c in ex.tool_calls:
        out += f"\n<tool_call>{c['name']}" + "".join(
            f"\n<arg_key>{k}</arg_key>\n<arg_value>{_value(v)}</arg_value>" for k, v in c["arguments"].items())
        out += "\n</tool_call>"
    return out + ("<|observation|>" if ex.tool_calls else "<|user|>")


def _minimax_turn(ex: Example) -> str:
    out = ex.reasoning + "\n</think>\n\n" + ex.response
    if ex.tool_calls:
        out += "\n<minimax:tool_call>\n"
        for c in ex.tool_calls:
            out += f'<invoke name="{c["name"]}">\n' + "".join(
                f'<parameter name="{k}">{_value(v)}</parameter>\n' for k, v in c["arguments"].items())
            out += "</invoke>\n"
        out += "</minimax:tool_call>"
    return out + "[e~["


# (template, arguments as objects?, template kwargs, generated turn) per vocabulary
Render = tuple[str, bool, Callable[[int, Example], dict], Callable[[Example], str]]
_DS_BOS = {"bos_token": "<｜begin▁of▁sentence｜>"}
FAMILY_RENDERS: dict[str, list[Render]] = {
    "deepseek": [
        (T.DEEPSEEK_V31_TEMPLATE, False, lambda i, ex: {**_DS_BOS, "thinking": ex.thinking}, _deepseek_v31_turn),
        (T.DEEPSEEK_R1_TEMPLATE, False, lambda i, ex: dict(_DS_BOS), _deepseek_r1_turn),
        (T.DEEPSEEK_V4_TEMPLATE, True, lambda i, ex: {**_DS_BOS, "thinking": ex.thinking}, _dsml_turn),
    ],
    "gpt_oss": [
        (T.GPT_OSS_TEMPLATE, True, lambda i, ex: {"reasoning_effort": ("low", "medium", "high")[i % 3]},
         _harmony_turn),
    ],
    "glm": [(T.GLM45_TEMPLATE, True, lambda i, ex: {"enable_thinking": ex.thinking}, _glm_turn)],
    "minimax": [(T.MINIMAX_M2_TEMPLATE, True, lambda i, ex: {}, _minimax_turn)],
}


def family_texts(vocab: str, added_tokens: list[str], seed: int = FAMILY_SEED, n: int = FAMILY_SIZE) -> list[str]:
    """Rendered prompts + generated turns of ``vocab``'s family, cut at its added tokens."""
    cut = re.compile("|".join(re.escape(t) for t in sorted(added_tokens, key=len, reverse=True)))
    pieces: list[str] = []
    for i, ex in enumerate(make_examples(seed, n)):
        for template, args_object, kwargs, turn in FAMILY_RENDERS[vocab]:
            text = render(template, _messages(ex, args_object), tools=ex.tools, **kwargs(i, ex)) + turn(ex)
            pieces += [p for p in cut.split(text) if p]
    return pieces
