"""Crash-test hook: `EAGLE3_SYNTH_KILL_AT=NAME:N[:SIGNAL]` signals this process (default SIGKILL) the
N-th time it reaches the kill point NAME, so tests kill a run at exact places, mid-write of a journal
line included, instead of racing a timer.

The variable is read once per process, at its first kill point: a test arms a process by starting it
with the variable set (a child process sets it before running the CLI). It reaches other processes as
any variable does (a subprocess inherits it, Slurm passes sbatch's environment on, a Ray actor gets the
`env_vars` of its `runtime_env`); nothing here forwards it.
"""

from __future__ import annotations

import functools
import os
import signal
from collections import Counter
from collections.abc import Callable

KILL_ENV = "EAGLE3_SYNTH_KILL_AT"
_hits: Counter[str] = Counter()


@functools.cache
def _armed() -> tuple[str, int, signal.Signals] | None:
    """(kill point, N, signal) from the environment, or None when unset."""
    spec = os.environ.get(KILL_ENV)
    if not spec:
        return None
    name, count, *sig = spec.split(":")
    return name, int(count), signal.Signals["SIG" + (sig[0] if sig else "KILL")]


def kill_point(name: str, before: Callable[[], object] | None = None) -> None:
    """Signal this process here if the hook names this point and this is its N-th visit; `before`
    runs first (e.g. a flush, so the torn half-line reaches the file)."""
    armed = _armed()
    if armed is None or armed[0] != name:
        return
    _hits[name] += 1
    if _hits[name] == armed[1]:
        if before is not None:
            before()
        os.kill(os.getpid(), armed[2])
