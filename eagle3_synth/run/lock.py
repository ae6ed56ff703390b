"""Shard locks: one generator per shard of a run directory.

**Shard locks** (`ShardLock`, taken by `run.generate.generate` through `RunDirectory.lock`). While
a process generates shard I of N into a run directory it holds `<run_dir>/.shard-I-of-N.lock`, a
small JSON file naming it: host, pid, PID namespace, the process's start time, since when, and a
random token. A second generator of the same shard is refused with a one-line `LockHeld` naming
the holder's host, pid and start; different shards of one run directory (`--num-shards`, many
nodes) hold different files and run at once. Shard counts may change between runs, so a lock also
refuses to run beside a live lock of an *overlapping* shard of another count (I of N and J of M
share conversations iff I = J mod gcd(N, M)): the new lock is created first, then the others are
listed, so of two overlapping generators starting together at least one is refused (possibly
both; run one again), never neither. The lock is released on every way out that Python sees
(exit, error, Ctrl-C, SIGTERM); a SIGKILL, OOM kill or crash leaves it behind:

- held by a process of *this* host (same hostname and PID namespace) that is gone -- no such pid,
  a zombie, or a pid reused by a process that started at another time (`/proc/PID/stat`) -- the
  lock is stale and the next generator takes it over: under a guard file `<lock>.takeover`,
  created the same exclusive way, it reads the lock again and removes it only if it still holds
  the dead holder's token, then creates its own. Of several processes that found the same dead
  lock, exactly one takes it; the others are refused naming the winner.
- held on *another* host, or in another PID namespace (another container), the holder cannot be
  checked from here: it is taken over only once its lease has expired (`lease.py`: the holder
  renews its lock every minute; ten minutes without a renewal and it is gone, e.g. a lost node
  whose Slurm task was requeued elsewhere). Until then the error names the file to remove once you
  have checked that the process is gone.

Assembly takes no lock: `build` without a model lists the live locks (`RunDirectory.generators`) and
refuses a run still being generated, or with `--partial` builds from what is journaled so far (the
journal is append-only, so that is a consistent earlier state) and says so (builders/folder_build.py).

What "exclusive" means on each store is in `lock_stores.py`: exclusive on local disks (and NFS)
and on S3/GCS through s3fs/gcsfs >= 2024.12; best effort on other fsspec stores.
"""

from __future__ import annotations

import json
import logging
import math
import os
import posixpath
import re
import secrets
import socket
import time
from dataclasses import asdict, dataclass

from eagle3_synth.errors import ConfigError
from eagle3_synth.run.kill_points import kill_point
from eagle3_synth.run.lease import LEASE_SECONDS, Heartbeat, expired
from eagle3_synth.run.lock_stores import FsspecStore, LocalStore
from eagle3_synth.run.shards import Shard
from eagle3_synth.timestamps import utc_timestamp

log = logging.getLogger(__name__)

_SHARD_LOCK = re.compile(r"\.shard-(\d+)-of-(\d+)\.lock")
GUARD_SUFFIX = ".takeover"
ALIVE, DEAD, UNKNOWN = "alive", "dead", "unknown"
TAKEOVER_PATIENCE = 30.0  # seconds to wait for another process taking the same dead lock over


class LockHeld(ConfigError):
    """Another process holds the lock (or may: one this host cannot check); the message names it."""


def shard_lock_name(shard: Shard) -> str:
    return f".shard-{shard.index}-of-{shard.count}.lock"


# -- who holds a lock ---------------------------------------------------------------------------
def _pid_namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, start time in clock ticks since boot) of a process, from /proc (Linux); None elsewhere.
    Fields after the `(comm)`, which may hold spaces: state is field 3, starttime field 22 (proc(5))."""
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
    lease: float = LEASE_SECONDS  # seconds without a renewal after which the lock is expired (`lease.py`)

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


Store = LocalStore | FsspecStore


def lock_state(store: Store, path: str, holder: Holder) -> str:
    """`holder_state`, with a holder this host cannot check DEAD once its lease has expired."""
    state = holder_state(holder)
    if state == UNKNOWN and expired(store.age(path), holder.lease):
        return DEAD
    return state


def _overlap(a: Shard, b: Shard) -> bool:
    """Whether two shards of any counts own a common conversation id (CRT: I = J mod gcd(N, M))."""
    return a.index % math.gcd(a.count, b.count) == b.index % math.gcd(a.count, b.count)


# -- the shard lock -----------------------------------------------------------------------------
class ShardLock:
    """The lock of one shard of a run directory: `with run.lock(shard): ...` (module docstring)."""

    def __init__(self, store: Store, root: str, url: str, shard: Shard, lease: float = LEASE_SECONDS):
        self.store, self.root, self.url, self.shard = store, root, url, shard
        self.path = posixpath.join(root, shard_lock_name(shard))
        self.holder = Holder.me(lease)
        self.held = False
        self._heartbeat: Heartbeat | None = None

    def _shown(self, path: str) -> str:
        return posixpath.join(self.url, posixpath.basename(path))

    def _read(self, path: str) -> Holder | None:
        return Holder.from_bytes(self.store.read(path))

    def _create(self, path: str) -> bool:
        """Create `path` naming this process; True only if it then reads back as ours."""
        if not self.store.create(path, self.holder.to_bytes()):
            return False
        found = self._read(path)
        return found is not None and found.token == self.holder.token

    def _refusal(self, holder: Holder, path: str, shard: Shard) -> LockHeld:
        where = f"run directory {self.url} ({shard})"
        lock = f"(lock {self._shown(path)}{', which overlaps ' + str(self.shard) if shard != self.shard else ''})"
        if holder_state(holder) == UNKNOWN:
            lease = f"; it is taken over once {holder.lease:g} s pass without the holder renewing it"
            return LockHeld(f"{where} is locked by {holder}, which this host cannot check {lock}{lease}; if that "
                            f"process is gone (check on host {holder.host}), remove {self._shown(path)} and run again")
        return LockHeld(f"{where} is being generated by {holder} {lock}; wait for it to finish, or stop it")

    def acquire(self) -> None:
        deadline, busy = time.monotonic() + TAKEOVER_PATIENCE, None
        while True:
            if self._create(self.path):
                break
            current = self._read(self.path)
            if current is None and self.store.read(self.path):  # there, but not a lock this package wrote whole
                raise LockHeld(f"run directory {self.url} ({self.shard}): the lock {self._shown(self.path)} cannot "
                               "be read; if no process is generating this shard, remove it and run again")
            if current is not None and lock_state(self.store, self.path, current) != DEAD:
                raise self._refusal(current, self.path, self.shard)
            if current is not None:
                kill_point("lock.stale")
                taken, busy = self._take_over(self.path, current)
                if taken:
                    log.warning("%s: took over the lock of %s, which is gone (its process ended, or its lease "
                                "expired)", self.shard, current)
                    break
            # The lock vanished between our create and our read, or another process is taking the same
            # dead lock over (a guard held for a read, a remove and a create): look again shortly.
            if time.monotonic() > deadline:
                guard = self._shown(self.path + GUARD_SUFFIX)
                raise LockHeld(f"run directory {self.url} ({self.shard}): the lock {self._shown(self.path)} kept "
                               "changing while this process tried to take it" +
                               (f" ({busy} holds {guard}; if that process is gone, remove {guard})" if busy else "") +
                               "; run again")
            time.sleep(0.02)
        self.held = True
        self._check_overlapping()
        self._heartbeat = Heartbeat(self.renew, self.holder.lease).start()

    def renew(self) -> None:
        """Stamp the lock now if it still names this process (the heartbeat's beat, `lease.py`)."""
        if self.held and (current := self._read(self.path)) is not None and current.token == self.holder.token:
            self.store.touch(self.path)

    def _take_over(self, path: str, stale: Holder) -> tuple[bool, Holder | None]:
        """Replace the dead `stale` holder's lock at `path` with ours (none for another shard's path),
        under its guard: (True, None) when done; (False, the guard's holder or None) to look again.
        Raises LockHeld when another process holds `path` now."""
        guard = path + GUARD_SUFFIX
        if not self._create(guard):
            other = self._read(guard)
            if other is not None and lock_state(self.store, guard, other) == DEAD:
                raise LockHeld(f"run directory {self.url} ({self.shard}): {other} died while taking over the stale "
                               f"lock {self._shown(path)}; remove {self._shown(guard)} and run again")
            return False, other
        try:
            current = self._read(path)
            if current is not None and current.token != stale.token:
                raise self._refusal(current, path, self.shard)
            if current is not None:
                self.store.remove(path)
            if path == self.path and not self._create(path):  # a plain create slipped in after the removal
                current = self._read(path)
                if current is None:
                    return False, None
                raise self._refusal(current, path, self.shard)
            return True, None
        finally:
            self._remove_if_ours(guard)

    def _check_overlapping(self) -> None:
        """Refuse beside a live lock of an overlapping shard of another count; clear dead ones."""
        for name in sorted(self.store.names(self.root)):
            match = _SHARD_LOCK.fullmatch(name)
            if match is None:
                continue
            index, count = (int(group) for group in match.groups())
            other = Shard(index, count) if 0 <= index < count else None
            if other is None or other == self.shard or not _overlap(other, self.shard):
                continue
            path = posixpath.join(self.root, name)
            holder = self._read(path)
            if holder is not None and lock_state(self.store, path, holder) == DEAD:
                try:
                    self._take_over(path, holder)  # clears a dead layout's lock
                except LockHeld:
                    pass  # someone else got there first: read again what it holds now
                holder = self._read(path)
            if holder is None or lock_state(self.store, path, holder) == DEAD:
                continue
            self.release()
            raise self._refusal(holder, path, other)

    def _remove_if_ours(self, path: str) -> bool:
        current = self._read(path)
        if current is not None and current.token == self.holder.token:
            self.store.remove(path)
            return True
        return False

    def release(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.stop()
            self._heartbeat = None
        if not self.held:
            return
        self.held = False
        if not self._remove_if_ours(self.path):
            log.warning("%s: the lock %s no longer names this process (removed or replaced by hand?); left as is",
                        self.shard, self._shown(self.path))
        if isinstance(self.store, LocalStore):
            self.store.remove_created()

    def __enter__(self) -> "ShardLock":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def shard_locks(store: Store, root: str) -> list[tuple[Shard, Holder, str]]:
    """Every shard lock in a run directory whose holder is not known to be dead: (shard, holder, state)."""
    found = []
    for name in sorted(store.names(root)):
        match = _SHARD_LOCK.fullmatch(name)
        path = posixpath.join(root, name)
        holder = Holder.from_bytes(store.read(path)) if match else None
        if match is None or holder is None:
            continue
        state = lock_state(store, path, holder)
        index, count = (int(group) for group in match.groups())
        if state != DEAD and 0 <= index < count:
            found.append((Shard(index, count), holder, state))
    return found
