"""Waiting on what tasks on a scheduler do, seen from outside: their journal files and processes."""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path


def poll(condition: Callable[[], bool], what: str, timeout: float = 180.0) -> None:
    """Look again until `condition` holds (another process's progress has no event to wait on);
    fail naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.2)


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def generating_processes(run_dir: Path) -> list[int]:
    """Live processes of this machine that journal into `run_dir` (the pid in each journal header)."""
    pids = []
    host = socket.gethostname()
    for path in sorted((run_dir / "journal").glob("*.jsonl")):
        with open(path, "rb") as handle:
            first = handle.readline()
        if not first.endswith(b"\n"):
            continue
        header = json.loads(first)
        if header.get("host") == host and _state(int(header["pid"])) not in (None, "Z"):
            pids.append(int(header["pid"]))
    return pids


def stopped(pids: list[int]) -> list[int]:
    return [pid for pid in pids if _state(pid) == "T"]


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def kill(pid: int, signal: int) -> None:
    try:
        os.kill(pid, signal)
    except ProcessLookupError:
        pass
