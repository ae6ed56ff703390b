"""`--split validation` on the commands that read a dataset: the held-out rows, from a built folder
or its run directory; a dataset built without `--validation` says it has no such split."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from eagle3_synth.cli import main
from eagle3_synth.dataset.stores import open_source
from eagle3_synth.errors import ConfigError

from ..conftest import KIMI_TOKENIZER, TINY_MODEL
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


def test_every_reading_command_takes_the_validation_split(held_out, tmp_path, capsys):
    """validate, stats, inspect and vocab read the held-out rows (6 of 24), not train's."""
    assert main(["validate", str(held_out), "--split", "validation"]) == 0
    assert f"{KIMI_CONFIG}: 6 rows" in capsys.readouterr().out
    assert main(["stats", str(held_out), "--split", "validation", "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert [s["count"] for s in stats] == [6]
    assert main(["inspect", str(held_out), KIMI_CONFIG, "--split", "validation", "--first", "10"]) == 0
    shown = capsys.readouterr().out
    assert "6 rows" in shown and all(f"sample {i}" in shown for i in parquet_ids(held_out, "validation"))
    counts = {}
    for split in ("train", "validation"):
        out = tmp_path / split
        assert main(["vocab", str(held_out), KIMI_CONFIG, "--split", split, "--draft-vocab-size", "8", "--target-vocab-size", "200000", "--json",
                     str(out / "vocab.json"), "--out", str(out)]) == 0
        counts[split] = json.loads((out / "vocab.json").read_text())
    assert counts["train"] != counts["validation"]


@pytest.mark.parametrize("validation, message", [
    ("0.0001", "--validation 0.0001: the draw holds out none of the run's 24 conversations; give a larger fraction"),
    ("24", "--validation 24: the run keeps 24 conversations, so no conversation would be left for train"),
])
def test_a_split_that_would_be_empty_is_refused_before_the_run_starts(tmp_path, kimi_tokenizer, capsys,
                                                                      validation, message):
    """Asked for a split and given none (or train given none) is refused once the prompts are
    prepared, before the run is claimed or anything generated; a dry run says the same."""
    write_prompts(tmp_path / "prompts.jsonl", 24)
    out = tmp_path / "ds"
    build(out, KIMI_CONFIG, KIMI_TOKENIZER, kimi_outputs(kimi_tokenizer, 24), tmp_path / "prompts.jsonl",
          extra=["--validation", validation], status=2)
    assert message in capsys.readouterr().err
    assert not (out / ".runs" / KIMI_CONFIG / "run.json").exists() and not (out / KIMI_CONFIG).exists()
    assert main(["build", KIMI_CONFIG, "--model", str(TINY_MODEL), "--prompts", str(tmp_path / "prompts.jsonl"),
                 "--validation", validation, "--dry-run", "--out", str(out)]) == 2
    assert message in capsys.readouterr().err


def test_a_validation_split_whose_conversations_all_failed_is_left_out_and_said(held_out, tmp_path, kimi_tokenizer,
                                                                              capsys):
    """Every held-out conversation failed: an empty split in the card would break every
    load_dataset of the config (datasets refuses a split with no data), so it is left out, the
    build says so and exits 1 naming the failures; train loads."""
    from datasets import load_dataset

    held = set(parquet_ids(held_out, "validation"))
    write_prompts(tmp_path / "prompts.jsonl", 24)
    outputs = [r for r in kimi_outputs(kimi_tokenizer, 24) if r["sample_id"] not in held]
    build(tmp_path / "ds", KIMI_CONFIG, KIMI_TOKENIZER, outputs, tmp_path / "prompts.jsonl",
          status=1, extra=["--validation", "6"])
    out = capsys.readouterr().out
    assert "6 failed" in out and f"{KIMI_CONFIG}: no validation row yet" in out
    assert not list((tmp_path / "ds" / KIMI_CONFIG).glob("validation-*"))
    assert load_dataset(str(tmp_path / "ds"), KIMI_CONFIG, split="train").num_rows == 18
    assert main(["stats", str(tmp_path / "ds"), "--split", "validation"]) == 2
    assert (f"config {KIMI_CONFIG} has no validation split (built with --validation 6, but no held-out "
            "conversation has a row yet)") in capsys.readouterr().err
