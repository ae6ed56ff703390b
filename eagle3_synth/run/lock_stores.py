"""Where shard locks live: create-if-absent, read, remove and list, on a local disk or an fsspec store.

What "exclusive" rests on, per store (every create is also read back and its token compared):

- local disk (a path or `file://`; NFS too): the lock is written to a unique temporary file and
  hard-linked to its name (`os.link`: atomic, fails if the name exists, and reliable on NFS where
  O_EXCL historically was not), so it appears whole or not at all. Exclusive. A filesystem without
  hard links falls back to O_CREAT|O_EXCL, equally exclusive.
- fsspec stores: `fs.open(path, "xb")`, create-if-absent. s3fs >= 2024.12 sends `If-None-Match: *`
  (s3fs/core.py `S3File.commit`), which AWS S3 honours since August 2024, and turns the 412 into
  FileExistsError (s3fs/errors.py `translate_boto_error`); gcsfs >= 2024.12 sends
  `ifGenerationMatch=0` (gcsfs/core.py, marked experimental there). On those: exclusive. fsspec
  itself calls "x" implementation-dependent (fsspec/spec.py `AbstractFileSystem.open`) and its
  `AbstractBufferedFile` accepts "xb" without checking anything (fsspec/spec.py, the mode check in
  `__init__`); a backend that refuses "xb" gets check-then-write. There the lock is best effort:
  two processes that check at the same moment may both write; reading the token back catches the
  one whose write was overwritten, not one that read back before the other wrote. S3-compatible
  stores that ignore If-None-Match are in this class. A duplicate generator costs work, never
  data: a sample journaled twice is kept once (`directory.py`).

`memory://` (the tests) checks "xb" up front (fsspec/implementations/memory.py `_open`).
"""

from __future__ import annotations

import os
import posixpath
import secrets
from typing import Any

from eagle3_synth.files import temporary_name


class LocalStore:
    """A local directory (or NFS): exclusive creates by hard link."""

    def __init__(self) -> None:
        self.created: list[str] = []  # the folders a create made, deepest first (`remove_created`)

    def create(self, path: str, data: bytes) -> bool:
        for _attempt in range(3):
            try:
                return self._create(path, data)
            except FileNotFoundError:  # its folder was removed meanwhile (`remove_created` of a failed run)
                continue
        return self._create(path, data)

    def _create(self, path: str, data: bytes) -> bool:
        folder = os.path.dirname(path)
        missing = []
        while folder and not os.path.isdir(folder):
            missing.append(folder)
            folder = os.path.dirname(folder)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self.created.extend(missing)
        tmp = temporary_name(path)
        with open(tmp, "xb") as handle:
            handle.write(data)
        try:
            os.link(tmp, path)
            return True
        except FileExistsError:
            return False
        except OSError:  # no hard links here (some FUSE and SMB mounts): an exclusive create instead
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            return True
        finally:
            os.unlink(tmp)

    def read(self, path: str) -> bytes | None:
        try:
            with open(path, "rb") as handle:
                return handle.read()
        except FileNotFoundError:
            return None

    def remove(self, path: str) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass

    def names(self, directory: str) -> list[str]:
        try:
            return os.listdir(directory)
        except FileNotFoundError:
            return []

    def touch(self, path: str) -> None:
        """Stamp `path` now: `utime(path, None)`, the store's clock (on NFS the server's)."""
        os.utime(path)

    def age(self, path: str) -> float | None:
        """Seconds since `path` was last stamped, on the store's clock (`lease.py`); None if absent."""
        try:
            then = os.stat(path).st_mtime
        except FileNotFoundError:
            return None
        probe = f"{path}.{secrets.token_hex(4)}.clock"
        with open(probe, "xb"):
            pass
        try:
            return os.stat(probe).st_mtime - then
        finally:
            os.unlink(probe)

    def remove_created(self) -> None:
        """Remove the folders `create` made if they are empty again: a command refused or failed
        before writing anything leaves no empty run directory behind."""
        for folder in self.created:
            try:
                os.rmdir(folder)
            except OSError:
                break  # not empty: someone else's files, or our own results
        self.created = []


class FsspecStore:
    """Any fsspec filesystem: create-if-absent with mode "xb" where the backend has it (module docstring)."""

    def __init__(self, fs: Any):
        self.fs = fs

    def create(self, path: str, data: bytes) -> bool:
        try:
            with self.fs.open(path, "xb") as handle:
                handle.write(data)
        except FileExistsError:
            return False
        except (ValueError, NotImplementedError):  # a backend that refuses mode "xb": check, then write
            if self.fs.exists(path):
                return False
            with self.fs.open(path, "wb") as handle:
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
        """Stamp `path` now by writing its bytes again (object stores have no utime)."""
        data = self.read(path)
        if data is not None:
            self.fs.pipe_file(path, data)

    def age(self, path: str) -> float | None:
        """Seconds since `path` was last written, on the store's clock (`lease.py`); None if absent
        or if the backend keeps no modification time."""
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
