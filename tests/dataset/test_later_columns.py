"""A folder built before a column existed (no `sampling`) still reads, counts, validates and exports."""

from __future__ import annotations

import json

import pyarrow.parquet as pq

from eagle3_synth.cli import main
from eagle3_synth.dataset.stats import config_stats
from eagle3_synth.dataset.stores import open_source

from ..support.built_datasets import KIMI_CONFIG, checks_dataset, copy_dataset


def test_a_folder_without_the_sampling_column_still_works(tmp_path_factory, tmp_path, kimi_tokenizer, qwen_tokenizer,
                                                           capsys):
    folder = copy_dataset(checks_dataset(tmp_path_factory, kimi_tokenizer, qwen_tokenizer), tmp_path / "old")
    for path in sorted((folder / KIMI_CONFIG).glob("train-*.parquet")):
        table = pq.read_table(path)
        assert json.loads(table.column("sampling")[0].as_py())["max_new_tokens"] > 0  # built now: recorded
        pq.write_table(table.drop_columns(["sampling"]), path)
    source = open_source(str(folder))
    table = source.table(KIMI_CONFIG)
    assert table.column("sampling").to_pylist() == [""] * table.num_rows
    assert all(row["sampling"] == "" for batch in source.iter_batches(KIMI_CONFIG) for row in batch)
    assert config_stats(source.table(KIMI_CONFIG)).share_lowered == 0.0
    assert main(["stats", str(folder)]) == 0
    assert main(["validate", str(folder), KIMI_CONFIG]) == 0
    out = tmp_path / "ids.jsonl"
    assert main(["export", str(folder), KIMI_CONFIG, "--format", "ids", "--out", str(out)]) == 0
    assert len(out.read_text(encoding="utf-8").splitlines()) == table.num_rows
