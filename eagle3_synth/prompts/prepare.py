"""Prompt preparation: a plan's records become templated `PreparedPrompt`s, with hygiene.

The records and their order come from `selection.py` (the prompt list and `sample_id`), the rules
that skip a prompt from `hygiene.py`, the templating from `templating.py` (in this process or a
pool of workers, `templaters.py`). Never more candidates are taken than could still be kept, so the
source is read exactly as far as a one-at-a-time loop would read it.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eagle3_synth.contract.row import PreparedPrompt
from eagle3_synth.errors import ConfigError, PromptError
from eagle3_synth.prompts.conversation import Conversation
from eagle3_synth.prompts.hygiene import REJECT_REASONS, PromptChecks, Reject
from eagle3_synth.prompts.selection import Candidate, PromptPlan, candidates
from eagle3_synth.prompts.templaters import Result, Templater, make_templater
from eagle3_synth.prompts.templating import ChatTokenizer

log = logging.getLogger(__name__)

# Rejects logged one by one; the rest are counted in the summary line and listed in rejects.jsonl.
LOGGED_REJECTS = 20
# Conversations templated per batch: amortises the tokenizer call and a worker round trip.
CHUNK = 64


@dataclass(frozen=True)
class Preparation:
    """How prompts are prepared in this process: none of it changes the prompt list."""

    # The first reject stops the run (PromptError) instead of being skipped.
    strict: bool = False
    # Processes that template (see `templaters.make_templater`): 1, N, or None for automatic.
    workers: int | None = None
    # Where worker processes load the tokenizer from, and whether its own code may run.
    tokenizer_path: str = ""
    trust_remote_code: bool = False
    # Where the rejects file is written, for the log line that points at it.
    rejects_file: str = "rejects.jsonl"
    # What `max_prompt_tokens` is, for a `too_long` reject's detail.
    too_long_reason: str = "the model's context minus max_new_tokens"


def model_config_sections(folder: str | Path | None, option: str, name: str = "config.json") -> list[dict[str, Any]]:
    """A model folder's `name` (config.json, generation_config.json) and its `text_config` /
    `language_config` (where multimodal models like Kimi-K2.5 keep the language model's values), in
    that order; empty without the file. An unreadable file is a ConfigError pointing at `option`."""
    if not folder or not (Path(folder) / name).is_file():
        return []
    try:
        config = json.loads((Path(folder) / name).read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ConfigError(f"{folder}/{name} is not valid JSON ({exc}); pass {option}") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{folder}/{name} is not a JSON object; pass {option}")
    nested = (config.get("text_config"), config.get("language_config"))
    return [config, *(section for section in nested if isinstance(section, dict))]


def model_config_value(folder: str | Path | None, key: str, option: str) -> int | None:
    """A positive int `key` of a model folder's config.json (also nested, `model_config_sections`);
    None without one. An unreadable config.json is a ConfigError pointing at `option`, the way to
    give the value instead."""
    for section in model_config_sections(folder, option):
        value = section.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def model_context_length(*folders: str | None) -> int | None:
    """`max_position_embeddings` from the first folder's config.json that has one; None if unknown."""
    for folder in folders:
        value = model_config_value(folder, "max_position_embeddings", "--max-context")
        if value is not None:
            return value
    return None


def max_prompt_tokens(context_length: int | None, max_new_tokens: int) -> int | None:
    """Longest prompt that leaves room for `max_new_tokens`; None when the context is unknown."""
    if context_length is None:
        return None
    if context_length <= max_new_tokens:
        raise ConfigError(f"the model's context ({context_length} tokens, --max-context) leaves no room for prompts "
                          f"with --max-new-tokens {max_new_tokens}")
    return context_length - max_new_tokens


def writable(text: str) -> str:
    """`text` with any lone surrogate as its `\\udXXX` escape: a reject's source id or detail may
    carry one from the record (or a file name from the command line), and rejects.jsonl is UTF-8."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


Checked = list[tuple[Candidate, "Conversation | Reject"]]


def _templated(
    source: Iterator[Candidate], checks: PromptChecks, templater: Templater, cap: int | None,
    kept: Callable[[], int],
) -> Iterator[tuple[Candidate, Conversation | Reject, list[int] | PromptError | None]]:
    """(candidate, conversation or reject, ids) in prompt-list order, templated ahead: one chunk at
    a time in this process, four chunks per worker in a pool (enough to keep every worker busy).

    Never more candidates are taken than could still be kept (`cap` minus those kept), so the
    source is read exactly as far as a one-at-a-time loop would read it.
    """
    in_flight: deque[tuple[Checked, Result]] = deque()
    ahead = 0
    exhausted = False
    while True:
        while not exhausted:
            window = CHUNK if templater.workers == 1 else CHUNK * 4 * templater.workers
            room = window - ahead if cap is None else min(window - ahead, cap - kept() - ahead)
            if room <= 0:
                break
            checked: Checked = []
            for candidate in itertools.islice(source, min(CHUNK, room)):
                try:
                    checked.append((candidate, checks.precheck(candidate)))
                except Reject as reject:
                    checked.append((candidate, reject))
            if not checked:
                exhausted = True
                break
            in_flight.append((checked, templater.submit([c for _, c in checked if isinstance(c, Conversation)])))
            ahead += len(checked)
        if not in_flight:
            return
        checked, result = in_flight.popleft()
        ahead -= len(checked)
        ids = iter(result())
        for candidate, item in checked:
            yield candidate, item, next(ids) if isinstance(item, Conversation) else None


def iter_prepared_prompts(
    plan: PromptPlan, chat: ChatTokenizer, rejects: list[dict[str, Any]], *,
    max_prompt_tokens: int | None = None, preparation: Preparation = Preparation(), whole: bool = False,
) -> Iterator[PreparedPrompt]:
    """The config's kept prompts in prompt-list order, until `cap` are kept (see module doc),
    appending each rejected one to `rejects` as it is met; with `whole`, each the opening prompt
    of its whole conversation, which it keeps as its `script` (`turns.opening`).

    A stream, so that a run writes prompts.jsonl as it goes and never holds the whole prompt list
    (hundreds of MB of Python ints for 100,000 prompts). The summary is logged at the end.
    """
    cap = plan.cap
    checks = PromptChecks(chat, max_prompt_tokens, preparation.too_long_reason)
    kept = 0
    templater = make_templater(preparation.workers, chat, preparation.tokenizer_path, preparation.trust_remote_code)
    try:
        for candidate, item, ids in _templated(candidates(plan, cap, whole=whole), checks, templater, cap, lambda: kept):
            try:
                if isinstance(item, Reject):
                    raise item
                prompt = checks.accept(candidate, item, ids)
            except Reject as reject:
                detail = str(reject)
                message = writable(detail if detail.startswith(candidate.where) else f"{candidate.where}: {detail}")
                if preparation.strict:
                    raise PromptError(f"{message} (--strict stops at the first rejected prompt)") from None
                if len(rejects) < LOGGED_REJECTS:
                    log.warning("skipping prompt (%s): %s", reject.reason, message)
                rejects.append({"sample_id": candidate.sample_id, "source_id": writable(candidate.source_id),
                                "reason": reject.reason, "detail": message})
                continue
            kept += 1
            yield prompt
    finally:
        templater.close()
    log.info("%s", prompt_report(plan.config.name, kept, rejects, cap))
    if len(rejects) > LOGGED_REJECTS:
        log.warning("%d more rejected prompts are listed with their reasons in %s",
                    len(rejects) - LOGGED_REJECTS, preparation.rejects_file)


def prepare_prompts(
    plan: PromptPlan, chat: ChatTokenizer, *, max_prompt_tokens: int | None = None,
    preparation: Preparation = Preparation(),
) -> tuple[list[PreparedPrompt], list[dict[str, Any]]]:
    """`iter_prepared_prompts` as lists: (kept prompts, rejects)."""
    rejects: list[dict[str, Any]] = []
    prepared = list(iter_prepared_prompts(plan, chat, rejects, max_prompt_tokens=max_prompt_tokens,
                                          preparation=preparation))
    return prepared, rejects


def prompt_report(config: str, kept: int, rejects: list[dict[str, Any]], cap: int | None) -> str:
    """One line: prompts kept, rejects by reason, and whether the cap was reached."""
    counts = Counter(reject["reason"] for reject in rejects)
    reasons = ", ".join(f"{reason}={counts[reason]}" for reason in REJECT_REASONS if counts[reason])
    short = f"; the source ran out before the cap of {cap}" if cap is not None and kept < cap else ""
    return (f"{config}: {kept} prompts kept of {kept + len(rejects)} records considered"
            f"{'; rejected: ' + reasons if reasons else ''}{short}")
