"""Crash-test hook: kill this process at a named place, so tests can crash a run exactly there."""

from __future__ import annotations

import os
import signal
from collections import Counter
from collections.abc import Callable

KILL_ENV = "EAGLE3_SYNTH_KILL_AT"
_kill_hits: Counter = Counter()


def kill_point(name: str, before: Callable[[], object] | None = None) -> None:
    """Crash-test hook: `EAGLE3_SYNTH_KILL_AT=NAME:N[:SIGNAL]` signals this process (default
    SIGKILL) the N-th time it reaches NAME.

    Tests use it to kill a run at exact places, mid-write of a journal line included, instead of
    racing a timer. `before` runs first (e.g. a flush, so the torn half-line reaches the file).
    Unset, it costs one environment lookup.
    """
    spec = os.environ.get(KILL_ENV)
    if not spec or not spec.startswith(name + ":"):
        return
    _, count, *sig = spec.split(":")
    _kill_hits[name] += 1
    if _kill_hits[name] == int(count):
        if before is not None:
            before()
        os.kill(os.getpid(), getattr(signal, "SIG" + (sig[0] if sig else "KILL")))
