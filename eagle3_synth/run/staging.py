"""A new run's prompts, prepared before any engine starts; the engine's own limit applied after.

Preparation (sources read, prompts templated, rejects counted) needs only the tokenizer, so it runs
first: a bad source, an empty selection or a wrong template shows before a model loads for minutes.
The prompts are kept to our own limit (the model's context minus max_new_tokens) and written aside
(`RunDirectory.stage_prompts`). Once the engine runs, a tighter limit of its own (SGLang: context,
max_req_input_len, speculative slots) moves the staged prompts over it to the rejects as `too_long`
(`within`), and only then are both files published: no prompt the engine would refuse becomes a
sample error that --retry-errors cannot fix. Nothing is published before the engine's limit is
known, so a failed start leaves no prompt list behind and the next start prepares the same one
again (preparation is deterministic); once published, the prompt list never changes.

`survey` is the same preparation held in no file, for `--dry-run`.
"""

from __future__ import annotations

import logging
from array import array
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from eagle3_synth.contract.row import PreparedPrompt
from eagle3_synth.prompts.prepare import Preparation, iter_prepared_prompts
from eagle3_synth.prompts.rollouts import ChatTokenizers, iter_rollouts
from eagle3_synth.prompts.templating import ChatTokenizer
from eagle3_synth.prompts.held_out import run_validation, validation_conversations
from eagle3_synth.run.directory import REJECTS_FILE, RunDirectory, StagedPrompts
from eagle3_synth.run.progress import PromptCounts, RunSummary, counted
from eagle3_synth.run.settings import GenerationSettings
from eagle3_synth.run.spec import RunSpec

log = logging.getLogger(__name__)

# What our own limit is, and the engine's, in a `too_long` reject's detail.
OUR_LIMIT = Preparation.too_long_reason
ENGINE_LIMIT = "the engine's limit for max_new_tokens"


@dataclass
class Prepared:
    """A new run's prompts, prepared: what was kept (one line per rollout), and the rejects."""

    rejects: list[dict[str, Any]] = field(default_factory=list)
    # Per kept rollout, in prompts.jsonl order: its first prompt's length, and its turns.
    lengths: array = field(default_factory=lambda: array("q"))
    # Per kept rollout: its source conversation (`prompt_slots`' meaning), for the validation draw.
    conversations: array = field(default_factory=lambda: array("q"))
    turns: int = 0
    staged: StagedPrompts | None = None

    @property
    def kept(self) -> int:
        return len(self.lengths)

    def rejects_by_reason(self) -> Counter:
        return Counter(reject["reason"] for reject in self.rejects)

    def measured(self, rollouts: Iterator[PreparedPrompt]) -> Iterator[PreparedPrompt]:
        for rollout in rollouts:
            self.lengths.append(len(rollout.prompt_ids))
            self.conversations.append(rollout.conversation)
            self.turns += rollout.turns
            yield rollout


def _rollouts(spec: RunSpec, options: GenerationSettings, chat: ChatTokenizer, chats: ChatTokenizers,
              prepared: Prepared, limit: int | None, why: str, reject: Callable[[dict[str, Any]], None]
              ) -> Iterator[PreparedPrompt]:
    preparation = Preparation(strict=options.strict, workers=options.workers, tokenizer_path=spec.model.tokenizer,
                              trust_remote_code=spec.model.trust_remote_code,
                              rejects_file=f"{options.run_dir}/{REJECTS_FILE}", too_long_reason=why)
    conversations = iter_prepared_prompts(spec.prompts, chat, prepared.rejects, max_prompt_tokens=limit,
                                          preparation=preparation, whole=spec.conversations.whole)
    return prepared.measured(iter_rollouts(conversations, spec.conversations, chats, prepared.rejects,
                                           max_prompt_tokens=limit, too_long_reason=why, reject=reject,
                                           sampling=spec.sampling.rollout()))


def stage(run: RunDirectory, spec: RunSpec, options: GenerationSettings, chat: ChatTokenizer, chats: ChatTokenizers,
          limit: tuple[int | None, str], reject: Callable[[dict[str, Any]], None]) -> Prepared:
    """Prepare the prompts into the run directory's staging files (`RunDirectory.stage_prompts`)."""
    prepared = Prepared()
    rollouts = _rollouts(spec, options, chat, chats, prepared, *limit, reject)
    prepared.staged = run.stage_prompts(rollouts, prepared.rejects)
    return prepared


def check_held_out(prepared: Prepared, fields: dict[str, Any]) -> None:
    """With `--validation`, the draw assembly will make (`prompts/held_out.py`) must hold some
    conversations out and leave some for train: checked on the prepared prompts, before an engine
    loads, so a split that would be empty is a one-line error, not a missing split days later."""
    validation, seed = run_validation(fields)
    if validation is not None and prepared.kept:
        validation_conversations(np.frombuffer(prepared.conversations, dtype=np.int64), validation, seed)


def survey(spec: RunSpec, options: GenerationSettings, chat: ChatTokenizer, chats: ChatTokenizers,
           limit: tuple[int | None, str], reject: Callable[[dict[str, Any]], None]) -> Prepared:
    """The same preparation, counted and written nowhere (a dry run)."""
    prepared = Prepared()
    for _ in _rollouts(spec, options, chat, chats, prepared, *limit, reject):
        pass
    return prepared


def within(run: RunDirectory, prepared: Prepared, limit: int | None, why: str) -> StagedPrompts:
    """The staged prompts with those longer than `limit` (an engine's, tighter than the one they
    were prepared to) moved to the rejects as `too_long`; the staged files as they are otherwise."""
    if prepared.staged is None:
        raise ValueError("within() takes prompts prepared by stage(), which are staged in the run directory")
    lengths = prepared.lengths
    if limit is None or not any(n > limit for n in lengths):
        return prepared.staged

    def rejected(index: int, record: dict[str, Any]) -> dict[str, Any]:
        sample_id = record["sample_id"]
        conversation = record.get("conversation_id", -1)
        return {"sample_id": sample_id, "source_id": record.get("source_id", ""),
                "conversation_id": sample_id if conversation < 0 else conversation,
                "sample_index": record.get("sample_index", 0), "reason": "too_long",
                "detail": f"sample_id {sample_id}: {lengths[index]} prompt tokens > {limit} ({why})"}

    staged = run.restage_prompts(prepared.staged, rejected, over=lambda index: lengths[index] > limit)
    over = sum(1 for n in lengths if n > limit)
    log.warning("%d prepared prompts are over the engine's limit of %d tokens (%s): rejected as too_long",
                over, limit, why)
    return staged


@dataclass
class DryRun:
    """What a run would generate, found by preparing its prompts without an engine (`--dry-run`)."""

    config: str
    run_dir: str
    engine: str  # the engine it would start, in words
    max_new_tokens: int
    limit: tuple[int | None, str]
    samples_per_prompt: int
    prepared: Prepared | None = None  # a new run: its prompts, prepared in memory
    existing: RunSummary | None = None  # a run directory with prompts already: where it stands
    started: bool = False  # whether the run directory holds a run (run.json)

    def lines(self) -> list[str]:
        limit, why = self.limit
        lines = [f"{self.config}: dry run (no engine started, nothing written)"]
        if self.prepared is not None:
            prepared = self.prepared
            counts = PromptCounts.of(np.frombuffer(prepared.conversations, dtype=np.int64), prepared.turns,
                                     prepared.rejects)
            reasons = ", ".join(f"{reason}={n}" for reason, n in sorted(prepared.rejects_by_reason().items()))
            lines.append(f"  prompts: {counts.prompts} kept, {counts.rejected_prompts} rejected; rejects by reason: "
                         f"{reasons or 'none'}")
            if counts.unit == "rollouts":
                lines.append(f"  rollouts: {counts.rollouts} ({self.samples_per_prompt} per prompt, "
                             f"{counts.rejected_rollouts} rejected)")
            lines.append(f"  samples: up to {prepared.turns} to generate (one per turn), at most "
                         f"{self.max_new_tokens} new tokens each")
        if self.existing is not None:
            summary = self.existing
            counts = summary.counts
            lines.append(f"  {counts.kept()} in {self.run_dir}; {counted(summary.already_done, counts.unit)} "
                         f"done, {summary.failed_before} failed, {summary.remaining} to generate "
                         f"(--max-new-tokens {self.max_new_tokens})")
        lines += [
            f"  prompt limit: {'none' if limit is None else f'{limit} tokens'} ({why}); "
            "a tighter limit of the engine's own applies once it starts",
            f"  engine: {self.engine}",
            f"  run directory: {self.run_dir} ({'started before' if self.started else 'new'})",
        ]
        return lines
