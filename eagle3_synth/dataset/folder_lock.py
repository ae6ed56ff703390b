"""One writer at a time in a dataset folder: `folder_lock`.

Builds of several configs into one `--out` install their files
and rewrite the folder's README.md one at a time, waiting for each other, so every config ends
up listed. `fcntl.flock` on `<folder>/.eagle3-synth.lock`: blocking, released by the kernel when
the process dies however it dies (so never stale), re-entrant within a thread. The file stays
(unlinking a flock file races with a waiter that opened it); it is never published. Local folders
(a dataset folder is a local path); on NFS, Linux emulates flock with byte-range locks.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from eagle3_synth.run.lock import Holder

FOLDER_LOCK_FILE = ".eagle3-synth.lock"

_held_folders = threading.local()


@contextmanager
def folder_lock(folder: str | Path, on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold `<folder>/.eagle3-synth.lock` (flock; module docstring), waiting for another holder;
    `on_wait` hears one line naming it first. Re-entrant: a thread already holding it goes on."""
    import fcntl

    folder = Path(folder)
    key = os.path.realpath(folder)
    held: set[str] = _held_folders.__dict__.setdefault("paths", set())
    if key in held:
        yield
        return
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / FOLDER_LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = Holder.from_bytes(os.pread(fd, 4096, 0))
            if on_wait is not None:
                on_wait(f"waiting for {other or 'another process'} to finish writing into {folder}")
            fcntl.flock(fd, fcntl.LOCK_EX)
        me = Holder.me().to_bytes()
        os.ftruncate(fd, 0)
        os.pwrite(fd, me, 0)
        held.add(key)
        try:
            yield
        finally:
            held.discard(key)
    finally:
        os.close(fd)  # releases the flock
