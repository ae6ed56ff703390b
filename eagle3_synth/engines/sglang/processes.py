"""Process and signal hygiene for the in-process SGLang engine.

Shut it down without killing the caller's other child processes:

`sglang.Engine.shutdown()` (0.5.23) ends with `kill_process_tree(os.getpid(), include_parent=False)`:
it SIGKILLs *every* descendant of the calling process, including ones the caller started for
itself (a data loader, a second engine, a test server). It also registers that shutdown with
`atexit`. So we note which child processes appeared while the engine launched, and during shutdown
replace the `kill_process_tree` that `shutdown` looks up in its module with one that kills only
those trees. Linux only, like SGLang: children are read from /proc.

Keep the caller's SIGTERM handler: SGLang's tokenizer manager, when its first request arrives,
installs a SIGTERM handler on its event loop that waits for every request in flight (with our
window refilling, that is the whole run), then kills the caller's whole process tree and exits.
A preempted job needs the opposite: stop now, journal intact, resume later. So we let SGLang bind
its response loop at launch and put the caller's handler back.

Survive the engine's death: a child that fails (the scheduler's exception, sglang 0.5.23
srt/managers/scheduler.py `run_scheduler_process`) or dies (SGLang's subprocess watchdog notices,
srt/utils/watchdog.py `SubprocessWatchdog`) sends SIGQUIT to this process, and SGLang's handlers answer it by
killing this process's whole tree, this process included (the launch phase's, srt/entrypoints/engine.py
`_set_envs_and_config`; the running phase's, srt/managers/tokenizer_manager.py
`SignalHandler.running_phase_sigquit_handler`): eagle3-synth would end with exit 137 and no word. We replace
both: during launch with SGLang's own `custom_sigquit_handler` server argument (`launch_died`: an engine that
cannot start, which `engine.launch` reports as the user's to fix, exit 2),
then on the engine's loop (`on_sigquit`: a death mid-run, `EngineDied`, exit 75).

Leave Ctrl-C to the caller: the engine's processes ignore SIGINT (`without_ctrl_c`), so a terminal's
Ctrl-C, sent to the whole process group, stops the run once, in this process (exit 130), instead of
each of them printing a traceback and dying.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import signal
import struct
import sys
import termios
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from functools import partial
from pathlib import Path
from typing import Any

# The last lines the in-process SGLang engine's processes wrote, for the message when it dies.
#
# SGLang's scheduler and detokenizer are spawned children that inherit this process's stderr and
# log there (a scheduler's exception is logged, then it signals the parent, sglang 0.5.23
# srt/managers/scheduler.py `run_scheduler_process`). To name the cause when the engine dies, stderr (file
# descriptor 2) is passed through a pipe while the engine runs: a thread copies every byte on to
# the original stderr, unchanged and at once, and keeps the last lines. The children started while
# it is on write into the pipe; `close()` puts the original stderr back.

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


def child_pids(pid: int | None = None) -> set[int]:
    """Direct children of `pid` (default: this process), read from /proc/*/stat."""
    parent = os.getpid() if pid is None else pid
    children = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # the process ended while we looked
        # After "pid (comm)": state, ppid, ...
        if int(fields[1]) == parent:
            children.add(int(stat.parent.name))
    return children


@contextmanager
def owned_children() -> Iterator[set[int]]:
    """Yields a set that, after the block, holds the child processes started inside it."""
    before = child_pids()
    owned: set[int] = set()
    try:
        yield owned
    finally:
        owned |= child_pids() - before


@contextmanager
def kill_only(module: Any, owned: set[int]) -> Iterator[None]:
    """While inside, `module.kill_process_tree(os.getpid(), ...)` kills only the `owned` trees."""
    original: Callable[..., Any] | None = getattr(module, "kill_process_tree", None)
    if original is None:
        yield
        return

    def kill_owned(parent_pid: int | None = None, include_parent: bool = True, skip_pid: int | None = None,
                   wait_timeout: float | None = 60) -> None:
        if parent_pid is not None and parent_pid != os.getpid():
            original(parent_pid, include_parent=include_parent, skip_pid=skip_pid, wait_timeout=wait_timeout)
            return
        for pid in sorted(owned):
            if pid != skip_pid:
                original(pid, include_parent=True, wait_timeout=wait_timeout)

    module.kill_process_tree = kill_owned
    try:
        yield
    finally:
        module.kill_process_tree = original


def kill_trees(owned: set[int]) -> None:
    """SIGKILL each owned process and its descendants (an engine that died or never started)."""
    for pid in sorted(owned):
        for descendant in sorted(descendants(pid)) + [pid]:
            try:
                os.kill(descendant, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass


def descendants(pid: int) -> set[int]:
    """Every process below `pid` (children, theirs, ...), read from /proc."""
    found, frontier = set(), {pid}
    while frontier:
        children = set().union(*(child_pids(p) for p in frontier)) - found
        found |= children
        frontier = children
    return found


def guarded_shutdown(engine: Any, owned: set[int]) -> None:
    """`engine.shutdown()`, with its process-tree kill limited to the engine's own processes.

    Patched in the module of every class in the engine's MRO, so a subclass's shutdown that calls
    SGLang's is covered too.
    """
    modules = {sys.modules.get(cls.__module__) for cls in type(engine).__mro__} - {None}
    with ExitStack() as stack:
        for module in modules:
            stack.enter_context(kill_only(module, owned))
        engine.shutdown()


# On a CPU with AMX, each SGLang rank creates a shared-memory segment for its all-reduce
# (sglang 0.5.23 srt/distributed/bootstrap.py `_init_cpu_threads_env` -> sgl-kernel csrc/cpu/shm.cpp:157-176,
# `shm_open` of `deepspeed_allreduce_buffer_<uid>_<addr>_<port>_<rank>`, up to 258 MiB) and nothing
# unlinks it: every engine started and stopped leaves one in /dev/shm until the machine reboots.
CPU_ALLREDUCE_SHM = "/dev/shm/deepspeed_allreduce_buffer_"


def mapped_shm_segments(pids: set[int]) -> set[Path]:
    """The all-reduce segments these processes have mapped (their /proc/<pid>/maps): exactly the
    engine's own, whatever other engines run beside it."""
    found: set[Path] = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as maps:
                for line in maps:
                    path = line.rstrip("\n").split(maxsplit=5)[-1]
                    if path.startswith(CPU_ALLREDUCE_SHM):
                        found.add(Path(path.removesuffix(" (deleted)")))
        except OSError:
            continue  # gone, or not ours to read
    return found


def tree_segments(pid: int) -> set[Path]:
    """The all-reduce segments `pid` and every process below it map (a server, or this process with
    an engine it started): read while they live, to be unlinked once they have stopped."""
    return mapped_shm_segments({pid} | descendants(pid))


def unlink_segments(segments: set[Path]) -> None:
    for segment in segments:
        try:
            segment.unlink()
        except OSError:
            pass


def process_names(pids: set[int]) -> dict[int, str]:
    """pid -> the name SGLang gave the process (`sglang::scheduler`...), read while it runs."""
    names = {}
    for pid in pids:
        try:
            names[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace") or str(pid)
        except OSError:
            names[pid] = str(pid)
    return names


def exited(pids: set[int]) -> dict[int, int | None]:
    """Those of this process's children in `pids` that have ended: pid -> exit code (negative: the
    signal; None: gone, its status already collected)."""
    ended: dict[int, int | None] = {}
    for pid in pids:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            if not Path(f"/proc/{pid}").exists():
                ended[pid] = None
            continue
        if done:
            ended[pid] = os.waitstatus_to_exitcode(status)
    return ended


def without_ctrl_c(engine_cls: type) -> type:
    """`engine_cls` (sglang.Engine) whose scheduler and detokenizer processes ignore SIGINT, through the
    class fields SGLang keeps for launching its processes otherwise (sglang 0.5.23 srt/entrypoints/
    engine.py `Engine.run_scheduler_process_func`, `run_detokenizer_process_func`). A terminal's Ctrl-C
    reaches the whole foreground process group: each of them would print its KeyboardInterrupt traceback
    and die. This process owns Ctrl-C, and stops them itself (`close()`)."""
    class Engine(engine_cls):  # type: ignore[misc, valid-type] - a class statement keeps SGLang's metaclass
        run_scheduler_process_func = staticmethod(partial(ignoring_ctrl_c, engine_cls.run_scheduler_process_func))
        run_detokenizer_process_func = staticmethod(partial(ignoring_ctrl_c, engine_cls.run_detokenizer_process_func))

    return Engine


def ignoring_ctrl_c(target: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`target(*args, **kwargs)` in one of SGLang's processes, SIGINT ignored (module-level: spawn pickles it)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return target(*args, **kwargs)


def launch_died(signum: int, frame: Any) -> None:
    """SIGQUIT while `sglang.Engine()` starts (passed as `custom_sigquit_handler`): a child failed
    before the engine was up. Raised in the main thread, so `Engine()` itself raises it."""
    from eagle3_synth.errors import EngineDied

    raise EngineDied("SGLang's engine failed while starting (one of its processes failed; its log is above)")


def on_sigquit(loop: asyncio.AbstractEventLoop, handler: Callable[[], None]) -> None:
    """`handler` for SIGQUIT on `loop`, in place of SGLang's tree kill (main thread only, as SGLang's)."""
    if threading.current_thread() is threading.main_thread():
        loop.add_signal_handler(signal.SIGQUIT, handler)


def callers_sigterm() -> Any:
    """The SIGTERM handler in place now; take it before SGLang starts, to give it back later."""
    return signal.getsignal(signal.SIGTERM)


def bind_loop_keep_sigterm(engine: Any, loop: asyncio.AbstractEventLoop, previous: Any) -> None:
    """Have SGLang bind its response handling to `loop` now; then put `previous` back for SIGTERM.

    SGLang binds to the loop *running* when it first handles a request or a control call
    (`auto_create_handle_loop`), so it is called from a coroutine on `loop`, before any other
    call. Its SIGQUIT handler (a worker died) stays.
    """
    bind = getattr(getattr(engine, "tokenizer_manager", None), "auto_create_handle_loop", None)
    if bind is None:
        return

    async def bind_now() -> None:
        bind()

    loop.run_until_complete(bind_now())
    if threading.current_thread() is threading.main_thread():
        loop.remove_signal_handler(signal.SIGTERM)
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
