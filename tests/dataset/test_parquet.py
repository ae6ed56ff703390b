"""The one Parquet writer: contract schema, shard names, viewer-sized shards, installing.

`build` (through the datasets builder) and `publish` (rewriting shards for the viewer) both name,
install and type their Parquet files here; the schema is read from the contract, never listed, so
a column added to `contract.row` reaches both.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datasets import Value

from eagle3_synth.cli import main
from eagle3_synth.contract.row import COLUMNS, FEATURES
from eagle3_synth.dataset.folder import config_files, shard_fingerprint
from eagle3_synth.dataset.parquet import (
    SHARD_NAME,
    ShardLimits,
    build_fingerprint,
    features_with,
    install_shards,
    parquet_bytes,
    parquet_rows,
    shard_name,
    write_shards,
)
from eagle3_synth.errors import ConfigError
from eagle3_synth.publish import features_with_previews, write_config_shards

from ..conftest import KIMI_TOKENIZER
from ..support.cli_runs import write_replay


def rows(count: int, start: int = 0) -> pa.Table:
    """`count` contract rows (values only need the right types here)."""
    data = {name: [] for name in COLUMNS}
    for i in range(start, start + count):
        for name, feature in FEATURES.items():
            if isinstance(feature, Value):
                data[name].append(i if feature.dtype.startswith("int") else f"text {i}")
            elif name == "tool_calls":
                data[name].append([{"start": i, "end": i + 1}])
            else:
                data[name].append(list(range(i % 50 + 1)))
    return pa.Table.from_pydict(data, schema=FEATURES.arrow_schema)


def test_shard_names_with_and_without_a_fingerprint():
    assert shard_name(0, 1) == "train-00000-of-00001.parquet"
    assert shard_name(2, 12, "1a2b3c4d") == "train-1a2b3c4d-00002-of-00012.parquet"
    assert SHARD_NAME.fullmatch(shard_name(3, 4)).group(1) is None
    assert SHARD_NAME.fullmatch(shard_name(3, 4, "0123abcd")).group(1) == "0123abcd"


def test_the_schema_is_the_contract_s_plus_what_a_caller_adds():
    assert features_with() is FEATURES and list(features_with()) == list(COLUMNS)
    previews = features_with_previews(40)
    at = COLUMNS.index("output_ids") + 1  # the viewer shows columns in schema order: text beside the ids
    assert list(previews) == [*COLUMNS[:at], "prompt_preview", "output_preview", *COLUMNS[at:]]
    assert all(previews[name] == FEATURES[name] for name in COLUMNS)
    assert features_with_previews(None) is FEATURES
    assert list(features_with({"extra": Value("string")})) == [*COLUMNS, "extra"]
    with pytest.raises(ValueError, match=r"extra columns \['sample_id'\] are contract columns already"):
        features_with({"sample_id": Value("string")})
    with pytest.raises(ValueError, match="'nope' is not a contract column"):
        features_with({"extra": Value("string")}, after="nope")


def test_split_sizes_are_the_row_groups_uncompressed_bytes_and_the_files_bytes(tmp_path):
    table = rows(300)
    shards = write_shards(table.to_batches(max_chunksize=64), tmp_path / "out", table.schema,
                          ShardLimits(row_group_bytes=20_000, shard_bytes=1))
    sizes = parquet_bytes(shards)
    assert sizes.files == sum(len(path.read_bytes()) for path in shards)
    groups = [pq.ParquetFile(p).metadata.row_group(i) for p in shards for i in range(pq.ParquetFile(p).num_row_groups)]
    assert len(groups) > 1 and sizes.num_bytes == sum(group.total_byte_size for group in groups)


def test_shards_keep_row_groups_under_the_limit_and_split_files(tmp_path):
    table = rows(300)
    limits = ShardLimits(row_group_bytes=20_000, shard_bytes=1)  # every row group its own shard
    shards = write_shards(table.to_batches(max_chunksize=64), tmp_path / "out", table.schema, limits)
    assert len(shards) > 1
    assert [p.name for p in shards] == [shard_name(i, len(shards)) for i in range(len(shards))]
    assert parquet_rows(shards) == 300
    back = pa.concat_tables(pq.read_table(p) for p in shards)
    assert back.equals(table)
    for path in shards:
        meta = pq.ParquetFile(path).metadata
        assert all(meta.row_group(i).total_byte_size <= limits.row_group_bytes for i in range(meta.num_row_groups))
        assert pq.ParquetFile(path).schema_arrow.equals(FEATURES.arrow_schema)
    with pytest.raises(ConfigError, match="limits must be positive"):
        ShardLimits(row_group_bytes=0)


def test_installed_shards_are_named_by_the_fingerprint_of_their_bytes(tmp_path):
    folder = tmp_path / "ds"
    folder.mkdir()
    for attempt, count in ((0, 10), (1, 7)):
        written = write_shards(rows(count, start=attempt).to_batches(max_chunksize=4), tmp_path / f"w{attempt}",
                               FEATURES.arrow_schema, ShardLimits(row_group_bytes=2_000, shard_bytes=2_000))
        fingerprint = build_fingerprint(written)
        installed = install_shards(written, folder, "B1_glaive")
        assert [p.name for p in installed] == [shard_name(i, len(written), fingerprint) for i in range(len(written))]
        assert config_files(folder, "B1_glaive") == installed  # the old build is gone, entirely
        assert shard_fingerprint(folder, "B1_glaive") == fingerprint
        assert parquet_rows(installed) == count
    assert sorted(p.name for p in folder.iterdir()) == ["B1_glaive"]  # no staging folder left behind


def test_build_and_publish_write_the_contract_s_columns(tmp_path, kimi_tokenizer):
    write_replay(tmp_path / "replay.jsonl", kimi_tokenizer, 6)
    out = tmp_path / "ds"
    assert main(["build", "B1_glaive", "--model", str(KIMI_TOKENIZER), "--engine", "replay",
                 "--replay", str(tmp_path / "replay.jsonl"), "--out", str(out)]) == 0
    [built] = config_files(out, "B1_glaive")
    assert pq.read_schema(built).names == list(COLUMNS)
    assert pq.read_schema(built).remove_metadata().equals(FEATURES.arrow_schema.remove_metadata())
    [published] = write_config_shards([built], tmp_path / "tree" / "B1_glaive", FEATURES, ShardLimits())
    assert pq.read_schema(published).equals(FEATURES.arrow_schema)
    assert pq.read_table(published).equals(pq.read_table(built).cast(FEATURES.arrow_schema))
