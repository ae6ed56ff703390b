"""Checks a user runs: `validate` (built rows against the data contract) and `doctor` (the model's
tokenizer and template, before a long run; below).

`validate`: every row against the data contract, with the tokenizer the data was made with.

What a row must satisfy (each failure is a violation *kind*, reported with sample ids):

- `prompt_ids` are exactly `messages` (+ `tools`) through the chat template, generation prompt
  on, with the row's `template_kwargs` (the run's, for data without that column);
- a conversation's turn k (k > 0) follows its turn k-1 row, and its history is turn k-1's history,
  then turn k-1's output as the history message a serving stack's parsers return for it
  (`prompts.history`): the target's own words, not the source's;
- the boundary columns equal what `row.find_boundaries` computes from `output_ids`;
- with `finish_reason == "stop"` the last output token is a stop id (and `stop_index` points at
  it); no stop id occurs before the last position (the engine would have stopped there);
- the output does not start by repeating the prompt (an engine returning prompt + output);
- `prompt_tokens`/`completion_tokens` are the lengths of the id lists; `finish_reason` is known;
- every prompt and output id is in the model's vocabulary, `0 <= id < vocab_size` (the size the run
  recorded; where none is, the recorded model's config.json, else `len(tokenizer)`:
  `data_vocabulary`), and no output is longer than the run's `max_new_tokens`;
- each `sample_id` occurs once.
"""

from __future__ import annotations

import json
import multiprocessing
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eagle3_synth.contract.row import find_boundaries, prompt_opens_reasoning, FINISH_REASONS, out_of_range
from eagle3_synth.prompts.templating import ChatTokenizer, template_uses_date, today
from eagle3_synth.prompts.conversation import count_calls, validate_conversation, Conversation, read_prompts_jsonl
from eagle3_synth.errors import PromptError, Eagle3SynthError
from eagle3_synth.contract.profiles import MarkerIds, ModelProfile, MARKER_ROLES, choose_profile, resolve_markers
from eagle3_synth.prompts.forms import MessageForm
from eagle3_synth.dataset.stores import Provenance
from eagle3_synth.prompts.history import history_message
from eagle3_synth.prompts.rollouts import ChatTokenizers
from eagle3_synth.prompts.prepare import ModelVocab, model_vocab, model_context_length
from eagle3_synth.contract.markers import Vocabulary
from eagle3_synth.prompts.configs import CONFIGS, sample_prompts_path
from eagle3_synth.prompts.hygiene import UNCHECKED_OPTION, kwarg_problems, template_names

# How many leading prompt ids, repeated at the start of the output, count as a leaked prompt.
LEAK_PREFIX = 8

KINDS: dict[str, str] = {
    "prompt_mismatch": "prompt_ids differ from messages + tools re-templated",
    "messages_unreadable": "messages/tools are not valid JSON conversations, or the template rejects them",
    "reasoning_start": "reasoning_start differs from the value recomputed from output_ids",
    "think_end": "think_end differs from the value recomputed from output_ids",
    "response_start": "response_start differs from the value recomputed from output_ids",
    "tool_calls": "tool_calls differ from the spans recomputed from output_ids",
    "stop_index": "stop_index differs from the value recomputed (last token when finish_reason is stop)",
    "stop_token": "finish_reason is stop but the last output token is not a stop id",
    "stop_inside": "a stop id occurs before the last output token",
    "prompt_leak": "output_ids start by repeating the prompt",
    "prompt_tokens": "prompt_tokens != len(prompt_ids)",
    "completion_tokens": "completion_tokens != len(output_ids)",
    "finish_reason": f"finish_reason not in {FINISH_REASONS}",
    "id_out_of_range": "a prompt or output id is outside the model's vocabulary (0 <= id < vocab_size)",
    "over_max_new_tokens": "more output ids than the run's max_new_tokens",
    "duplicate_sample_id": "the sample_id occurs more than once",
    "history_not_own": "a later turn's history is not the previous turn's history plus the target's own output",
}
BOUNDARY_COLUMNS = ("reasoning_start", "think_end", "response_start", "stop_index")


def data_vocabulary(provenance: Provenance, tokenizer: Any) -> ModelVocab:
    """The vocabulary a config's ids are checked against: the size its run recorded; for a run
    that recorded none, the recorded model folder's config.json where it is here, else
    `len(tokenizer)` (`prompts.prepare.model_vocab`, the one rule)."""
    recorded = provenance.vocab_size
    if isinstance(recorded, dict) and isinstance(recorded.get("size"), int):
        return ModelVocab(recorded["size"], recorded.get("from") or f"recorded in {provenance.origin}")
    model = provenance.model if provenance.model and Path(provenance.model).is_dir() else None
    return model_vocab(model, tokenizer)


class RowValidator:
    """Checks single rows; holds the tokenizer, its markers and the template kwargs."""

    def __init__(self, tokenizer: Any, markers: MarkerIds, template_kwargs: Mapping[str, Any] | None = None, *,
                 form: MessageForm | None = None, profile: ModelProfile | None = None,
                 template_date: str | None = None, kwarg_overrides: Mapping[str, Any] | None = None,
                 vocab: ModelVocab | None = None, max_new_tokens: int | None = None):
        # The message form and date the data was templated with (recorded in run info); without a
        # recorded form the template is probed again with the profile's settings, as a run does.
        self.chat = ChatTokenizer(tokenizer, template_kwargs, form=form, profile=profile, template_date=template_date)
        self.chats = ChatTokenizers(self.chat)
        # Given by the user over what each row records (`template_kwargs` column).
        self.kwarg_overrides = dict(kwarg_overrides or {})
        self.markers = markers
        self.profile = profile
        self.stop_ids = frozenset(markers.stop_ids)
        # Ids are checked against the model's vocabulary (len(tokenizer) when nothing better is known)
        # and outputs against the run's cap (unchecked when not recorded).
        self.vocab = vocab or model_vocab(None, tokenizer)
        self.max_new_tokens = max_new_tokens

    def check(self, row: Mapping[str, Any], previous: Mapping[str, Any] | None = None) -> list[tuple[str, str]]:
        """(kind, detail) of every violation in `row`; empty when the row is clean. `previous`: the
        row before it (a later turn is checked against its conversation's previous turn)."""
        found: list[tuple[str, str]] = self._check_history(row, previous)
        prompt, output = list(row["prompt_ids"]), list(row["output_ids"])
        if row["prompt_tokens"] != len(prompt):
            found.append(("prompt_tokens", f"{row['prompt_tokens']} != {len(prompt)}"))
        if row["completion_tokens"] != len(output):
            found.append(("completion_tokens", f"{row['completion_tokens']} != {len(output)}"))
        found += self._check_ids(prompt, output)
        found += self._check_prompt(row, prompt)
        n = min(len(prompt), LEAK_PREFIX)
        if n and output[:n] == prompt[:n]:
            found.append(("prompt_leak", f"the first {n} output ids are the prompt's first {n}"))
        if not self.stop_ids.isdisjoint(output[:-1]):  # one pass in C; find where only if so
            first = next(i for i, t in enumerate(output) if t in self.stop_ids)
            found.append(("stop_inside", f"stop id {output[first]} at {first} of {len(output)}"))
        finish_reason = row["finish_reason"]
        if finish_reason not in FINISH_REASONS:
            found.append(("finish_reason", repr(finish_reason)))
            return found
        if finish_reason == "stop" and (not output or output[-1] not in self.stop_ids):
            found.append(("stop_token", f"last id {output[-1] if output else None} is not one of {sorted(self.stop_ids)}"))
        found += self._check_boundaries(row, prompt, output, finish_reason)
        return found

    def _check_ids(self, prompt: list[int], output: list[int]) -> list[tuple[str, str]]:
        found = []
        for name, ids in (("prompt_ids", prompt), ("output_ids", output)):
            bad = out_of_range(ids, self.vocab.size)
            if bad is not None:
                found.append(("id_out_of_range", f"{name}[{bad[0]}] = {bad[1]} is outside 0 <= id < {self.vocab.size} "
                                                 f"({self.vocab.source})"))
        if self.max_new_tokens is not None and len(output) > self.max_new_tokens:
            found.append(("over_max_new_tokens", f"{len(output)} output ids, the run's max_new_tokens is {self.max_new_tokens}"))
        return found

    def _check_prompt(self, row: Mapping[str, Any], prompt: list[int]) -> list[tuple[str, str]]:
        try:
            obj = {"messages": json.loads(row["messages"])}
            if row["tools"]:
                obj["tools"] = json.loads(row["tools"])
            kwargs = {**json.loads(row["template_kwargs"]), **self.kwarg_overrides} if row.get("template_kwargs") else None
            expected = self.chats.get(kwargs).prompt_ids(validate_conversation(obj, "messages"))
        except (json.JSONDecodeError, PromptError) as exc:
            return [("messages_unreadable", str(exc))]
        if expected == prompt:
            return []
        at = next((i for i, (a, b) in enumerate(zip(expected, prompt)) if a != b), min(len(expected), len(prompt)))
        return [("prompt_mismatch", f"first difference at {at}: stored {len(prompt)} ids, re-templated {len(expected)}")]

    def _check_history(self, row: Mapping[str, Any], previous: Mapping[str, Any] | None) -> list[tuple[str, str]]:
        turn = row.get("turn") or 0
        if not turn:
            return []
        same = previous is not None and all(previous.get(k) == row.get(k) for k in ("conversation_id", "sample_index"))
        if not same or previous.get("turn") != turn - 1 or previous["sample_id"] != row["sample_id"] - 1:
            return [("history_not_own", f"turn {turn} does not follow its conversation's turn {turn - 1}")]
        try:
            history, messages = json.loads(previous["messages"]), json.loads(row["messages"])
            tools = json.loads(row["tools"]) if row["tools"] else None
        except json.JSONDecodeError as exc:
            return [("messages_unreadable", str(exc))]
        if messages[: len(history)] != history:
            return [("history_not_own", f"turn {turn}'s history does not start with turn {turn - 1}'s")]
        if self.profile is None:  # the output's history message needs the family's parsers
            return []
        if out_of_range(previous["output_ids"], self.vocab.size) is not None:
            return []  # an output that cannot be decoded (reported as id_out_of_range on its own row)
        if len(messages) <= len(history):
            return [("history_not_own", f"turn {turn}'s history ends where turn {turn - 1}'s does")]
        own = history_message(list(previous["output_ids"]), previous, self.chat.tokenizer, self.markers, self.profile,
                              tools=tools, first_call_index=count_calls(history))
        if messages[len(history)] != own:
            return [("history_not_own", f"messages[{len(history)}] is not turn {turn - 1}'s output as the parsers "
                                        f"return it (content {str(messages[len(history)].get('content'))[:40]!r})")]
        return []

    def _check_boundaries(
        self, row: Mapping[str, Any], prompt: list[int], output: list[int], finish_reason: str
    ) -> list[tuple[str, str]]:
        bounds = find_boundaries(
            output, self.markers, prompt_opens=prompt_opens_reasoning(prompt, self.markers), finish_reason=finish_reason
        )
        found = [
            (name, f"stored {row[name]}, recomputed {getattr(bounds, name)}")
            for name in BOUNDARY_COLUMNS
            if row[name] != getattr(bounds, name)
        ]
        calls = [{"start": c.start, "end": c.end} for c in bounds.tool_calls]
        if list(row["tool_calls"]) != calls:
            found.append(("tool_calls", f"stored {list(row['tool_calls'])}, recomputed {calls}"))
        return found


@dataclass
class ConfigReport:
    """Violations of one config: counts per kind, the first sample ids and one detail per kind."""

    config: str
    rows: int = 0
    counts: Counter = field(default_factory=Counter)
    sample_ids: dict[str, list[int]] = field(default_factory=dict)
    details: dict[str, str] = field(default_factory=dict)
    keep_ids: int = 20

    @property
    def ok(self) -> bool:
        return not self.counts

    def add(self, sample_id: int, kind: str, detail: str) -> None:
        self.counts[kind] += 1
        ids = self.sample_ids.setdefault(kind, [])
        if len(ids) < self.keep_ids:
            ids.append(sample_id)
        self.details.setdefault(kind, f"sample {sample_id}: {detail}")

    def lines(self) -> list[str]:
        if self.ok:
            return [f"{self.config}: {self.rows} rows, all valid"]
        affected = sum(self.counts.values())
        kinds = f"{len(self.counts)} kind{'s' if len(self.counts) > 1 else ''}"
        lines = [f"{self.config}: {self.rows} rows, {affected} violations ({kinds})"]
        for kind, count in sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0])):
            ids = self.sample_ids[kind]
            more = f" (+{count - len(ids)} more)" if count > len(ids) else ""
            lines.append(f"  {kind}: {count} rows -- {KINDS[kind]}")
            lines.append(f"    sample ids: {', '.join(map(str, ids))}{more}")
            lines.append(f"    e.g. {self.details[kind]}")
        return lines

    def as_dict(self) -> dict[str, Any]:
        return {"config": self.config, "rows": self.rows, "ok": self.ok, "counts": dict(self.counts),
                "sample_ids": self.sample_ids, "details": self.details}


def validate_rows(rows: Iterable[Mapping[str, Any]], validator: RowValidator, config: str = "") -> ConfigReport:
    """Check every row (in sample_id order); duplicates of a sample_id are reported once per extra occurrence."""
    return validate_batches(([row] for row in rows), validator, config)


def _with_previous(batches: Iterable[list[dict[str, Any]]]) -> Iterable[tuple[dict[str, Any] | None, list[dict[str, Any]]]]:
    """Each batch with the row before it (a conversation's turns may straddle batches)."""
    previous = None
    for batch in batches:
        yield previous, batch
        if batch:
            previous = batch[-1]


def _check_rows(validator: RowValidator, previous: dict[str, Any] | None, batch: list[dict[str, Any]]
                ) -> list[tuple[int, list[tuple[str, str]]]]:
    checked = []
    for row in batch:
        checked.append((int(row["sample_id"]), validator.check(row, previous)))
        previous = row
    return checked


def validate_batches(
    batches: Iterable[list[dict[str, Any]]], validator: RowValidator, config: str = "", *, workers: int = 1
) -> ConfigReport:
    """`validate_rows` over batches of rows, checked by `workers` processes (order kept).

    Re-templating prompts dominates and is independent per row, so it scales with cores.
    """
    if workers <= 1:
        return _collect((_check_rows(validator, previous, batch) for previous, batch in _with_previous(batches)),
                        config)
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    with context.Pool(workers, initializer=_init_worker, initargs=(validator,)) as pool:
        return _collect(pool.imap(_check_batch, _with_previous(batches)), config)


_worker_validator: RowValidator | None = None


def _init_worker(validator: RowValidator) -> None:
    global _worker_validator
    _worker_validator = validator


def _check_batch(item: tuple[dict[str, Any] | None, list[dict[str, Any]]]) -> list[tuple[int, list[tuple[str, str]]]]:
    assert _worker_validator is not None
    return _check_rows(_worker_validator, *item)


def _collect(results: Iterable[list[tuple[int, list[tuple[str, str]]]]], config: str) -> ConfigReport:
    report = ConfigReport(config=config)
    seen: set[int] = set()
    for batch in results:
        for sample_id, found in batch:
            report.rows += 1
            if sample_id in seen:
                report.add(sample_id, "duplicate_sample_id", "seen before")
            seen.add(sample_id)
            for kind, detail in found:
                report.add(sample_id, kind, detail)
    return report


# `doctor`: the preflight a user runs before a multi-day job, on the model's own tokenizer and template.
#
# It answers, from the tokenizer and chat template alone (no engine, no GPU): which family the
# markers come from and why; every marker with its ids; the kwargs the template reads, and whether
# each `--template-kwarg` given is one of them with a value the profile takes
# (`prompts/hygiene.py`: a refused kwarg is a problem, and the rest of the report is made
# without it); what the generation prompt ends with and
# whether it opens reasoning, for each template kwarg that switches thinking; whether `tools` are
# rendered; which message form the template takes; the context length and stop ids; and one bundled
# sample prompt per config, templated and decoded. Each finding that would make a run produce lossy
# or wrong data is a problem, and `doctor` then exits non-zero naming it.

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
