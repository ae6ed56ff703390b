"""Readers of whole sources: local files in a source's own schema, or the dataset via `datasets`.

Both yield `SourceRecord`s in a fixed order -- files in the order given, each top to bottom; a
dataset's configs in registry order, each in its stored order -- because the seeded selection in
`eagle3_synth.prompts.prepare` keys records by their position in that order. Memory stays flat in the
size of the source: JSON Lines and Parquet are read incrementally, and a JSON array (Glaive's and
ShareGPT's files are single arrays of 300-500 MB) is decoded one element at a time.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eagle3_synth.errors import ConfigError

log = logging.getLogger(__name__)

FILE_FORMATS = (".json", ".jsonl", ".ndjson", ".parquet")
_NUMBER_CHARS = frozenset("0123456789.eE+-")


@dataclass(frozen=True)
class SourceRecord:
    """One record as read; `error` says why it could not be decoded (then `record` is None)."""

    unit: str  # the file name, or `<config>/<split>` of a dataset
    row: int  # 0-based row within the unit (a JSON Lines file: its line index)
    record: Any
    error: str | None = None

    @property
    def locator(self) -> str:
        """Where the record is, for people: `file.jsonl:12` (1-based line) or `all/train#5`."""
        return f"{self.unit}:{self.row + 1}" if self.unit.endswith((".jsonl", ".ndjson")) else f"{self.unit}#{self.row}"


# -- local files -----------------------------------------------------------------------------------

def file_format(path: str) -> str:
    """`jsonl`, `json-array` or `parquet`, from the extension (`.json` holding lines is `jsonl`)."""
    suffix = Path(path).suffix.lower()
    if suffix not in FILE_FORMATS:
        raise ConfigError(f"--source-file {path}: unknown format {suffix or '(no extension)'}; "
                          f"expected one of {', '.join(FILE_FORMATS)}")
    if suffix == ".parquet":
        return "parquet"
    if suffix == ".json":
        with open(path, encoding="utf-8") as handle:
            while True:
                char = handle.read(1)
                if not char or not char.isspace():
                    return "json-array" if char == "[" else "jsonl"
    return "jsonl"


def iter_jsonl(path: str) -> Iterator[SourceRecord]:
    unit = os.path.basename(path)
    with open(path, encoding="utf-8") as handle:
        for row, line in enumerate(handle):
            if not line.strip():
                continue
            try:
                yield SourceRecord(unit, row, json.loads(line))
            except json.JSONDecodeError as exc:
                yield SourceRecord(unit, row, None, f"not valid JSON ({exc.msg} at column {exc.colno})")


def iter_json_array(path: str, chunk_chars: int = 1 << 20) -> Iterator[SourceRecord]:
    """Elements of a top-level JSON array, decoded one at a time from a sliding buffer.

    A syntax error inside an array leaves no way to find the next element, so it stops the read
    with a ConfigError naming the element and its character offset.
    """
    unit = os.path.basename(path)
    decoder = json.JSONDecoder()
    with open(path, encoding="utf-8") as handle:
        buffer, position, consumed, eof = "", 0, 0, False

        def fill() -> bool:
            nonlocal buffer, position, consumed, eof
            if eof:
                return False
            chunk = handle.read(max(chunk_chars, len(buffer) - position))
            eof = not chunk
            consumed += position
            buffer, position = buffer[position:] + chunk, 0
            return bool(chunk)

        def skip_space() -> str:
            nonlocal position
            while True:
                while position < len(buffer) and buffer[position].isspace():
                    position += 1
                if position < len(buffer) or not fill():
                    return buffer[position] if position < len(buffer) else ""

        def fail(row: int, what: str) -> ConfigError:
            return ConfigError(f"--source-file {path}: element {row} (character {consumed + position}): {what}; "
                               "a JSON array cannot be read past a syntax error")

        if skip_space() != "[":
            raise fail(0, "not a JSON array")
        position += 1
        row = 0
        while True:
            char = skip_space()
            if char == "]":
                return
            if not char:
                raise fail(row, "file ends inside the array")
            if row:
                if char != ",":
                    raise fail(row, f"expected ',' or ']', found {char!r}")
                position += 1
                skip_space()
            while True:
                try:
                    element, end = decoder.raw_decode(buffer, position)
                except json.JSONDecodeError as exc:
                    if fill():
                        continue
                    raise fail(row, exc.msg) from None
                number = isinstance(element, (int, float)) and not isinstance(element, bool)
                if number and (end == len(buffer) or buffer[end] in _NUMBER_CHARS) and fill():
                    continue  # a number cut by the buffer's edge ("-2." of "-2.5e3") goes on
                break
            yield SourceRecord(unit, row, element)
            position = end
            row += 1


def iter_parquet(path: str, batch_rows: int = 1024) -> Iterator[SourceRecord]:
    import pyarrow.parquet as pq

    unit = os.path.basename(path)
    row = 0
    for batch in pq.ParquetFile(path).iter_batches(batch_size=batch_rows):
        for record in batch.to_pylist():
            yield SourceRecord(unit, row, record)
            row += 1


READERS = {"jsonl": iter_jsonl, "json-array": iter_json_array, "parquet": iter_parquet}


def iter_source_files(paths: Iterable[str]) -> Iterator[SourceRecord]:
    """Records of local files in the source's own schema, file after file."""
    for path in paths:
        if not Path(path).is_file():
            raise ConfigError(f"--source-file {path}: no such file")
        yield from READERS[file_format(path)](path)


# -- datasets (the Hub, or a local dataset folder) ----------------------------------------------------

def resolve_revision(source: str, revision: str | None) -> str | None:
    """The commit a Hub revision points at, so a log says exactly what was read (None offline)."""
    if Path(source).exists():
        return revision
    try:
        from huggingface_hub import HfApi

        return HfApi().dataset_info(source, revision=revision).sha or revision
    except Exception as exc:  # offline, private, rate-limited: reading may still work from a cache
        log.warning("could not resolve revision %s of %s: %s", revision or "main", source, exc)
        return revision


def iter_dataset(
    source: str,
    *,
    split: str,
    configs: tuple[str, ...] = (),
    data_files: tuple[str, ...] = (),
    columns: tuple[str, ...] = (),
    revision: str | None = None,
) -> Iterator[SourceRecord]:
    """Records of a dataset read with `datasets.load_dataset(..., streaming=True)`, config after config.

    `source` is a Hub id or a local dataset folder. `columns` (Parquet sources only) skips the
    columns an adapter never reads -- e.g. OpenCodeReasoning's multi-GB `output` -- and is dropped
    with a warning if the source turns out not to be Parquet.
    """
    from datasets import load_dataset

    pinned = resolve_revision(source, revision)
    if pinned and pinned != revision:
        log.info("reading %s at revision %s (%s); pass --source-revision %s to pin it", source, pinned,
                 revision or "main", pinned)
    for config in configs or (None,):
        kwargs: dict[str, Any] = {"path": source, "name": config, "split": split, "streaming": True, "revision": pinned}
        if data_files:
            kwargs["data_files"] = list(data_files)
        unit = f"{config}/{split}" if config else split
        try:
            if columns:
                try:
                    stream = load_dataset(**kwargs, columns=list(columns))
                except ValueError as exc:
                    if "columns" not in str(exc):
                        raise
                    log.warning("%s (%s): not Parquet, reading all columns", source, unit)
                    stream = load_dataset(**kwargs)
            else:
                stream = load_dataset(**kwargs)
            for row, record in enumerate(stream):
                yield SourceRecord(unit, row, record)
        except ConfigError:
            raise
        except Exception as exc:  # not found, offline, bad split: say which source and how to work around it
            raise ConfigError(f"cannot read {source} ({unit}) with datasets: {type(exc).__name__}: {exc}. "
                              "Download it and pass --source-file, or check the config's source/split") from exc
