"""Locks: one generator per shard of a run directory, one writer at a time in a dataset folder.

**Shard locks** (`ShardLock`, taken through `RunDirectory.lock`). While a process generates shard I
of N it holds `<run_dir>/.shard-I-of-N.lock`, a small JSON file naming it (host, pid, PID namespace,
process start, since when, lease, a random token); a second generator of that shard is refused with
one line naming it. Other shards, of any count, run at once: a sample generated twice is kept once
(the journal, `directory.py`). The lock is released on every way out Python sees; a SIGKILL, OOM
kill or crash leaves it behind, and the next generator takes it over when its holder is gone:

- on *this* host (same hostname and PID namespace): no such pid, a zombie, or the pid of a process
  started at another time (`/proc/PID/stat`). Under a guard `<lock>.takeover` the taker reads the
  lock again and replaces it only if it still names the dead holder: exactly one of several wins.
- on *another* host or container, which cannot be checked from here: once its lease expired. The
  holder stamps its lock every lease / 10 s; one unstamped for a lease (10 min: a lost node, its
  Slurm task requeued elsewhere) is taken over, its age read on the store's clock (a probe file's
  stamp minus the lock's), never a node's.

Exclusive creation: `O_EXCL` on a local disk or NFS; mode "xb" on fsspec stores, which s3fs and
gcsfs >= 2024.12 send as a conditional write (s3fs core.py `S3File.commit`: `If-None-Match: *`;
gcsfs core.py: `ifGenerationMatch=0`). A backend refusing "xb" gets check-then-write, best effort
(the token read back catches an overwritten writer); a duplicate generator costs work, never data.

**The folder lock** (`folder_lock`): builds into one `--out` install their config and rewrite
README.md one at a time, so every config ends up listed. `fcntl.flock` on `<folder>/.eagle3-synth.lock`,
released by the kernel however the process dies (never stale); the file stays (unlinking it races
with a waiter) and is never published.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import re
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from fsspec import AbstractFileSystem

from eagle3_synth.errors import ConfigError
from eagle3_synth.run.kill_points import kill_point
from eagle3_synth.run.shards import Shard
from eagle3_synth.files import utc_timestamp

log = logging.getLogger(__name__)

_SHARD_LOCK = re.compile(r"\.shard-(\d+)-of-(\d+)\.lock")
GUARD_SUFFIX = ".takeover"
ALIVE, DEAD, UNKNOWN = "alive", "dead", "unknown"
TAKEOVER_PATIENCE = 30.0  # seconds to wait for another process taking the same dead lock over
LEASE_SECONDS = 600.0  # ten stamps fit in it: a briefly stalled store does not expire a live lock
RENEWALS_PER_LEASE = 10
FOLDER_LOCK_FILE = ".eagle3-synth.lock"


class LockHeld(ConfigError):
    """Another process holds the lock (or may: one this host cannot check); the message names it."""


def shard_lock_name(shard: Shard) -> str:
    return f".shard-{shard.index}-of-{shard.count}.lock"


def _pid_namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, start in clock ticks since boot) of a process: fields 3 and 22 of /proc/PID/stat (proc(5))."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        return fields[0].decode(), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


@dataclass(frozen=True)
class Holder:
    """Who holds a lock: what the lock file says."""

    host: str
    pid: int
    since: str
    token: str
    pid_namespace: str | None = None
    process_start: int | None = None  # clock ticks since boot: tells a reused pid from the holder
    lease: float = LEASE_SECONDS  # seconds without a stamp after which the lock is expired

    @classmethod
    def me(cls, lease: float = LEASE_SECONDS) -> "Holder":
        stat = _proc_stat(os.getpid())
        return cls(socket.gethostname(), os.getpid(), utc_timestamp(), secrets.token_hex(8), _pid_namespace(),
                   stat[1] if stat else None, lease)

    def to_bytes(self) -> bytes:
        return (json.dumps(asdict(self)) + "\n").encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes | None) -> "Holder | None":
        """The holder a lock file names; None for an empty, torn or foreign file (every lock records a lease)."""
        try:
            record = json.loads(data or b"")
        except ValueError:
            return None
        if not (isinstance(record, dict) and isinstance(record.get("pid"), int) and record.get("token")
                and isinstance(record.get("lease"), (int, float))):
            return None
        return cls(**{name: record.get(name) for name in cls.__dataclass_fields__})

    def __str__(self) -> str:
        return f"pid {self.pid} on host {self.host} since {self.since}"


def holder_state(holder: Holder) -> str:
    """ALIVE, DEAD, or UNKNOWN for a holder on another host or in another PID namespace."""
    if holder.host != socket.gethostname() or holder.pid_namespace != _pid_namespace():
        return UNKNOWN
    try:
        os.kill(holder.pid, 0)
    except ProcessLookupError:
        return DEAD
    except PermissionError:
        pass  # another user's process: it exists
    stat = _proc_stat(holder.pid)
    if stat is not None and (stat[0] == "Z" or (holder.process_start is not None and stat[1] != holder.process_start)):
        return DEAD  # exited and not yet reaped, or the pid now belongs to a process started later
    return ALIVE


class LockStore:
    """Lock files on the run directory's filesystem: exclusive create (module docstring), read, stamp, age."""

    def __init__(self, fs: AbstractFileSystem):
        self.fs = fs
        self.local = "file" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,))
        self.created: list[str] = []  # local folders a create made, deepest first (`remove_created`)

    def create(self, path: str, data: bytes) -> bool:
        if not self.local:
            try:
                with self.fs.open(path, "xb") as handle:
                    handle.write(data)
            except FileExistsError:
                return False
            except (ValueError, NotImplementedError):  # a backend that refuses mode "xb": check, then write
                if self.fs.exists(path):
                    return False
                self.fs.pipe_file(path, data)
            return True
        for attempt in range(3):
            folder = os.path.dirname(path)
            while folder and not os.path.isdir(folder):
                self.created.append(folder)
                folder = os.path.dirname(folder)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                break
            except FileExistsError:
                return False
            except FileNotFoundError:  # its folder was removed meanwhile (`remove_created` of a failed run)
                if attempt == 2:
                    raise
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        return True

    def read(self, path: str) -> bytes | None:
        self.fs.invalidate_cache(path)
        try:
            return self.fs.cat_file(path)
        except FileNotFoundError:
            return None

    def remove(self, path: str) -> None:
        try:
            self.fs.rm_file(path)
        except FileNotFoundError:
            pass

    def names(self, directory: str) -> list[str]:
        self.fs.invalidate_cache(directory)
        try:
            return [posixpath.basename(p.rstrip("/")) for p in self.fs.ls(directory, detail=False)]
        except FileNotFoundError:
            return []

    def touch(self, path: str) -> None:
        """Stamp `path` now: `utime` on a local disk (NFS: the server's time); object stores: write it again."""
        if self.local:
            os.utime(path)
        elif (data := self.read(path)) is not None:
            self.fs.pipe_file(path, data)

    def age(self, path: str) -> float | None:
        """Seconds since `path` was stamped, on the store's clock; None if absent or the store keeps no times."""
        try:
            then = self.fs.modified(path)
            probe = f"{path}.{secrets.token_hex(4)}.clock"
            self.fs.pipe_file(probe, b"")
            try:
                return (self.fs.modified(probe) - then).total_seconds()
            finally:
                self.remove(probe)
        except (FileNotFoundError, NotImplementedError):
            return None

    def lock_state(self, path: str, holder: Holder) -> str:
        """`holder_state`, with a holder this host cannot check DEAD once its lease has expired."""
        state = holder_state(holder)
        age = self.age(path) if state == UNKNOWN else None
        return DEAD if age is not None and age > holder.lease else state

    def remove_created(self) -> None:
        """Remove the folders `create` made if they are empty again: a command refused or failed
        before writing anything leaves no empty run directory behind."""
        for folder in self.created:
            try:
                os.rmdir(folder)
            except OSError:
                break  # not empty: someone else's files, or our own results
        self.created = []


class ShardLock:
    """The lock of one shard of a run directory: `with run.lock(shard): ...` (module docstring)."""

    def __init__(self, fs: AbstractFileSystem, root: str, url: str, shard: Shard, lease: float = LEASE_SECONDS):
        self.store, self.url, self.shard = LockStore(fs), url, shard
        self.path, self.shown = (posixpath.join(place, shard_lock_name(shard)) for place in (root, url))
        self.holder = Holder.me(lease)
        self.held = False
        self._stopped = threading.Event()
        self._heartbeat: threading.Thread | None = None

    def _read(self, path: str) -> Holder | None:
        return Holder.from_bytes(self.store.read(path))

    def _create(self, path: str) -> bool:
        """Create `path` naming this process; True only if it then reads back as ours."""
        if not self.store.create(path, self.holder.to_bytes()):
            return False
        found = self._read(path)
        return found is not None and found.token == self.holder.token

    def _refusal(self, holder: Holder) -> LockHeld:
        where, lock = f"run directory {self.url} ({self.shard})", f"(lock {self.shown})"
        if holder_state(holder) == UNKNOWN:
            return LockHeld(f"{where} is locked by {holder}, which this host cannot check {lock}; it is taken over "
                            f"once {holder.lease:g} s pass without the holder renewing it; if that process is gone "
                            f"(check on host {holder.host}), remove {self.shown} and run again")
        return LockHeld(f"{where} is being generated by {holder} {lock}; wait for it to finish, or stop it")

    def acquire(self) -> None:
        deadline = time.monotonic() + TAKEOVER_PATIENCE
        while not self._create(self.path):
            data = self.store.read(self.path)
            current = Holder.from_bytes(data)
            if current is None and data:  # there, but not a lock this package wrote whole
                raise LockHeld(f"run directory {self.url} ({self.shard}): the lock {self.shown} cannot "
                               "be read; if no process is generating this shard, remove it and run again")
            if current is not None and self.store.lock_state(self.path, current) != DEAD:
                raise self._refusal(current)
            if current is not None:
                kill_point("lock.stale")
                if self._take_over(current):
                    log.warning("%s: took over the lock of %s, which is gone (its process ended, or its lease "
                                "expired)", self.shard, current)
                    break
            # Being created (empty yet), vanished between our create and our read, or another process is
            # taking the same dead lock over (a guard held for a read, a remove and a create): look again.
            if time.monotonic() > deadline:
                raise LockHeld(f"run directory {self.url} ({self.shard}): the lock {self.shown} kept "
                               "changing while this process tried to take it; run again")
            time.sleep(0.02)
        self.held = True
        self._stopped.clear()
        self._heartbeat = threading.Thread(target=self._beat, name="shard-lock-lease", daemon=True)
        self._heartbeat.start()

    def _take_over(self, stale: Holder) -> bool:
        """Replace the dead holder's lock with ours under its guard: True when done, False to look again."""
        guard = self.path + GUARD_SUFFIX
        if not self._create(guard):
            other = self._read(guard)
            if other is not None and self.store.lock_state(guard, other) == DEAD:
                raise LockHeld(f"run directory {self.url} ({self.shard}): {other} died while taking over the stale "
                               f"lock {self.shown}; remove {self.shown + GUARD_SUFFIX} and run again")
            return False
        try:
            current = self._read(self.path)
            if current is not None and current.token != stale.token:
                raise self._refusal(current)
            if current is not None:
                self.store.remove(self.path)
            if self._create(self.path):
                return True
            if (current := self._read(self.path)) is None:  # another create slipped in after the removal,
                return False  # still being written, or gone again: look again
            raise self._refusal(current)
        finally:
            self._remove_if_ours(guard)

    def _beat(self) -> None:
        """Stamp the lock every lease / 10 s while it names this process, until released."""
        while not self._stopped.wait(self.holder.lease / RENEWALS_PER_LEASE):
            try:
                if (current := self._read(self.path)) is not None and current.token == self.holder.token:
                    self.store.touch(self.path)
            except Exception as exc:  # noqa: BLE001 - a store hiccup: the next beat tries again
                log.warning("could not renew the shard lock's lease: %s", exc)

    def _remove_if_ours(self, path: str) -> bool:
        current = self._read(path)
        ours = current is not None and current.token == self.holder.token
        if ours:
            self.store.remove(path)
        return ours

    def release(self) -> None:
        self._stopped.set()
        if self._heartbeat is not None:
            self._heartbeat.join()
            self._heartbeat = None
        if not self.held:
            return
        self.held = False
        if not self._remove_if_ours(self.path):
            log.warning("%s: the lock %s no longer names this process (removed or replaced by hand?); left as is",
                        self.shard, self.shown)
        if self.store.local:
            self.store.remove_created()

    def __enter__(self) -> "ShardLock":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def shard_locks(fs: AbstractFileSystem, root: str) -> list[tuple[Shard, Holder, str]]:
    """Every shard lock in a run directory whose holder is not known to be dead: (shard, holder, state)."""
    store, found = LockStore(fs), []
    for name in sorted(store.names(root)):
        match = _SHARD_LOCK.fullmatch(name)
        if match is None or int(match[1]) >= int(match[2]):
            continue
        path = posixpath.join(root, name)
        holder = Holder.from_bytes(store.read(path))
        if holder is not None and (state := store.lock_state(path, holder)) != DEAD:
            found.append((Shard(int(match[1]), int(match[2])), holder, state))
    return found


_held_folders = threading.local()


@contextmanager
def folder_lock(folder: str | Path, on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold the folder's lock, waiting for another holder (`on_wait` hears a line naming it); re-entrant."""
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
        os.ftruncate(fd, 0)
        os.pwrite(fd, Holder.me().to_bytes(), 0)
        held.add(key)
        try:
            yield
        finally:
            held.discard(key)
    finally:
        os.close(fd)  # releases the flock
