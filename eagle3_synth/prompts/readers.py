"""Readers of whole sources: local files in a source's own schema, or the dataset via `datasets`.

Both yield `SourceRecord`s in a fixed order -- files in the order given, each top to bottom; a
dataset's configs in registry order, each in its stored order -- because the seeded selection in
`eagle3_synth.prompts.prepare` keys records by their position in that order. Memory stays flat in the
size of the source: JSON Lines and Parquet are read incrementally, and a JSON array (Glaive's and
ShareGPT's files are single arrays of 300-500 MB) is decoded one element at a time.

A record that cannot be read is yielded with its `error` (it becomes an `unparseable` reject naming
`file:line` or `file#row`), never raised: a line that is not UTF-8, a binary file (one record at its
first line: nothing in it can be read), a JSON array cut or broken mid-way (its elements before the
cut are kept), a Parquet file that breaks mid-way (its rows before are kept). Only a file that
cannot be opened at all is a ConfigError (`readable_file`), raised before anything is generated.
"""

from __future__ import annotations

import codecs
import json
import logging
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eagle3_synth.errors import ConfigError

log = logging.getLogger(__name__)

FILE_FORMATS = (".json", ".jsonl", ".ndjson", ".parquet")
_NUMBER_CHARS = frozenset("0123456789.eE+-")
# Bytes looked at for a NUL, the sign of a binary (or UTF-16) file, as git and grep decide it.
_SNIFF_BYTES = 8192
# A JSON array is decoded with errors=_ESCAPE: an undecodable byte becomes one of these surrogates
# (as with "surrogateescape"), and is counted, so that elements are searched for them only in a
# file that had one (the search would double the time of reading a large array).
_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")
_ESCAPE = "eagle3_synth.readers.escape"
_escaped_bytes = [0]


def _escape(exc: UnicodeError) -> tuple[str, int]:
    _escaped_bytes[0] += 1
    return codecs.lookup_error("surrogateescape")(exc)


codecs.register_error(_ESCAPE, _escape)


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

def readable_file(path: str, option: str) -> None:
    """A one-line ConfigError naming `option` and `path` unless `path` is a file this process can read
    (missing, a directory, no permission): checked before anything is generated."""
    where = Path(path)
    if where.is_dir():
        raise ConfigError(f"{option} {path}: is a directory, not a file")
    if not where.exists():
        raise ConfigError(f"{option} {path}: no such file")
    if not where.is_file():
        raise ConfigError(f"{option} {path}: not a regular file")
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise ConfigError(f"{option} {path}: cannot be read ({exc.strerror or exc})") from None


def file_format(path: str) -> str:
    """`jsonl`, `json-array` or `parquet`, from the extension (`.json` holding lines is `jsonl`)."""
    suffix = Path(path).suffix.lower()
    if suffix not in FILE_FORMATS:
        raise ConfigError(f"--source-file {path}: unknown format {suffix or '(no extension)'}; "
                          f"expected one of {', '.join(FILE_FORMATS)}")
    if suffix == ".parquet":
        return "parquet"
    if suffix == ".json":
        with open(path, "rb") as handle:  # bytes: a binary file must reach its reader, which rejects it
            while True:
                byte = handle.read(1)
                if not byte or not byte.isspace():
                    return "json-array" if byte == b"[" else "jsonl"
    return "jsonl"


def _file_problem(path: str, what: str, where: str = "", option: str = "--source-file") -> str:
    """A problem that ends the reading of a file (`where` in it), logged as well: its reject alone
    would be seen only if the record were selected."""
    log.warning("%s %s%s: %s", option, path, f" {where}" if where else "", what)
    return what


def iter_text_lines(path: str, option: str = "--source-file") -> Iterator[tuple[int, str | None, str | None]]:
    """`(line index, text, None)` per line of a UTF-8 file, or `(line index, None, why)` for a line
    that is not UTF-8. A binary file (a NUL byte in its first 8 KiB) is one `(0, None, why)`."""
    with open(path, "rb") as handle:
        nul = handle.read(_SNIFF_BYTES).find(b"\0")
        if nul >= 0:
            yield 0, None, _file_problem(path, f"not text: a NUL byte at offset {nul} (a binary or UTF-16 file); "
                                               "nothing in it can be read", option=option)
            return
        handle.seek(0)
        for row, raw in enumerate(handle):
            try:
                yield row, raw.decode("utf-8"), None
            except UnicodeDecodeError as exc:
                yield row, None, (f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at byte {exc.start + 1} of the line: "
                                  f"{exc.reason})")


def iter_jsonl(path: str) -> Iterator[SourceRecord]:
    unit = os.path.basename(path)
    for row, line, error in iter_text_lines(path):
        if error is not None:
            yield SourceRecord(unit, row, None, error)
        elif line.strip():
            try:
                yield SourceRecord(unit, row, json.loads(line))
            except json.JSONDecodeError as exc:
                yield SourceRecord(unit, row, None, f"not valid JSON ({exc.msg} at column {exc.colno})")


def iter_json_array(path: str, chunk_chars: int = 1 << 20) -> Iterator[SourceRecord]:
    """Elements of a top-level JSON array, decoded one at a time from a sliding buffer.

    A syntax error inside an array (a file cut mid-way, most often) leaves no way to find the next
    element: the elements before it are yielded, then one error record naming the element, its
    line and character, and the reading of this file stops. An element holding bytes that are not
    UTF-8 is an error record of its own, and the reading goes on after it.
    """
    unit = os.path.basename(path)
    decoder = json.JSONDecoder()
    escaped_before = _escaped_bytes[0]
    with open(path, encoding="utf-8", errors=_ESCAPE) as handle:
        # The buffer holds the file from character `consumed`, on line `lines + 1`, which starts at `line_start`.
        buffer, position, consumed, lines, line_start, eof = "", 0, 0, 0, 0, False

        def fill() -> bool:
            nonlocal buffer, position, consumed, lines, line_start, eof
            if eof:
                return False
            chunk = handle.read(max(chunk_chars, len(buffer) - position))
            if not chunk:  # the buffer stays as it is, so positions in it stay valid
                eof = True
                return False
            newline = buffer.rfind("\n", 0, position)
            if newline >= 0:
                lines += buffer.count("\n", 0, position)
                line_start = consumed + newline + 1
            consumed += position
            buffer, position = buffer[position:] + chunk, 0
            return True

        def skip_space() -> str:
            nonlocal position
            while True:
                while position < len(buffer) and buffer[position].isspace():
                    position += 1
                if position < len(buffer) or not fill():
                    return buffer[position] if position < len(buffer) else ""

        def at(index: int) -> str:
            """Where `buffer[index]` is in the file, as json.JSONDecodeError says it (column 1-based)."""
            newline = buffer.rfind("\n", 0, index)
            start = consumed + newline + 1 if newline >= 0 else line_start
            line = lines + buffer.count("\n", 0, index) + 1
            return f"line {line} column {consumed + index - start + 1} (char {consumed + index})"

        def cut(row: int, what: str) -> SourceRecord:
            return SourceRecord(unit, row, None, _file_problem(
                path, f"{what}; the elements after it cannot be read (a JSON array cannot be read past a "
                      "syntax error: is the file cut?)", f"element {row}"))

        if skip_space() != "[":
            yield cut(0, f"not a JSON array (no '[' at {at(position)})")
            return
        position += 1
        row = 0
        while True:
            char = skip_space()
            if char == "]":
                return
            if not char:
                yield cut(row, f"the file ends inside the array at {at(position)}")
                return
            if row:
                if char != ",":
                    yield cut(row, f"expected ',' or ']' at {at(position)}, found {char!r}")
                    return
                position += 1
                if not skip_space():
                    yield cut(row, f"the file ends inside the array at {at(position)}")
                    return
            while True:
                try:
                    element, end = decoder.raw_decode(buffer, position)
                except json.JSONDecodeError as exc:
                    if fill():
                        continue
                    yield cut(row, f"not valid JSON ({exc.msg}: {at(exc.pos)})")
                    return
                number = isinstance(element, (int, float)) and not isinstance(element, bool)
                if number and (end == len(buffer) or buffer[end] in _NUMBER_CHARS) and fill():
                    continue  # a number cut by the buffer's edge ("-2." of "-2.5e3") goes on
                break
            escaped = _escaped_bytes[0] != escaped_before and _ESCAPED_BYTE.search(buffer, position, end)
            if escaped:
                byte = ord(escaped.group()) - 0xDC00
                yield SourceRecord(unit, row, None, f"not UTF-8 text (byte 0x{byte:02x} at {at(escaped.start())})")
            else:
                yield SourceRecord(unit, row, element)
            position = end
            row += 1


def iter_parquet(path: str, batch_rows: int = 1024) -> Iterator[SourceRecord]:
    """Rows of a Parquet file; a file that is not Parquet, or breaks mid-way, ends in one error
    record at the row it reached (the rows before are kept)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    unit = os.path.basename(path)
    row = 0
    try:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=batch_rows):
            for record in batch.to_pylist():
                yield SourceRecord(unit, row, record)
                row += 1
    except (pa.ArrowException, OSError) as exc:
        yield SourceRecord(unit, row, None, _file_problem(
            path, f"not readable as Parquet ({type(exc).__name__}: {exc}); the rows after it cannot be read",
            f"row {row}"))


READERS = {"jsonl": iter_jsonl, "json-array": iter_json_array, "parquet": iter_parquet}


def iter_source_files(paths: Iterable[str]) -> Iterator[SourceRecord]:
    """Records of local files in the source's own schema, file after file."""
    for path in paths:
        readable_file(path, "--source-file")
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
