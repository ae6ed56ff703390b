"""The last lines the in-process SGLang engine's processes wrote, for the message when it dies.

SGLang's scheduler and detokenizer are spawned children that inherit this process's stderr and
log there (a scheduler's exception is logged, then it signals the parent, sglang 0.5.23
srt/managers/scheduler.py `run_scheduler_process`). To name the cause when the engine dies, stderr (file
descriptor 2) is passed through a pipe while the engine runs: a thread copies every byte on to
the original stderr, unchanged and at once, and keeps the last lines. The children started while
it is on write into the pipe; `close()` puts the original stderr back.
"""

from __future__ import annotations

import fcntl
import os
import struct
import termios
import threading
import time
from collections import deque


class StderrTail:
    def __init__(self, lines: int = 20):
        self._lines: deque[str] = deque(maxlen=lines)
        self._partial = b""
        self._lock = threading.Lock()
        self._saved: int | None = None  # the original stderr, until close() puts it back
        self._read_end: int | None = None
        self._copying = False  # the thread still writes to its copy of the original stderr
        self._thread: threading.Thread | None = None

    def start(self) -> "StderrTail":
        """Route fd 2 through the pipe (no-op where fd 2 is not usable, e.g. closed)."""
        try:
            saved = os.dup(2)
        except OSError:
            return self
        read_end, write_end = os.pipe()
        os.dup2(write_end, 2)
        os.close(write_end)
        self._saved, self._copying, self._read_end = saved, True, read_end
        self._thread = threading.Thread(target=self._copy, args=(read_end, saved), name="sglang-stderr", daemon=True)
        self._thread.start()
        return self

    def _copy(self, read_end: int, out: int) -> None:
        """Until every writer of the pipe is gone; `out` (the original stderr) is closed by whichever
        of this thread and close() finishes last."""
        with os.fdopen(read_end, "rb", buffering=0) as pipe:
            while True:
                data = pipe.read(65536)
                if not data:
                    break
                try:
                    os.write(out, data)
                except OSError:
                    pass  # the original stderr went away; keep the tail anyway
                self._keep(data)
            self._read_end = None  # before the with closes it: its number may be reused
        with self._lock:
            self._copying = False
            if self._saved is None:
                os.close(out)

    def _keep(self, data: bytes) -> None:
        with self._lock:
            *complete, self._partial = (self._partial + data).split(b"\n")
            for line in complete:
                # What a terminal shows of it: a progress bar redraws its line after each "\r".
                text = line.rsplit(b"\r", 1)[-1].decode("utf-8", "replace").rstrip()
                if text:
                    self._lines.append(text)

    def _unread(self) -> int:
        """Bytes written to the pipe that the thread has not read yet (0 once it is closed)."""
        try:
            return struct.unpack("i", fcntl.ioctl(self._read_end, termios.FIONREAD, b"\0\0\0\0"))[0]
        except (OSError, TypeError):
            return 0

    def lines(self, settle_s: float = 2.0) -> list[str]:
        """The last lines, once the thread has read what is in the pipe (at most `settle_s`): a
        dying engine's last words were written just before the signal that asks for them."""
        deadline = time.monotonic() + settle_s
        while self._read_end is not None and self._unread() and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)  # the thread keeps what it read
        with self._lock:
            partial = self._partial.decode("utf-8", "replace").rstrip()
            return list(self._lines) + ([partial] if partial else [])

    def close(self) -> None:
        """Put the original stderr back on fd 2 (children still holding the pipe keep writing to it
        until they exit; the thread forwards that too, then ends and closes its copy)."""
        with self._lock:
            if self._saved is None:
                return
            os.dup2(self._saved, 2)
            if not self._copying:
                os.close(self._saved)
            self._saved = None
