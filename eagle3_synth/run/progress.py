"""What a run tells its user: live progress, the end-of-run summary, and what assembly found.

Progress is per config (and shard): rollouts done/total, samples/s, output tokens/s, prefix-cache hit
rate (cached / prompt tokens, as the engine reports them), requests in flight (engines that have an
`in_flight` attribute), ETA and the time since generation started. On a terminal it redraws one
line, from a thread every second too, so the line moves while a batch is still generating, and
each step before generation (the tokenizer, the prompts, the engine) is named as it starts
(`StepNotes`); otherwise (a batch job's log) it logs a plain line every `log_every` seconds, so a
days-long run leaves a readable trail and no more.

The counts name their unit (`PromptCounts`): a prompt is a source conversation kept, a rollout one
of its `--samples-per-prompt` generations (the unit of "done", of shards and of the ETA), a sample
one turn of a rollout (one row).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TextIO

import numpy as np

from eagle3_synth.engines.base import Engine, GenerationResult, is_short_length

log = logging.getLogger(__name__)

MAX_LISTED = 20  # errors / shards named in a message; the rest are counted


def format_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def counted(n: int, plural: str) -> str:
    """'1 sample', '2 samples': the count with its noun (given in the plural, ending in s) agreeing."""
    return f"{n} {plural[:-1] if n == 1 else plural}"


def _ratio(part: float, whole: float) -> float:
    return part / whole if whole else 0.0


def run_label(config: str, shard: str) -> str:
    """How a run's lines name it: the config, and the shard where it is one of several."""
    return config if shard == "all samples" else f"{config} {shard}"


def _on_terminal(stream: TextIO) -> bool:
    return bool(getattr(stream, "isatty", lambda: False)())


@dataclass(frozen=True)
class PromptCounts:
    """What a run's prompt list holds (for one shard), in its three units: prompts (source
    conversations with a rollout kept), their rollouts (`--samples-per-prompt` each: the unit of
    "done"), and the samples those can give (one per turn, one row each; a tool loop may end sooner).
    A reject counts where it fell: a prompt none of whose rollouts was kept, or one rollout of a
    kept prompt (its drawn template kwargs, the engine's own length limit)."""

    prompts: int = 0
    rollouts: int = 0
    samples: int = 0
    rejected_prompts: int = 0
    rejected_rollouts: int = 0

    @classmethod
    def of(cls, conversations: np.ndarray, samples: int, rejects: Iterable[dict[str, Any]]) -> PromptCounts:
        """`conversations`: each kept rollout's conversation id; `samples`: the turns they take in all;
        `rejects`: rejects.jsonl's records."""
        kept = set(np.unique(conversations).tolist())
        rejected = [reject.get("conversation_id", reject["sample_id"]) for reject in rejects]
        return cls(prompts=len(kept), rollouts=len(conversations), samples=samples,
                   rejected_prompts=len(set(rejected) - kept),
                   rejected_rollouts=sum(conversation in kept for conversation in rejected))

    @property
    def unit(self) -> str:
        """What a count of rollouts (done, left, missing) is: samples where a prompt is one rollout of
        one turn, else prompts where a prompt is one rollout (of several turns), else rollouts."""
        if self.rollouts != self.prompts or self.rejected_rollouts:
            return "rollouts"
        return "samples" if self.prompts == self.samples else "prompts"

    def kept(self) -> str:
        """'30 prompts kept (2 rejected)', and the rollouts where they are not the prompts."""
        words = f"{counted(self.prompts, 'prompts')} kept ({self.rejected_prompts} rejected)"
        if self.unit != "rollouts":
            return words
        return f"{words}, {counted(self.rollouts, 'rollouts')} ({self.rejected_rollouts} rejected)"


@dataclass
class RunSummary:
    """What one `generate` call did, for the end-of-run summary and the exit status."""

    config: str
    run_dir: str
    shard: str = "all samples"
    counts: PromptCounts = field(default_factory=PromptCounts)  # this shard's prompts, rollouts and samples
    already_done: int = 0  # rollouts finished before this call
    failed_before: int = 0  # had only errors before this call and were not retried (no --retry-errors)
    generated: int = 0  # samples (results, one per turn) generated in this call
    finish_reasons: Counter = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    prompt_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    seconds: float = 0.0  # the whole call, tokenizer and engine start-up included
    generation_seconds: float = 0.0  # from the first request (engine up) to the end: what rates are over
    remaining: int = 0  # rollouts of this shard not finished when the call ended
    stopped: str | None = None  # "deadline" (--max-hours), "terminated" (SIGTERM) or "interrupted" (Ctrl-C)
    # The cap asked for; `length` finishes with fewer tokens mean the engine lowered it to fit the
    # context or the KV budget (SGLang's scheduler does, silently): valid rows, counted apart.
    max_new_tokens: int | None = None
    short_lengths: int = 0
    # SGLang retracted requests to free KV memory (num_retractions, summed): KV thrashing.
    retractions: int = 0
    retracted_samples: int = 0
    # On-policy conversations: why each rollout finished in this call (`prompts.turns.ENDINGS`).
    endings: Counter = field(default_factory=Counter)

    def add(self, result: GenerationResult) -> None:
        self.generated += 1
        self.finish_reasons[result.finish_reason] += 1
        if self.max_new_tokens is not None and is_short_length(result, self.max_new_tokens):
            self.short_lengths += 1
        self.prompt_tokens += result.prompt_tokens
        self.output_tokens += result.completion_tokens
        self.cached_tokens += result.cached_tokens
        self.retractions += result.retractions
        self.retracted_samples += result.retractions > 0
        if result.finish_reason == "abort":
            self.errors.append(f"sample_id {result.sample_id}: {result.error or 'aborted by the engine'}")

    def lines(self) -> list[str]:
        counts = self.counts
        done = counted(self.already_done, "rollouts") if counts.unit == "rollouts" else self.already_done
        generated = self.generated if counts.unit == "samples" else counted(self.generated, "samples")
        lines = [
            f"{run_label(self.config, self.shard)}: {counts.kept()}, {done} already in "
            f"{self.run_dir}, {generated} generated in {format_duration(self.generation_seconds)} "
            f"({_ratio(self.generated, self.generation_seconds):.2f} samples/s, "
            f"{_ratio(self.output_tokens, self.generation_seconds):.1f} output tokens/s, "
            f"prefix cache {_ratio(self.cached_tokens, self.prompt_tokens):.0%}); "
            f"{format_duration(self.seconds)} in all",
            "  finish reasons: " + (", ".join(f"{k}={v}" for k, v in sorted(self.finish_reasons.items())) or "none"),
        ]
        if self.retractions:
            lines.append(f"  {counted(self.retracted_samples, 'samples')} retracted {self.retractions} times in all "
                         "(SGLang freed KV memory by pausing them: KV thrashing; lower the window, max_running_requests"
                         " or mem_fraction_static's pressure, see docs/guides/engines.md, the tuning table)")
        if set(self.endings) - {"source_end"}:  # a conversation ended before its source did
            lines.append("  conversations ended: " + ", ".join(f"{k}={v}" for k, v in sorted(self.endings.items())))
        if self.short_lengths:
            lines.append(f"  {counted(self.short_lengths, 'samples')} ended by length before --max-new-tokens "
                         f"{self.max_new_tokens}: the engine lowered the cap to fit its context or KV budget")
        if self.errors:
            lines.append(f"  errors: {len(self.errors)} (journaled with their reason; retried only with --retry-errors)")
            lines += [f"    {e}" for e in self.errors[:MAX_LISTED]]
            if len(self.errors) > MAX_LISTED:
                lines.append(f"    ... and {len(self.errors) - MAX_LISTED} more")
        if self.failed_before:
            lines.append(f"  {counted(self.failed_before, 'samples')} failed in an earlier run, not retried "
                         "(--retry-errors)")
        if self.remaining:
            why = {"deadline": "reached --max-hours", "terminated": "stopped by SIGTERM", "interrupted": "interrupted"
                   }.get(self.stopped or "", "the engine returned no result for some samples")
            lines.append(f"  {why}: {counted(self.remaining, self.counts.unit)} left; "
                         "run the same command again to continue")
        return lines


class StepNotes:
    """On a terminal, one line as each step before generation starts ("loading the tokenizer",
    "preparing the prompts", "starting the engine"): the waits that show nothing of their own.
    Off a terminal it says nothing (the run's log lines say where it stands)."""

    def __init__(self, label: str, stream: TextIO | None = None):
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.tty = _on_terminal(self.stream)

    def __call__(self, doing: str) -> None:
        if self.tty:
            self.stream.write(f"{self.label}: {doing} ...\n")
            self.stream.flush()


class Progress:
    """Live progress of one config's generation; feed it every result with `update`, `start` it
    for the terminal's redraws, `close` it at the end."""

    def __init__(
        self,
        summary: RunSummary,
        total: int,
        done: int,
        *,
        engine: Engine | None = None,
        stream: TextIO | None = None,
        log_every: float = 60.0,
        redraw_every: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.summary = summary
        self.total = total  # rollouts of the shard
        self.done = done
        self.engine = engine
        self.stream = stream if stream is not None else sys.stderr
        self.tty = _on_terminal(self.stream)
        self.every = redraw_every if self.tty else log_every
        self.clock = clock
        self.started = clock()
        self._last = self.started
        self._done_at_start = done
        # The terminal's line is drawn from the generating thread (a result) and from the ticker.
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._ticker: threading.Thread | None = None

    def start(self) -> Progress:
        """On a terminal, draw the line now and again every `redraw_every` seconds until `close`:
        elapsed time and rates move while no result comes (a batch generating, a long prefill)."""
        if self.tty and self._ticker is None:
            self._show()
            self._ticker = threading.Thread(target=self._tick, name="eagle3-synth-progress", daemon=True)
            self._ticker.start()
        return self

    def _tick(self) -> None:
        while not self._stopped.wait(self.every):
            self._show()

    def in_flight(self) -> int | None:
        return None if self.engine is None else self.engine.in_flight

    def line(self) -> str:
        s = self.summary
        elapsed = self.clock() - self.started
        left = max(self.total - self.done, 0)
        parts = [f"{run_label(s.config, s.shard)}: {self.done}/{counted(self.total, s.counts.unit)} "
                 f"({_ratio(self.done, self.total):.1%})"]
        if s.generated:
            parts += [f"{_ratio(s.generated, elapsed):.2f} samples/s",
                      f"{_ratio(s.output_tokens, elapsed):.1f} output tokens/s",
                      f"prefix cache {_ratio(s.cached_tokens, s.prompt_tokens):.0%}"]
        else:
            parts.append("generating, no result yet")
        in_flight = self.in_flight()
        if in_flight is not None:
            parts.append(f"in flight {in_flight}")
        # Rollouts finished per second, measured in this run: a conversation's earlier turns are
        # results but not progress, and each config's own lengths set its pace.
        finishing = _ratio(self.done - self._done_at_start, elapsed)
        parts.append(f"ETA {format_duration(left / finishing)}" if finishing else "ETA ?")
        if s.retractions:
            parts.append(f"retractions {s.retractions}")
        if s.errors:
            parts.append(f"errors {len(s.errors)}")
        parts.append(f"{format_duration(elapsed)} elapsed")
        return " | ".join(parts)

    def update(self, result: GenerationResult, *, finished: bool = True) -> None:
        """Count a result; `finished`: it ends its rollout (a conversation's earlier turns do not)."""
        with self._lock:
            self.summary.add(result)
            self.done += finished
        now = self.clock()
        if now - self._last >= self.every or self.done == self.total:
            self._last = now
            self._show()

    def _show(self) -> None:
        with self._lock:
            if self.tty:
                filled = int(20 * _ratio(self.done, self.total))
                self.stream.write(f"\r[{'#' * filled}{'.' * (20 - filled)}] {self.line()}\x1b[K")
                self.stream.flush()
            else:
                log.info("%s", self.line())

    def close(self) -> None:
        self._stopped.set()
        if self._ticker is not None:
            self._ticker.join()
        self.summary.generation_seconds = self.clock() - self.started
        if self.tty:
            self._show()  # the line as it ends (an interrupted run's too)
            self.stream.write("\n")
            self.stream.flush()


@dataclass
class Coverage:
    """What a run directory holds for a config, checked before assembly."""

    config: str
    run_dir: str
    counts: PromptCounts  # the prompts, rollouts and samples prepared, and the rejects
    finish_reasons: Counter  # of the result kept per sample; "abort" = every attempt failed
    failed: list[str]  # reasons of failed samples (first MAX_LISTED)
    missing: np.ndarray  # the first sample_id of each rollout not finished
    layouts: dict[int, set[int]]  # num_shards -> shard indices that journaled here
    duplicates: int = 0
    torn: int = 0
    corrupt: int = 0
    # sample_ids of the prepared prompts (each rollout's first; what assembly splits into ranges),
    # where each rollout's ids stop (first + turns), and the conversations of the `missing` rollouts
    sample_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    sample_id_stops: np.ndarray | None = None
    missing_conversations: np.ndarray | None = None

    @property
    def complete(self) -> bool:
        return len(self.missing) == 0

    @property
    def rows(self) -> int:
        return sum(n for reason, n in self.finish_reasons.items() if reason != "abort")

    def lines(self) -> list[str]:
        failed = self.finish_reasons.get("abort", 0)
        reasons = ", ".join(f"{k}={v}" for k, v in sorted(self.finish_reasons.items()) if k != "abort")
        missing = len(self.missing) if self.counts.unit == "samples" else counted(len(self.missing), self.counts.unit)
        lines = [
            f"{self.config}: {self.counts.kept()} in {self.run_dir}: {self.rows} results "
            f"({reasons or 'none'}), {failed} failed, {missing} not generated yet"
        ]
        if failed:
            lines.append(f"  failed, left out of the dataset: {counted(failed, 'samples')}; "
                         "generate with --retry-errors to try them again:")
            lines += [f"    {reason}" for reason in self.failed]
        if self.duplicates:
            lines.append(f"  {counted(self.duplicates, 'samples')} generated more than once (overlapping shards or "
                         "concurrent runs); each is in the dataset once: the first result journaled")
        if self.torn or self.corrupt:
            lines.append(f"  skipped {self.torn} journal lines torn by a crash and {self.corrupt} invalid lines "
                         "(those samples were, or will be, generated again)")
        return lines

    def missing_message(self) -> str:
        """Why assembly refuses, which shards to run, and how to build anyway."""
        count = len(self.missing)
        head = (f"{self.config}: {count} of {counted(self.counts.rollouts, self.counts.unit)} in {self.run_dir} "
                "have no result yet")
        command = f"eagle3-synth generate {self.config} --run-dir {self.run_dir}"
        if not self.layouts:
            body = [f"nothing has been generated there; run `{command} ...` (or build with --model)"]
        else:
            shards = max(self.layouts)
            conversations = self.missing if self.missing_conversations is None else self.missing_conversations
            owners, counts = np.unique(conversations % shards, return_counts=True)
            body = []
            for index, n in list(zip(owners.tolist(), counts.tolist()))[:MAX_LISTED]:
                state = "started, not finished" if index in self.layouts[shards] else "never started"
                example = ", ".join(str(i) for i in self.missing[conversations % shards == index][:3].tolist())
                what = "all samples" if shards == 1 else f"shard {index} of {shards}"
                body.append(f"{what} ({state}): {n} missing, e.g. sample_id {example}")
            if len(owners) > MAX_LISTED:
                body.append(f"... and {len(owners) - MAX_LISTED} more shards")
            flags = "" if shards == 1 else f" --num-shards {shards} --shard-index I"
            body.append(f"finish them with `{command}{flags} ...` (the same model and settings)")
        body.append("or pass --partial to build from what is there")
        return head + ":\n  " + "\n  ".join(body)
