"""`doctor`: the preflight a user runs before a multi-day job, on the model's own tokenizer and template.

It answers, from the tokenizer and chat template alone (no engine, no GPU): which family the
markers come from and why; every marker with its ids; the kwargs the template reads, and whether
each `--template-kwarg` given is one of them with a value the profile takes
(`prompts/template_kwargs.py`: a refused kwarg is a problem, and the rest of the report is made
without it); what the generation prompt ends with and
whether it opens reasoning, for each template kwarg that switches thinking; whether `tools` are
rendered; which message form the template takes; the context length and stop ids; and one bundled
sample prompt per config, templated and decoded. Each finding that would make a run produce lossy
or wrong data is a problem, and `doctor` then exits non-zero naming it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eagle3_synth.contract.boundaries import prompt_opens_reasoning
from eagle3_synth.prompts.templating import ChatTokenizer, template_uses_date, today
from eagle3_synth.prompts.configs import CONFIGS, sample_prompts_path
from eagle3_synth.prompts.conversation import Conversation, read_prompts_jsonl
from eagle3_synth.errors import Eagle3SynthError, PromptError
from eagle3_synth.prompts.template_kwargs import UNCHECKED_OPTION, kwarg_problems, template_names
from eagle3_synth.contract.markers import Vocabulary
from eagle3_synth.contract.profiles import MARKER_ROLES, MarkerIds, ModelProfile, choose_profile, resolve_markers
from eagle3_synth.prompts.prepare import model_context_length

# Kwargs that switch reasoning in the families we know, tried on every template besides the
# profile's own (a kwarg a template ignores changes nothing and is not listed).
COMMON_THINKING_KWARGS: dict[str, tuple[Any, ...]] = {
    "thinking": (True, False), "enable_thinking": (True, False), "reasoning_effort": ("low", "high")}
_TAIL_TOKENS = 12


@dataclass
class DoctorReport:
    """Sections of (label, lines) to print, and the problems found."""

    sections: list[tuple[str, list[str]]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def add(self, label: str, *lines: str) -> None:
        self.sections.append((label, list(lines)))

    def lines(self) -> list[str]:
        width = max(len(label) for label, _ in self.sections) + 2 if self.sections else 0
        out = []
        for label, lines in self.sections:
            for i, line in enumerate(lines or [""]):
                out.append(f"{label if i == 0 else '':<{width}}{line}")
        if self.problems:
            out += [f"PROBLEM: {problem}" for problem in self.problems]
        else:
            out.append("verdict: no problem found")
        return out


def _tail(tokenizer: Any, ids: Sequence[int]) -> str:
    return "..." + json.dumps(tokenizer.decode(list(ids[-_TAIL_TOKENS:])), ensure_ascii=False)


def _change(tokenizer: Any, base: Sequence[int], ids: Sequence[int]) -> str:
    """What a kwarg changed: the new tail, or -- when the prompt ends the same (gpt-oss's
    `reasoning_effort` is in the system message) -- the text around the first difference."""
    if list(ids[-_TAIL_TOKENS:]) != list(base[-_TAIL_TOKENS:]):
        return _tail(tokenizer, ids)
    first = next((i for i, (a, b) in enumerate(zip(base, ids)) if a != b), min(len(base), len(ids)))
    window = tokenizer.decode(list(ids[max(first - 2, 0):first + 6]))
    return f"same ending; changes the prompt at token {first}: ...{json.dumps(window, ensure_ascii=False)}..."


def _marker_lines(vocab: Vocabulary, profile: ModelProfile, markers: MarkerIds) -> list[str]:
    lines = []
    for role in MARKER_ROLES:
        marker = getattr(markers, role)
        for pattern in marker.alternatives:
            ids = vocab.encode(pattern.text)
            merge = [k for k, slot in enumerate(pattern.slots) if len(slot) > 1]
            note = f"  (its {'/'.join('first' if k == 0 else 'last' for k in merge)} token may merge with "\
                   f"the text beside it: {', '.join(str(len(pattern.slots[k])) for k in merge)} tokens match)" \
                if merge else ""
            shown = str(ids[0]) if len(ids) == 1 else str(ids)
            lines.append(f"{role:<19}{pattern.text!r} = {shown}{note}")
    stops = ", ".join(f"{vocab.tokenizer.convert_ids_to_tokens(i)!r} {i}" for i in markers.stop_ids)
    lines.append(f"{'stop ids':<19}{stops}")
    return lines


def _generation_prompt(chat: ChatTokenizer, markers: MarkerIds, extra: Mapping[str, Any]) -> tuple[list[int], bool]:
    probe = ChatTokenizer(chat.tokenizer, {**chat.template_kwargs, **extra}, form=chat.form,
                          template_date=chat.template_date)
    ids = probe.prompt_ids(Conversation([{"role": "user", "content": "Hello"}]))
    return ids, prompt_opens_reasoning(ids, markers)


def _reasoning_lines(chat: ChatTokenizer, profile: ModelProfile, markers: MarkerIds) -> list[str]:
    base, opens = _generation_prompt(chat, markers, {})
    given = ", ".join(f"{k}={json.dumps(v)}" for k, v in chat.template_kwargs.items()) or "no kwargs"
    lines = [f"with {given}: {_tail(chat.tokenizer, base)}; "
             f"{'opens reasoning (outputs start inside it)' if opens else 'does not open reasoning'}"]
    kwargs = {**COMMON_THINKING_KWARGS, **profile.thinking_kwargs}
    for name, values in kwargs.items():
        if name in chat.template_kwargs:
            continue
        for value in values:
            try:
                ids, opens = _generation_prompt(chat, markers, {name: value})
            except PromptError as exc:
                lines.append(f"{name}={json.dumps(value)}: the template fails ({exc})")
                continue
            if ids == base:
                continue
            lines.append(f"{name}={json.dumps(value)}: {_change(chat.tokenizer, base, ids)}; "
                         f"{'opens reasoning' if opens else 'does not open reasoning'}")
    if len(lines) == 1:
        lines.append("no known kwarg (thinking, enable_thinking, reasoning_effort) changes the generation prompt")
    return lines


def _kwargs_lines(tokenizer: Any, profile: ModelProfile, given: dict[str, Any], unchecked: bool,
                  report: DoctorReport) -> dict[str, Any]:
    """The `kwargs` section, each refused kwarg a problem; the kwargs the rest of the report uses."""
    names = template_names(tokenizer)
    lines = [f"the template reads: {', '.join(sorted(names.reads)) or 'none'}"]
    refused = kwarg_problems(given, {}, names, profile, unchecked=unchecked)
    report.problems.extend(refused.values())
    if given:
        lines.append(f"given: {', '.join(f'{k}={json.dumps(v)}' for k, v in given.items())}"
                     + (f" ({', '.join(refused)} refused: the report below is without them)" if refused else "")
                     + (f" ({UNCHECKED_OPTION}: names not checked)" if unchecked else ""))
    report.add("kwargs", *lines)
    return {name: value for name, value in given.items() if name not in refused}


def _sample_lines(chat: ChatTokenizer, configs: Sequence[str], report: DoctorReport, full: bool) -> list[str]:
    lines = []
    for name in configs:
        path = Path(sample_prompts_path(name))
        first = next((item for _, item in read_prompts_jsonl(path) if isinstance(item, Conversation)), None)
        if first is None:
            lines.append(f"{name}: no bundled sample prompt")
            continue
        if first.tools and not chat.form.tools_visible:
            report.problems.append(f"{name}: its prompts carry tools the model would not see (tools_not_rendered)")
        try:
            ids = chat.prompt_ids(first)
        except PromptError as exc:
            report.problems.append(f"{name}: the sample prompt does not template: {exc}")
            lines.append(f"{name}: FAILS: {exc}")
            continue
        text = chat.tokenizer.decode(ids)
        if not full and len(text) > 400:
            text = text[:150] + " [...] " + text[-220:]
        lines.append(f"{name} ({len(ids)} tokens): {json.dumps(text, ensure_ascii=False)}")
    return lines


def diagnose(tokenizer: Any, *, model_path: str, profile_name: str = "auto", profile_file: str | None = None,
             template_kwargs: Mapping[str, Any] | None = None, template_date: str | None = None,
             configs: Sequence[str] | None = None, full: bool = False,
             template_kwarg_unchecked: bool = False) -> DoctorReport:
    """Everything `doctor` prints, with the problems a run would meet."""
    report = DoctorReport()
    template = tokenizer.chat_template if isinstance(tokenizer.chat_template, str) else str(tokenizer.chat_template)
    report.add("tokenizer", f"{model_path}: {len(tokenizer):,} tokens, chat template of {len(template):,} characters")
    try:
        profile, why = choose_profile(profile_name, tokenizer, profile_file)
        markers = resolve_markers(profile, tokenizer)
    except Eagle3SynthError as exc:
        report.problems.append(str(exc))
        return report
    report.add("profile", f"{profile.name}: {profile.family} ({why})")
    report.add("markers", *_marker_lines(Vocabulary(tokenizer), profile, markers))
    try:
        template_kwargs = _kwargs_lines(tokenizer, profile, dict(template_kwargs or {}), template_kwarg_unchecked,
                                        report)
    except Eagle3SynthError as exc:
        report.problems.append(str(exc))
        return report
    date = (template_date or today()) if template_uses_date(tokenizer) else None
    chat = ChatTokenizer(tokenizer, template_kwargs, profile=profile, template_date=date)
    report.add("generation", *_reasoning_lines(chat, profile, markers))
    form, probe = chat.form, chat.probe
    if form.tools_rendered:
        report.add("tools", "rendered by the template")
    elif form.tool_description:
        report.add("tools", f"NOT rendered by the template (same ids with and without them); the family's documented "
                            f"system-prompt tool description is used instead ({form.tool_description})")
    else:
        report.add("tools", "NOT rendered by the template, and the family documents no system-prompt description")
        report.problems.append(f"the chat template ignores `tools` and profile {profile.name} has no documented tool "
                               "description: every prompt with tools would be rejected (tools_not_rendered)")
    assert probe is not None
    chosen = f"call-only assistant content {form.call_content}, arguments {form.arguments}"
    report.add("message form", chosen if probe.faithful else f"{chosen} (closest; arguments not rendered as given)",
               *(f"  {line}" for line in probe.lines()))
    if not probe.renders_calls:
        report.problems.append("no message form renders an assistant turn with tool calls: every prompt with tool "
                               "history would be rejected (template_error)")
    context = model_context_length(model_path)
    report.add("context", f"{context:,} tokens (config.json max_position_embeddings)" if context
               else "unknown (no config.json with max_position_embeddings): pass --max-context to build")
    if date:
        report.add("date", f"the template writes today's date: runs pin it (this check used {date}; "
                           "build --template-date to choose)")
    report.add("samples", *_sample_lines(chat, list(configs or CONFIGS), report, full))
    return report
