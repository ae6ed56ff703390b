"""Files written whole or not at all: a temporary file beside the target, then a rename.

The one helper for every "temporary file, then rename" of the package: the JSONL exports and the
draft vocabulary, the trainers' hidden-state files and their manifest, the dataset folder's
run_info.json and README.md, the run directory's prompt files (on any fsspec filesystem: it takes
the name only) and the local lock store (which links the temporary file rather than renaming it).
Renamed over the target (`os.replace`, atomic on one filesystem), a file is never seen
half-written. None of these callers syncs to disk (only the journal does, `run/journal.py`): the
rename orders the file's whole content before its name, and a crash loses at most the newest file.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

# Content digests of files, for fingerprints and identities: a changed file changes the run.


def file_digest(path: Path) -> str:
    """The first 16 hex digits of the file's SHA-256, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


# The one timestamp format of run files, run info and journal session names: UTC, ISO 8601.


def utc_timestamp(*, compact: bool = False) -> str:
    """Now in UTC: `2026-12-01T08:38:04Z`, or `20261201T083804Z` for file names."""
    return time.strftime("%Y%m%dT%H%M%SZ" if compact else "%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def temporary_name(name: str, *, unique: bool = True, suffix: str = ".tmp") -> str:
    """A hidden name beside the file `name` (a bare file name, or a path string).

    `unique` (the default): unique to this process and call, so two writers of one path cannot
    truncate each other's temporary file, and a user's own `name.tmp` is never touched. Not unique:
    a fixed name, for callers that hold a lock (a killed writer's file is overwritten, not left).
    `suffix` keeps the name out of a reader's pattern (hidden-state files: `.partial`)."""
    folder, _, base = name.rpartition("/")
    own = f".{os.getpid()}-{secrets.token_hex(4)}" if unique else ""
    return f"{folder}/" * bool(folder) + f".{base}{own}{suffix}"


def unique_temporary(path: Path) -> Path:
    """`temporary_name` beside `path`, unique to this process and call."""
    return path.with_name(temporary_name(path.name))


@contextmanager
def written_whole(path: Path, *, temporary: Path | None = None,
                  before_rename: Callable[[], object] | None = None) -> Iterator[Path]:
    """Yield a temporary path beside `path` (`unique_temporary`, or `temporary`) to write; once the
    block ends without an error, `before_rename()` (a crash-test hook) and the rename over `path`.
    The temporary file is removed if the block fails; a killed process may leave it."""
    tmp = temporary or unique_temporary(path)
    try:
        yield tmp
        if before_rename is not None:
            before_rename()
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text_whole(path: Path, text: str, *, unique: bool = True) -> None:
    """`path` holds `text`, written whole or not at all (`unique=False`: callers holding a lock)."""
    with written_whole(path, temporary=path.with_name(temporary_name(path.name, unique=unique))) as tmp:
        tmp.write_text(text, encoding="utf-8")
