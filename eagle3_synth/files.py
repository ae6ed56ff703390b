"""Output files written whole or not at all, by any number of processes at once."""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def unique_temporary(path: Path) -> Path:
    """A hidden temporary name beside `path`, unique to this process and call.

    Written there and renamed over `path` (`os.replace`, atomic on one filesystem), a file is never
    seen half-written; unique, two exports to one path cannot truncate each other's temporary file,
    and a user's own `path.tmp` is never touched."""
    return path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
