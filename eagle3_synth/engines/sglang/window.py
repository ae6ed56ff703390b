"""A bounded in-flight window: one request per prompt, results handed on as each one completes.

Why not batch calls: a batch call returns only when its slowest prompt ends (a 10,240-token tail
keeps a whole chunk waiting while the engine drains), and one failing prompt fails the whole call.
Keeping `size` single requests in flight, and submitting the next one as soon as any finishes,
keeps a continuous-batching engine full until the prompts run out (benchmarks/bench_window.py).

The window runs on a caller-given event loop in the caller's thread, between the results it
yields: SGLang's in-process engine binds its request handling to one loop (`Engine.loop`), and
the HTTP engine keeps its own. Set `size` above the engine's running-request capacity so that the
engine's own queue covers the moment the consumer spends on each result.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar, Any

from eagle3_synth.contract.ranges import check_range

# What an SGLang engine runs now, and the in-flight window sized from it.
#
# A static window is wrong both ways on a real node (sglang 0.5.23): the running-request capacity SGLang
# reports, `effective_max_running_requests_per_dp` (srt/managers/scheduler_components/internal_state.py
# `SchedulerInternalStateController._add_topology`), is per attention-DP worker, and `dp_size=N` with DP
# attention is rewritten into `attn_dp_size=N, dp_size=1` (srt/arg_groups/parallel_hook.py
# `handle_deprecated_dp_attention`), so `per_dp * dp_size` feeds a node with attention DP 8 an eighth of what it
# runs (`running_capacity` counts both). And with `max_running_requests` unset that capacity reads 2,048-4,096
# per worker, far above what KV memory runs at 10k-token outputs: a window that large leaves thousands of
# requests queued inside SGLang -- they still drain past `--max-hours`, and `lpm` falls back to first-come order
# past 128 waiting per scheduler (srt/managers/schedule_policy.py `SchedulePolicy._determine_active_policy`).
#
# So the window follows the engine's load (`/v1/loads` or `tokenizer_manager.get_loads()`: per DP
# rank `num_running_reqs`, `num_waiting_reqs`, `token_usage`; srt/managers/load_snapshot.py `LoadSnapshot`,
# srt/entrypoints/v1_loads.py `get_loads`): what runs now plus a short queue per rank, grown while the
# engine takes everything it is given (nothing waiting), never above the ceiling.

log = logging.getLogger(__name__)

LOAD_POLL_S = 2.0  # how often the window reads the engine's load (between results)
QUEUE_PER_RANK = 8  # the least kept waiting per DP rank, so a finished request is replaced at once
MAX_QUEUE_PER_RANK = 64  # the most: well under lpm's 128-waiting fallback to first-come order
FAILED_READS = 3  # reads failing in a row before the window stays where it is
FULL_KV = 0.95  # a rank whose KV usage is above this takes nothing more, waiting or not
START_PER_RANK = 64  # the most a load-driven window starts with per rank (capacity may read 2,048-4,096)


@dataclass(frozen=True)
class EngineLoad:
    """The engine's load summed over its DP ranks."""

    running: int
    waiting: int
    ranks: int
    token_usage: float  # the fullest rank's KV usage, 0..1
    # Ranks that could run more: nothing waiting there and KV not full. Requests are spread over
    # the ranks, so one rank can starve while another queues.
    hungry: int = 0

    @classmethod
    def from_snapshots(cls, loads: Sequence[Mapping[str, Any]]) -> "EngineLoad | None":
        """From `/v1/loads`' `loads` (or `LoadSnapshot.to_dict()`s); None when there are none."""
        if not loads:
            return None
        return cls(running=sum(int(load.get("num_running_reqs") or 0) for load in loads),
                   waiting=sum(int(load.get("num_waiting_reqs") or 0) for load in loads),
                   ranks=len(loads),
                   token_usage=max(float(load.get("token_usage") or 0.0) for load in loads),
                   hungry=sum(1 for load in loads if not load.get("num_waiting_reqs")
                              and float(load.get("token_usage") or 0.0) < FULL_KV))

    def combine(self, other: "EngineLoad") -> "EngineLoad":
        """Two servers' loads as one (several --url)."""
        return EngineLoad(self.running + other.running, self.waiting + other.waiting, self.ranks + other.ranks,
                          max(self.token_usage, other.token_usage), self.hungry + other.hungry)


def running_ranks(info: Mapping[str, Any]) -> int:
    """DP ranks (schedulers) of an engine: `dp_size` replicas x `attn_dp_size` attention-DP groups,
    or the internal states it reports, one per scheduler."""
    states = info.get("internal_states") or [{}]
    return max(len(states), int(info.get("dp_size") or 1) * int(info.get("attn_dp_size") or 1))


def running_capacity(info: Mapping[str, Any]) -> int | None:
    """Requests the engine runs at once, over every DP rank; None when its info does not say."""
    states = info.get("internal_states") or [{}]
    per_rank = states[0].get("effective_max_running_requests_per_dp") if isinstance(states[0], Mapping) else None
    if not isinstance(per_rank, int) or isinstance(per_rank, bool) or per_rank <= 0:
        return None
    return per_rank * running_ranks(info)


def start_size(capacity: int | None, ranks: int, ceiling: int) -> int:
    """A load-driven window's first size: what the engine runs at once, at most START_PER_RANK per
    rank (an unset max_running_requests reads thousands, far above what KV holds); it doubles from
    there while the engine takes everything (`window_size`). Unknown capacity (a router's info):
    the ceiling, the static window."""
    if capacity is None:
        return max(1, ceiling)
    return max(1, min(ceiling, capacity, START_PER_RANK * max(ranks, 1)))


def window_size(load: EngineLoad, current: int, ceiling: int) -> int:
    """In flight next: what runs plus a queue of QUEUE_PER_RANK..MAX_QUEUE_PER_RANK per rank (a
    quarter of what runs). While some rank could run more (`hungry`), it grows instead -- doubling,
    up to MAX_QUEUE_PER_RANK waiting per rank -- since what is sent is spread over every rank."""
    ranks = max(load.ranks, 1)
    queue = min(max(QUEUE_PER_RANK * ranks, load.running // 4), MAX_QUEUE_PER_RANK * ranks)
    target = load.running + queue
    if load.hungry:
        target = min(load.running + MAX_QUEUE_PER_RANK * ranks, max(target, 2 * current))
    return max(1, min(ceiling, target))


class LoadDrivenSize:
    """Called by the window between results (`InFlightWindow(sizer=...)`): reads the load at most
    every `every` seconds and returns the window's next size. A read that fails keeps the size;
    after FAILED_READS in a row it stops reading (a router that serves no `/v1/loads`) and the
    window becomes the static ceiling, so an engine whose load cannot be seen is not underfed."""

    def __init__(self, read: Callable[[], EngineLoad | None], ceiling: int, *, every: float = LOAD_POLL_S,
                 clock: Callable[[], float] = time.monotonic):
        self.read = read
        self.ceiling = ceiling
        self.every = every
        self.clock = clock
        self._last = -float("inf")
        self._failures = 0
        self.last_load: EngineLoad | None = None

    def __call__(self, current: int) -> int:
        now = self.clock()
        if self._failures >= FAILED_READS or now - self._last < self.every:
            return current
        self._last = now
        try:
            load = self.read()
        except Exception as exc:  # informational: the window keeps its size
            load = None
            log.debug("reading the engine's load failed: %s", exc)
        if load is None:
            self._failures += 1
            if self._failures == FAILED_READS:
                log.info("the engine's load cannot be read; the in-flight window is fixed at %d", self.ceiling)
                return self.ceiling
            return current
        self._failures = 0
        self.last_load = load
        size = window_size(load, current, self.ceiling)
        if size != current:
            log.debug("in-flight window %d -> %d (running %d, waiting %d, KV %.0f%%)", current, size, load.running,
                      load.waiting, 100 * load.token_usage)
        return size


T = TypeVar("T")
R = TypeVar("R")


def check_window_size(size: int) -> int:
    check_range("max_in_flight", size)
    return size


class InFlightWindow:
    """Runs `start(item)` for every item, at most `size` at a time; yields results in completion order."""

    def __init__(self, loop: asyncio.AbstractEventLoop, size: int, sizer: Callable[[int], int] | None = None):
        check_window_size(size)
        self.loop = loop
        self.size = size
        # Called between results with the current size, returns the next (loads.LoadDrivenSize).
        self.sizer = sizer
        self._pending: set[asyncio.Future] = set()
        # Set by `stop_with` (the engine died): the run ends with that exception, whatever is in flight.
        self._stopped: asyncio.Future | None = None

    def stop_with(self, error: BaseException) -> None:
        """End `run` with `error` as soon as it waits (called on the loop, e.g. from a signal handler):
        for an engine that died, whose requests in flight will never complete."""
        if self._stopped is None:
            self._stopped = self.loop.create_future()
        if not self._stopped.done():
            self._stopped.set_exception(error)

    @property
    def in_flight(self) -> int:
        """Requests submitted and not yet handed on (read by progress displays)."""
        return len(self._pending)

    def run(self, items: Iterable[T], start: Callable[[T], Awaitable[R]]) -> Iterator[R]:
        """Yield `await start(item)` for each item as it completes.

        `start` should turn a per-item failure into a result; an exception it raises ends the run:
        the requests still in flight are cancelled (SGLang aborts a cancelled request) and the
        exception propagates. Closing the iterator early cancels them the same way.
        """
        iterator = iter(items)
        exhausted = False
        try:
            while True:
                if self.sizer is not None:
                    self.size = self.sizer(self.size)
                while not exhausted and len(self._pending) < self.size:
                    item = next(iterator, _END)
                    if item is _END:
                        exhausted = True
                    elif item is None:  # nothing ready until a result is handed on (engines/base.py)
                        if not self._pending:
                            raise RuntimeError("the request iterator yielded None with nothing in flight: "
                                               "no result can come back to unblock it")
                        break
                    else:
                        self._pending.add(self.loop.create_task(start(item)))
                if not self._pending:
                    return
                if self._stopped is None:
                    self._stopped = self.loop.create_future()
                done, self._pending = self.loop.run_until_complete(
                    asyncio.wait(self._pending | {self._stopped}, return_when=asyncio.FIRST_COMPLETED)
                )
                self._pending.discard(self._stopped)
                stopped = self._stopped in done
                done.discard(self._stopped)
                # Hand on every finished result before raising the first failure (each failed
                # task's exception is read, so none is reported as never retrieved).
                failed = [task for task in done if task.cancelled() or task.exception() is not None]
                for task in done:
                    if task not in failed:
                        yield task.result()
                if stopped:
                    self._stopped.result()  # the engine's death, before any request's own failure
                if failed:
                    failed[0].result()
        finally:
            self._cancel_pending()

    def _cancel_pending(self) -> None:
        pending, self._pending = self._pending, set()
        if not pending or self.loop.is_closed():
            return
        for task in pending:
            task.cancel()
        self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))


_END = object()
