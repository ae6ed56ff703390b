"""The run directory: what was generated so far, append-only, keyed by a fingerprint.

Layout of a run directory:
  run.json        the fingerprint and the fields it was computed from (to say what differs)
  prompts.jsonl   prepared prompts, one per line: sample_id, source_id, prompt_ids, messages, tools
  rejects.jsonl   prompts that could not be prepared, with the reason
  journal.jsonl   engine results in completion order, one JSON object per line

A crash can only tear the journal's last line (appends are line-sized writes followed by flush);
opening the journal for append cuts such a line off, so that sample is simply generated again.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .engines.base import GenerationResult
from .errors import ConfigError
from .profiles import MarkerIds
from .records import PreparedPrompt

RUN_FILE = "run.json"
PROMPTS_FILE = "prompts.jsonl"
REJECTS_FILE = "rejects.jsonl"
JOURNAL_FILE = "journal.jsonl"


def fingerprint(fields: dict[str, Any]) -> str:
    canonical = json.dumps(fields, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def _differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    keys = sorted(set(old) | set(new))
    return [f"{k}: run has {old.get(k)!r}, this command has {new.get(k)!r}" for k in keys if old.get(k) != new.get(k)]


def _cut_torn_tail(path: Path) -> int:
    """Truncate a last line that lacks its newline (a write torn by a crash); return bytes cut."""
    if not path.exists() or path.stat().st_size == 0:
        return 0
    with open(path, "rb+") as handle:
        size = handle.seek(0, os.SEEK_END)
        handle.seek(size - 1)
        if handle.read(1) == b"\n":
            return 0
        # Walk back to the previous newline.
        position = size - 1
        chunk = 1 << 16
        while position > 0:
            start = max(0, position - chunk)
            handle.seek(start)
            data = handle.read(position - start)
            cut = data.rfind(b"\n")
            if cut >= 0:
                keep = start + cut + 1
                handle.truncate(keep)
                return size - keep
            position = start
        handle.truncate(0)
        return size


class RunDirectory:
    def __init__(self, path: str | Path):
        self.path = Path(path)

    # -- fingerprint ---------------------------------------------------------------------------
    def claim(self, fields: dict[str, Any], meta: dict[str, Any] | None = None) -> str:
        """Create the run or check that it was made by the same settings; refuse any difference.

        `fields` are fingerprinted; `meta` (resolved marker ids, engine, versions) is recorded
        for assembly and the dataset card but does not decide whether results may be mixed.
        """
        self.path.mkdir(parents=True, exist_ok=True)
        run_file = self.path / RUN_FILE
        new = {"fingerprint": fingerprint(fields), "fields": fields, "meta": meta or {}}
        if run_file.exists():
            old = json.loads(run_file.read_text(encoding="utf-8"))
            if old["fingerprint"] != new["fingerprint"]:
                diffs = "\n  ".join(_differences(old["fields"], fields))
                raise ConfigError(
                    f"run directory {self.path} was started with different settings; refusing to mix "
                    f"results. Use another --run-dir, or the original settings. Differences:\n  {diffs}"
                )
            return old["fingerprint"]
        tmp = run_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(new, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        tmp.replace(run_file)
        return new["fingerprint"]

    def read_run_file(self) -> dict[str, Any]:
        run_file = self.path / RUN_FILE
        if not run_file.exists():
            raise ConfigError(f"{self.path} is not a run directory (no {RUN_FILE}); run generate or build first")
        return json.loads(run_file.read_text(encoding="utf-8"))

    def markers(self) -> MarkerIds:
        """The marker ids the run was generated with, so assembly needs no tokenizer."""
        return MarkerIds(**{k: tuple(v) if k == "stop_ids" else v for k, v in self.read_run_file()["meta"]["markers"].items()})

    # -- prompts -------------------------------------------------------------------------------
    @property
    def prompts_ready(self) -> bool:
        return (self.path / PROMPTS_FILE).exists()

    def write_prompts(self, prompts: Iterable[PreparedPrompt], rejects: Iterable[dict[str, Any]]) -> None:
        """Write all prepared prompts at once; the rename makes a half-written file impossible."""
        tmp = self.path / (PROMPTS_FILE + ".tmp")
        with open(tmp, "w", encoding="utf-8") as handle:
            for prompt in prompts:
                handle.write(json.dumps(asdict(prompt), ensure_ascii=False) + "\n")
        with open(self.path / REJECTS_FILE, "w", encoding="utf-8") as handle:
            for reject in rejects:
                handle.write(json.dumps(reject, ensure_ascii=False) + "\n")
        tmp.replace(self.path / PROMPTS_FILE)

    def iter_prompts(self) -> Iterator[PreparedPrompt]:
        with open(self.path / PROMPTS_FILE, encoding="utf-8") as handle:
            for line in handle:
                yield PreparedPrompt(**json.loads(line))

    def iter_rejects(self) -> Iterator[dict[str, Any]]:
        path = self.path / REJECTS_FILE
        if path.exists():
            with open(path, encoding="utf-8") as handle:
                for line in handle:
                    yield json.loads(line)

    # -- journal -------------------------------------------------------------------------------
    def open_journal(self) -> "JournalWriter":
        return JournalWriter(self.path / JOURNAL_FILE)

    def index_results(self) -> dict[int, tuple[int, bool]]:
        """sample_id -> (byte offset, is_error) of its latest result; a success is never replaced."""
        index: dict[int, tuple[int, bool]] = {}
        path = self.path / JOURNAL_FILE
        if not path.exists():
            return index
        with open(path, "rb") as handle:
            offset = 0
            for line in handle:
                if line.endswith(b"\n"):  # a torn last line is not a result
                    record = json.loads(line)
                    sample_id = record["sample_id"]
                    is_error = record.get("finish_reason") == "abort"
                    previous = index.get(sample_id)
                    if previous is None or previous[1]:
                        index[sample_id] = (offset, is_error)
                offset += len(line)
        return index

    def read_result(self, handle: Any, offset: int) -> dict[str, Any]:
        handle.seek(offset)
        return json.loads(handle.readline())


class JournalWriter:
    """Appends results, one line each, flushed per line so a crash loses at most the last one."""

    def __init__(self, path: Path):
        _cut_torn_tail(path)
        self._handle = open(path, "ab")

    def append(self, result: GenerationResult) -> None:
        line = json.dumps(asdict(result), separators=(",", ":")).encode("utf-8") + b"\n"
        self._handle.write(line)
        self._handle.flush()

    def close(self) -> None:
        self._handle.flush()
        os.fsync(self._handle.fileno())
        self._handle.close()

    def __enter__(self) -> "JournalWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
