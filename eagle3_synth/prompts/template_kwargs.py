"""Template kwargs checked before anything runs: a kwarg the chat template never reads, a value the
model family does not take, or a name transformers passes to the template itself.

A template kwarg is only ever read by the template, and Jinja renders an unknown kwarg as nothing:
`--template-kwarg thinkng=false` (a typo) would run for days in the default thinking mode, and
`thinking=maybe` is truthy. So each kwarg -- from `--template-kwarg`, `--template-kwarg-mix` and a
config's `template_kwargs` -- is checked against:

- the names the template reads: its undeclared variables (`jinja2.meta.find_undeclared_variables`
  over the template parsed by transformers' own Jinja environment, as transformers'
  `_get_template_variables` does, transformers 5.25 utils/chat_template_utils.py), less those reserved below.
  `--template-kwarg-unchecked` skips this for a template that reads a kwarg indirectly (a
  tokenizer's own `apply_chat_template` code);
- the values the model profile lists for it (`thinking_kwargs` in contract/profiles.yaml: Kimi's
  `thinking` is true or false, gpt-oss's `reasoning_effort` low, medium or high);
- the reserved names, refused always: the arguments of `apply_chat_template` and
  `render_jinja_template` (transformers 5.25 tokenization_utils_base.py
  `PreTrainedTokenizerBase.apply_chat_template`, chat_template_utils.py `render_jinja_template`),
  `messages` (which `render_jinja_template` passes itself), the tokenizer's special tokens (merged
  under the kwargs in `apply_chat_template`) and the Jinja environment's globals (`raise_exception`,
  `namespace`..., chat_template_utils.py `_cached_compile_jinja_template`).
"""

from __future__ import annotations

import difflib
import inspect
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from eagle3_synth.contract.profiles import ModelProfile
from eagle3_synth.errors import ConfigError
from eagle3_synth.prompts.configs import ConfigSpec
from eagle3_synth.prompts.hygiene import unwritable

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
