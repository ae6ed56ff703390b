"""A budget that holds: caps per config that fit a number of hours, from what a run has measured.

From each config's run directory: the mean output tokens of a rollout (every turn of it; finished
rollouts when there are any, else every rollout with a result), and the engine's throughput in
output tokens per second over the sessions that generated there (a session runs from the
`started` of its journal header to its journal files' last modification). The plan keeps the
configs' shares -- their caps (`prompts/configs.py`) -- and scales them all by one factor so that
the total output tokens fit `hours x throughput x nodes`; a config is never planned above its cap.
Decode time dominates a long-output job, so prompt tokens are not counted (the measured throughput
already includes the prefills that happened meanwhile).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np

from eagle3_synth.errors import ConfigError
from eagle3_synth.prompts.configs import get_config
from eagle3_synth.run.conversations import DONE, rollout_states
from eagle3_synth.run.directory import RunDirectory
from eagle3_synth.run.shards import Shard


@dataclass(frozen=True)
class Measured:
    """What one config's run directory says so far."""

    config: str
    cap: int
    mean_output_tokens: float
    output_tokens: int  # every journaled result's
    session_seconds: float  # summed over the sessions that generated these results


def _parse_time(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()


def _session_seconds(run: RunDirectory, index: Any) -> float:
    """Each session's span: header `started` to its last file's modification, summed."""
    spans: dict[str, list[float]] = defaultdict(list)
    starts: dict[str, float] = {}
    for header in index.sessions:
        if header.get("started"):
            starts.setdefault(header["session"], _parse_time(header["started"]))
    for path in run.journal_files():
        session = path.rsplit("/", 1)[-1].rsplit("-", 1)[0]
        modified = run.fs.modified(path)
        spans[session].append(modified.replace(tzinfo=modified.tzinfo or timezone.utc).timestamp())
    return sum(max(0.0, max(ends) - starts[session]) for session, ends in spans.items() if session in starts)


def measure(run_dir: str) -> Measured:
    """The figures of one run directory (ConfigError naming it when it holds nothing yet)."""
    run = RunDirectory(run_dir)
    if not run.exists() or not run.prompts_ready:
        raise ConfigError(f"{run_dir}: no run here yet (no run.json or prompts.jsonl); start it, or run a short pilot "
                          "with --limit, then plan")
    config = run.read_run_file()["fields"]["config"]
    index = run.scan()
    slots = run.prompt_slots()
    states = rollout_states(slots, index, Shard(), retry_errors=False)
    tokens_per_rollout = np.zeros(len(slots), dtype=np.int64)
    completion = index.completion_tokens.astype(np.int64)  # read from each line's head by the scan
    owner = np.searchsorted(slots.first, index.sample_ids, side="right") - 1
    np.add.at(tokens_per_rollout, owner[owner >= 0], completion[owner >= 0])
    done = states.state == DONE
    started = states.turn >= 0
    pick = done if done.any() else started
    if not pick.any():
        raise ConfigError(f"{run_dir}: nothing generated yet; let it run (or a pilot with --limit), then plan")
    return Measured(config=config, cap=get_config(config).cap,
                    mean_output_tokens=float(tokens_per_rollout[states.rollout[pick]].mean()),
                    output_tokens=int(completion.sum()), session_seconds=_session_seconds(run, index))


@dataclass(frozen=True)
class BudgetRow:
    config: str
    cap: int
    mean_output_tokens: float
    hours_at_cap: float
    limit: int
    hours: float


@dataclass(frozen=True)
class Budget:
    rows: list[BudgetRow]
    tokens_per_second: float
    hours: float
    nodes: int
    measured_from: str

    @property
    def fits_at_caps(self) -> bool:
        return all(row.limit == row.cap for row in self.rows)

    def lines(self) -> list[str]:
        head = ["config", "cap", "mean output tokens", "hours at cap", "--limit", "hours"]
        body = [[r.config, f"{r.cap:,}", f"{r.mean_output_tokens:,.0f}", f"{r.hours_at_cap:.1f}", f"{r.limit:,}",
                 f"{r.hours:.1f}"] for r in self.rows]
        total = sum(r.hours for r in self.rows)
        body.append(["all", f"{sum(r.cap for r in self.rows):,}", "", f"{sum(r.hours_at_cap for r in self.rows):.1f}",
                     f"{sum(r.limit for r in self.rows):,}", f"{total:.1f}"])
        widths = [max(len(str(x)) for x in column) for column in zip(head, *body)]
        table = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths)))
                 for line in (head, *body)]
        fit = ("every config fits at its cap" if self.fits_at_caps else
               f"caps scaled by {self.rows[0].limit / self.rows[0].cap:.3f} to fit" if self.rows else "")
        return [f"throughput: {self.tokens_per_second:,.0f} output tokens/s per node ({self.measured_from}); "
                f"budget {self.hours:g} h x {self.nodes} node(s): {fit}", *table,
                "pass: " + "; ".join(f"{r.config} --limit {r.limit}" for r in self.rows)]


def plan_budget(measured: Sequence[Measured], hours: float, *, nodes: int = 1,
                tokens_per_second: float | None = None) -> Budget:
    """Limits per config keeping the caps' shares, scaled to fit (module doc)."""
    if not hours > 0:
        raise ConfigError(f"--hours must be > 0, got {hours}")
    if nodes < 1:
        raise ConfigError(f"--nodes must be >= 1, got {nodes}")
    if not measured:
        raise ConfigError("nothing to plan: give the run directories of the configs (or a dataset folder)")
    if tokens_per_second is None:
        seconds = sum(m.session_seconds for m in measured)
        if seconds <= 0:
            raise ConfigError("no session time measured in these run directories; pass --tokens-per-second")
        tokens_per_second = sum(m.output_tokens for m in measured) / seconds
        source = f"measured: {sum(m.output_tokens for m in measured):,} tokens in {seconds:,.0f} s of generation"
    else:
        if not tokens_per_second > 0:
            raise ConfigError(f"--tokens-per-second must be > 0, got {tokens_per_second}")
        source = "given"
    rate = tokens_per_second * nodes
    need = sum(m.cap * m.mean_output_tokens for m in measured)
    scale = min(1.0, hours * 3600 * rate / need) if need else 1.0
    rows = []
    for m in measured:
        limit = min(m.cap, math.floor(m.cap * scale))
        rows.append(BudgetRow(m.config, m.cap, m.mean_output_tokens, m.cap * m.mean_output_tokens / rate / 3600, limit,
                            limit * m.mean_output_tokens / rate / 3600))
    return Budget(rows, tokens_per_second, hours, nodes, source)
