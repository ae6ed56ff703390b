"""Concurrency tests without timing: CLI processes paused at kill points (SIGSTOP), and waits on
conditions (a process stopped, exited, a line in a file) instead of sleeps."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from eagle3_synth.cli import main
from eagle3_synth.run.kill_points import KILL_ENV

from . import cli_processes  # noqa: F401 - sets the forkserver's preload (the package imported once)

_CONTEXT = multiprocessing.get_context("forkserver")
HANG = 180  # seconds before a wait gives up: a hang detector, never part of what a test asserts


def _cli_logged(argv: list[str], kill_at: str | None, output: str) -> None:
    """Child process body: the CLI with the kill hook armed, stdout and stderr line-buffered into `output`."""
    if kill_at:
        os.environ[KILL_ENV] = kill_at
    sys.stdout = sys.stderr = open(output, "w", encoding="utf-8", buffering=1)
    sys.exit(main(argv))


def start_cli(argv: list[str], output: Path, kill_at: str | None = None) -> multiprocessing.process.BaseProcess:
    """The CLI in a separate process, everything it prints (errors too) going to the file `output`."""
    process = _CONTEXT.Process(target=_cli_logged, args=(argv, kill_at, str(output)))
    process.start()
    return process


def start(target: Callable[..., None], *args: object) -> multiprocessing.process.BaseProcess:
    """`target(*args)` in a separate process (a module-level function of an importable module)."""
    process = _CONTEXT.Process(target=target, args=args)
    process.start()
    return process


def wait_until(condition: Callable[[], bool], what: str) -> None:
    """Poll `condition` until it holds; fail the test if it does not within HANG seconds."""
    deadline = time.monotonic() + HANG
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.01)


def is_stopped(process: multiprocessing.process.BaseProcess | int) -> bool:
    """Whether the process (or pid) is stopped by a signal (state T in /proc/PID/stat, Linux)."""
    pid = process if isinstance(process, int) else process.pid
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[0] == b"T"
    except (OSError, IndexError):
        return False


def stopped_or_exited(process: multiprocessing.process.BaseProcess) -> bool:
    return process.exitcode is not None or is_stopped(process)


def resume(process: multiprocessing.process.BaseProcess) -> None:
    os.kill(process.pid, signal.SIGCONT)


def finish(process: multiprocessing.process.BaseProcess) -> int:
    """The exit code of a process (continued first if stopped); fails the test if it hangs."""
    if is_stopped(process):
        resume(process)
    process.join(HANG)
    if process.exitcode is None:
        process.kill()
        process.join()
        pytest.fail(f"process {process.pid} was still running after {HANG}s")
    return process.exitcode


def stopped_at(command: list[str], kill_at: str, log: Path, act: Callable[[subprocess.Popen], object],
               env: dict[str, str] | None = None, timeout: float = HANG, **popen: object) -> int:
    """Run `command` (a CLI run, output to `log`) until it stops itself at the kill point `kill_at`
    (SIGSTOP), do `act(process)` while it is stopped (signal it, kill its engine), continue it and
    wait for its exit status; it is killed if anything fails on the way."""
    with open(log, "wb") as handle:
        process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT,
                                   env={**(env or os.environ), KILL_ENV: f"{kill_at}:STOP"}, **popen)
    try:
        wait_until(lambda: is_stopped(process.pid) or process.poll() is not None, f"the command to stop at {kill_at}")
        assert process.poll() is None, f"it ended before {kill_at}:\n{log.read_text()[-3000:]}"
        act(process)
        os.kill(process.pid, signal.SIGCONT)
        return process.wait(timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def stop_all(processes: Iterable[multiprocessing.process.BaseProcess]) -> None:
    """Kill exactly these processes if they still run (a failed test leaves none behind)."""
    for process in processes:
        if process.exitcode is None:
            process.kill()  # SIGKILL ends a stopped process too
            process.join()
