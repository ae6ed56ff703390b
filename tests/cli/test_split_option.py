"""`--split validation` on the commands that read a dataset: the held-out rows, from a built folder
or its run directory; a dataset built without `--validation` says it has no such split."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from eagle3_synth.cli import main
from eagle3_synth.dataset.stores import open_source
from eagle3_synth.errors import ConfigError

from ..conftest import KIMI_TOKENIZER
from ..support.built_datasets import KIMI_CONFIG, build, checks_dataset, kimi_outputs, write_prompts


@pytest.fixture(scope="module")
def held_out(tmp_path_factory, kimi_tokenizer):
    root = tmp_path_factory.mktemp("held_out")
    write_prompts(root / "prompts.jsonl", 24)
    build(root / "ds", KIMI_CONFIG, KIMI_TOKENIZER, kimi_outputs(kimi_tokenizer, 24), root / "prompts.jsonl",
          extra=["--validation", "6"])
    return root / "ds"


def parquet_ids(folder, split: str) -> list[int]:
    return sorted(i for f in (folder / KIMI_CONFIG).glob(f"{split}-*.parquet")
                  for i in pq.read_table(f, columns=["sample_id"]).column("sample_id").to_pylist())


def test_export_writes_the_split_asked_for(held_out, tmp_path, capsys):
    exported = {}
    for split in ("train", "validation"):
        out = tmp_path / f"{split}.jsonl"
        assert main(["export", str(held_out), KIMI_CONFIG, "--format", "ids", "--no-text", "--split", split,
                     "--out", str(out)]) == 0
        exported[split] = sorted(json.loads(line)["metadata"]["sample_id"] for line in out.read_text().splitlines())
        assert exported[split] == parquet_ids(held_out, split)
    assert len(exported["validation"]) == 6 and len(exported["train"]) == 18


def test_a_run_directory_gives_the_same_split_as_the_folder(held_out):
    for split in ("train", "validation"):
        run = open_source(str(held_out / ".runs"), split=split)
        assert sorted(run.table(KIMI_CONFIG, ["sample_id"]).column("sample_id").to_pylist()) == parquet_ids(held_out, split)


def test_a_dataset_built_without_validation_has_no_validation_split(tmp_path_factory, kimi_tokenizer, qwen_tokenizer,
                                                                    capsys):
    folder = checks_dataset(tmp_path_factory, kimi_tokenizer, qwen_tokenizer)
    assert main(["stats", str(folder), "--split", "validation"]) == 2
    assert f"config {KIMI_CONFIG} has no validation split (built without --validation)" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="the run has no validation split \\(generated without --validation\\)"):
        open_source(str(folder / ".runs"), split="validation").table(KIMI_CONFIG, ["sample_id"])
