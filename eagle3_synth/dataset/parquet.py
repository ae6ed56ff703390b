"""The one Parquet writer of the package: the schema, the shard names, writing and installing shards.

Every Parquet file eagle3-synth puts in a dataset folder or a release goes through this module:

- the schema is the contract's (`contract.row.FEATURES`), plus any extra columns a caller names,
  where it puts them (`features_with`): no column is listed here, so a column added to the contract
  reaches both;
- shards are named `train-XXXXX-of-YYYYY.parquet`, or `train-<fp8>-XXXXX-of-YYYYY.parquet` with
  the fingerprint of a build's bytes (`shard_name`, `SHARD_NAME`, `build_fingerprint`); a config
  built with `--validation` also has `validation-<fp8>-...` shards, the same fingerprint (of both
  splits' bytes) in both names;
- `ShardWriter` writes Arrow batches into shards of bounded row groups and file sizes (the release
  tree: zstd, a page index, row groups under the viewer's limit);
- `install_shards` moves freshly written shards into `<folder>/<config>/` under their final names,
  swapping the whole config at once.

`build` does not write rows here: its Parquet comes from the datasets builder
(`download_and_prepare(file_format="parquet")`, the one entry point for generation and assembly,
whose writer -- snappy, content-defined chunking, a page index, 1,000-row groups -- is the same one
its `as_dataset` users get), and `install_shards` names
and installs those files. `publish` rewrites a built config with `write_shards`. Bypassing datasets'
writer in `build` would take overriding the builder's private `_prepare_split_single`, and its
files would no longer be the ones `download_and_prepare` writes for the same settings.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from eagle3_synth.errors import ConfigError


# `train-00000-of-00002.parquet`, or with a build fingerprint `train-1a2b3c4d-00000-of-00002.parquet`
# (`validation-...` likewise); group 1 is the fingerprint.
SHARD_NAME = re.compile(r"(?:train|validation)-(?:([0-9a-f]{8})-)?\d{5}-of-\d{5}\.parquet")


def shard_name(index: int, total: int, fingerprint: str | None = None, split: str = "train") -> str:
    """The file name of shard `index` of `total` (0-based) of `split`, with the build's fingerprint if given."""
    return f"{split}-{fingerprint + '-' if fingerprint else ''}{index:05d}-of-{total:05d}.parquet"


def build_fingerprint(files: Sequence[str | Path]) -> str:
    """8 hex digits of the SHA-256 of the files' bytes, in order: the same rows give the same name."""
    digest = hashlib.sha256()
    for path in files:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:8]


def parquet_rows(files: Iterable[str | Path]) -> int:
    """Rows in Parquet files, from their footers only."""
    return sum(pq.ParquetFile(f).metadata.num_rows for f in files)


@dataclass(frozen=True)
class SplitBytes:
    """A split's sizes as the Hub's dataset viewer counts them (dataset-viewer's
    services/worker/src/worker/job_runners/config/parquet_and_info.py, `fill_builder_info` and
    `retry_get_num_examples_size_and_num_bytes`): `num_bytes` is the uncompressed data, the sum of
    the row groups' `total_byte_size`; `files` is the Parquet files' size on disk (what a download
    fetches)."""

    num_bytes: int = 0
    files: int = 0

    def __add__(self, other: SplitBytes) -> SplitBytes:
        return SplitBytes(self.num_bytes + other.num_bytes, self.files + other.files)


def parquet_bytes(files: Iterable[str | Path]) -> SplitBytes:
    """The sizes of Parquet files (`SplitBytes`), from their footers and the file system."""
    total = SplitBytes()
    for path in files:
        metadata = pq.ParquetFile(path).metadata
        data = sum(metadata.row_group(i).total_byte_size for i in range(metadata.num_row_groups))
        total += SplitBytes(data, Path(path).stat().st_size)
    return total


def features_with(extra: Mapping[str, Any] | None = None, after: str | None = None) -> Any:
    """The contract's features (`datasets.Features`) with the `extra` columns (name -> feature) right
    after the contract column `after`, or last without it."""
    from datasets import Features

    from eagle3_synth.contract.row import FEATURES

    if not extra:
        return FEATURES
    clash = sorted(set(extra) & set(FEATURES))
    if clash:
        raise ValueError(f"extra columns {clash} are contract columns already")
    if after is None:
        return Features({**FEATURES, **extra})
    if after not in FEATURES:
        raise ValueError(f"{after!r} is not a contract column")
    names = list(FEATURES)
    cut = names.index(after) + 1
    return Features({**{n: FEATURES[n] for n in names[:cut]}, **extra, **{n: FEATURES[n] for n in names[cut:]}})


@dataclass(frozen=True)
class ShardLimits:
    """Size limits of written Parquet shards."""

    # Hard limit on a row group's uncompressed size. The Hub's viewer copies a repo's Parquet as it is
    # and reads its first rows from it, refusing (`TooBigRows`) a read that would fetch more than
    # 300 MB of a file at once (dataset-viewer f62009e: libs/libviewer/src/parquet.rs
    # `LimitedAsyncReader::get_byte_ranges`, given `RowsIndexConfig.max_arrow_data_in_memory` of
    # libs/libcommon/src/libcommon/config.py by `RowsIndex.query_libviewer_index`). The page index
    # lets it read part of a group; a group well under the limit keeps the first rows readable
    # whatever the pages, with room for Arrow/Parquet size drift.
    row_group_bytes: int = 64 * 2**20
    # Target file size: a new shard starts once a shard holds this many bytes, so a shard ends at
    # most one (compressed) row group plus its footer past it. 500 MB is what `push_to_hub` uses:
    # few files, each small enough to stream and to retry.
    shard_bytes: int = 500 * 10**6

    def __post_init__(self) -> None:
        if self.row_group_bytes < 1 or self.shard_bytes < 1:
            raise ConfigError("row group and shard size limits must be positive")


class ShardWriter:
    """Writes row groups of at most `row_group_bytes`, starting a new file past `shard_bytes`.

    Files are written as `part-<split>-N` and renamed by `close` to `shard_name(i, N, split=split)`
    once their count is known. zstd and a page index (random access for the viewer); the schema is
    `schema` as given.
    """

    def __init__(self, target: Path, schema: pa.Schema, limits: ShardLimits = ShardLimits(), split: str = "train"):
        self.target, self.schema, self.limits, self.split = Path(target), schema, limits, split
        self.parts: list[Path] = []
        self._writer: pq.ParquetWriter | None = None
        self._sink: Any = None
        self._pending: list[pa.RecordBatch] = []
        self._pending_bytes = 0

    def add(self, batch: pa.RecordBatch) -> None:
        # Arrow's in-memory size is at least Parquet's uncompressed size for these columns, so a
        # group flushed before it passes the limit in Arrow bytes is under it in Parquet bytes.
        if batch.nbytes > self.limits.row_group_bytes and batch.num_rows > 1:
            for row in range(batch.num_rows):
                self.add(batch.slice(row, 1))
            return
        if self._pending and self._pending_bytes + batch.nbytes > self.limits.row_group_bytes:
            self._flush_group()
        self._pending.append(batch)
        self._pending_bytes += batch.nbytes

    def _flush_group(self) -> None:
        table = pa.Table.from_batches(self._pending, schema=self.schema)  # chunks: no copy, still one group
        self._pending, self._pending_bytes = [], 0
        if self._writer is None:
            path = self.target / f"part-{self.split}-{len(self.parts)}.parquet"
            self.parts.append(path)
            self._sink = pa.OSFile(str(path), "wb")
            self._writer = pq.ParquetWriter(self._sink, self.schema, compression="zstd", write_page_index=True)
        self._writer.write_table(table, row_group_size=table.num_rows)
        if self._sink.tell() >= self.limits.shard_bytes:
            self._close_file()

    def _close_file(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._sink.close()
            self._writer = self._sink = None

    def close(self) -> list[Path]:
        """Finish the last file and give every shard its final name; the shards, in order."""
        if self._pending:
            self._flush_group()
        self._close_file()
        final = []
        for i, part in enumerate(self.parts):
            name = self.target / shard_name(i, len(self.parts), split=self.split)
            part.rename(name)
            final.append(name)
        return final


def write_shards(batches: Iterable[pa.RecordBatch], target: Path, schema: pa.Schema,
                 limits: ShardLimits = ShardLimits(), split: str = "train") -> list[Path]:
    """Write `batches` (in order, of `schema`) as `split`'s shards under `target`; the shards, in order."""
    target.mkdir(parents=True, exist_ok=True)
    writer = ShardWriter(target, schema, limits, split)
    for batch in batches:
        writer.add(batch)
    return writer.close()


def install_shards(sources: Sequence[str | Path], folder: Path, config: str,
                   validation: Sequence[str | Path] = (), texts: Mapping[str, str] | None = None) -> list[Path]:
    """Move freshly written Parquet shards into `<folder>/<config>/` as `shard_name(i, N, fp)`, `fp`
    the `build_fingerprint` of their bytes (in name order; the `validation` split's after the
    train's, named `validation-<fp>-...`); the installed paths. Without `validation` the names are
    those of a train-only build. `texts` (file name -> text) are written beside them (the
    config's provenance), so they are swapped in with the shards.

    The new files are staged beside the old ones and swapped in with renames, so an interrupted
    build never leaves a config half old, half new.
    """
    folder = Path(folder)
    target = folder / config
    staging = Path(tempfile.mkdtemp(prefix=f".{config}-", dir=folder))
    staging.chmod(0o755)  # mkdtemp makes it private; the published folder should not be
    splits = {"train": sorted(str(s) for s in sources), "validation": sorted(str(s) for s in validation)}
    fingerprint = build_fingerprint(splits["train"] + splits["validation"])
    installed = []
    for split, files in splits.items():
        for i, source in enumerate(files):
            dest = staging / shard_name(i, len(files), fingerprint, split)
            shutil.move(source, dest)
            installed.append(target / dest.name)
    for name, text in (texts or {}).items():
        (staging / name).write_text(text, encoding="utf-8")
    old = None
    if target.exists():
        old = folder / f".{config}-old"
        if old.exists():
            shutil.rmtree(old)
        target.rename(old)
    staging.rename(target)
    if old is not None:
        shutil.rmtree(old)
    return installed

