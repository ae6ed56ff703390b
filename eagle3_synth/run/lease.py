"""The lease of a shard lock: how a lock left by a lost node stops blocking its shard.

A lock's holder on another host (a Slurm task requeued onto another node after its first node
died) cannot be checked from here: no pid to signal, no /proc to read. So a holder renews its lock
every `lease / 10` seconds by touching it (`Heartbeat`: a daemon thread, stopped on release), and
records the lease in the lock (`Holder.lease`). A lock whose last renewal is older than its lease
is expired: its holder has not run for that long (gone, or frozen), and the next generator takes
it over as it takes over a dead process's lock on its own host.

The age of a lock is measured on the store's own clock, never this host's: the store stamps a
probe file written now, and the age is that stamp minus the lock's (`age`), so clocks that differ
between nodes do not matter. On NFS both stamps are the server's (a `utime(path, None)` and a
create are set to the server's time); on object stores the backend's `modified`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

# A holder that has not renewed its lock for this long is taken to be gone. Ten renewals fit in it,
# so a busy or briefly stalled store (an NFS hiccup, a slow object store) does not expire a live lock.
LEASE_SECONDS = 600.0
RENEWALS_PER_LEASE = 10


def expired(age: float | None, lease: float) -> bool:
    """Whether a lock last renewed `age` seconds ago (store clock; None: unknown) has outlived `lease`."""
    return age is not None and age > lease


class Heartbeat:
    """Calls `renew` every `lease / RENEWALS_PER_LEASE` seconds in a daemon thread until `stop`."""

    def __init__(self, renew: Callable[[], None], lease: float):
        self.renew, self.period = renew, lease / RENEWALS_PER_LEASE
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="shard-lock-lease", daemon=True)

    def start(self) -> "Heartbeat":
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stopped.wait(self.period):
            try:
                self.renew()
            except Exception as exc:  # noqa: BLE001 - a store hiccup: the next beat tries again
                log.warning("could not renew the shard lock's lease: %s", exc)

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()
