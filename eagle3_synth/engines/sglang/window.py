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
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import TypeVar

from eagle3_synth.contract.ranges import check_range

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
