"""Assembly's rows by sample-id range and as Arrow tables: what the builder writes and `num_proc` splits."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from eagle3_synth.cli import main
from eagle3_synth.contract.row import FEATURES
from eagle3_synth.run.assemble import iter_row_tables, iter_rows, sample_id_ranges

from ..support.built_datasets import KIMI_CONFIG
from ..support.cli_processes import SAMPLES, replay_inputs


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, kimi_tokenizer):
    root = tmp_path_factory.mktemp("assemble")
    generation = replay_inputs(root / "inputs", kimi_tokenizer)
    assert main(["generate", KIMI_CONFIG, *generation, "--run-dir", str(root / "run")]) == 0
    return str(root / "run")


def test_ranges_split_the_ids_evenly_and_cover_them():
    ids = np.array([0, 1, 2, 4, 5, 9, 10, 11, 12, 20], dtype=np.int64)  # gaps: rejected prompts
    ranges = sample_id_ranges(ids, 3)
    assert ranges == [(0, 5), (5, 11), (11, 21)]
    assert [int(((ids >= a) & (ids < b)).sum()) for a, b in ranges] == [4, 3, 3]
    assert sample_id_ranges(ids[:2], 64) == [(0, 1), (1, 2)]  # never more ranges than ids
    assert sample_id_ranges(np.zeros(0, np.int64)) == []


def test_rows_of_some_ranges_only(run_dir):
    assert [r["sample_id"] for r in iter_rows(run_dir, ranges=[(20, 22), (5, 9)])] == [5, 6, 7, 8, 20, 21]
    assert list(iter_rows(run_dir, ranges=[])) == []


def test_tables_hold_the_rows_in_order_per_range_in_the_contracts_schema(run_dir):
    ranges = sample_id_ranges(np.arange(SAMPLES), 4)  # 8, 8, 7, 7 ids
    tables = list(iter_row_tables(run_dir, ranges, rows_per_table=3))
    assert [(shard, batch, t.num_rows) for shard, batch, t in tables] == [
        (0, 0, 3), (0, 1, 3), (0, 2, 2), (1, 0, 3), (1, 1, 3), (1, 2, 2),
        (2, 0, 3), (2, 1, 3), (2, 2, 1), (3, 0, 3), (3, 1, 3), (3, 2, 1)]
    assert all(t.schema.equals(FEATURES.arrow_schema) for _, _, t in tables)
    assert pa.concat_tables([t for _, _, t in tables]).to_pylist() == list(iter_rows(run_dir))
