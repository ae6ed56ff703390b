"""`--validation`: whole conversations in a `validation` split beside `train`, loadable by name,
the same after a killed and resumed run; a build without it writes the train split alone."""

from __future__ import annotations

import datasets
import pyarrow.parquet as pq
import pytest

from eagle3_synth.cli import main
from eagle3_synth.prompts.held_out import validation_conversations
from eagle3_synth.run.directory import RunDirectory

from ..conftest import TINY_MODEL
from ..support.cli_processes import KILLED, run_cli_process

CONFIG = "B2_hermes_fc"  # multi-turn (turns: all); its 3 bundled conversations
ARGV = ["build", CONFIG, "--model", str(TINY_MODEL), "--samples-per-prompt", "2", "--max-new-tokens", "48",
        "--temperature", "1.0", "--seed", "5"]


def split_rows(out, split: str) -> list[dict]:
    files = sorted((out / CONFIG).glob(f"{split}-*.parquet"))
    return [row for f in files for row in pq.read_table(f).to_pylist()]


def by_conversation(rows: list[dict]) -> dict[int, list[dict]]:
    grouped: dict[int, list[dict]] = {}
    for row in rows:
        grouped.setdefault(row["conversation_id"], []).append(row)
    return grouped


@pytest.mark.slow  # two multi-turn builds on the tiny model
def test_whole_conversations_go_to_validation_and_load_by_split_name(tmp_path):
    plain = tmp_path / "plain"  # no --validation: train alone
    assert main([*ARGV, "--out", str(plain)]) == 0
    assert "validation" not in RunDirectory(plain / ".runs" / CONFIG).read_run_file()["fields"]
    assert not list((plain / CONFIG).glob("validation-*"))
    assert "validation" not in (plain / "README.md").read_text(encoding="utf-8")
    every = by_conversation(split_rows(plain, "train"))
    assert max(row["turn"] for rows in every.values() for row in rows) >= 1, "later turns were generated"

    out = tmp_path / "ds"
    assert main([*ARGV, "--validation", "2", "--out", str(out)]) == 0
    train = datasets.load_dataset(str(out), CONFIG, split="train").to_list()
    validation = datasets.load_dataset(str(out), CONFIG, split="validation").to_list()
    slots = RunDirectory(out / ".runs" / CONFIG).prompt_slots()
    held = validation_conversations(slots.conversation, 2, seed=0).tolist()
    assert len(held) == 2 and sorted(by_conversation(validation)) == held
    # Every rollout and every turn of a conversation is on its side, exactly the rows a build without
    # --validation writes for it (the option changes no generated id).
    for side in (train, validation):
        for conversation, rows in by_conversation(side).items():
            assert sorted(r["sample_id"] for r in rows) == sorted(r["sample_id"] for r in every[conversation])
    assert sorted(by_conversation(train)) == sorted(set(every) - set(held))
    readme = (out / "README.md").read_text(encoding="utf-8")
    assert f"path: {CONFIG}/validation-" in readme and "name: validation" in readme
    names = sorted(p.name for p in (out / CONFIG).glob("*.parquet"))  # one build fingerprint in both names
    assert [n.split("-")[0] for n in names] == ["train", "validation"] and len({n.split("-")[1] for n in names}) == 1

    # Killed after two results, then resumed: the same rows on the same sides.
    crashed = tmp_path / "crashed"
    argv = [*ARGV, "--validation", "2", "--out", str(crashed)]
    assert run_cli_process(argv, "journal.after_write:2") == KILLED
    assert run_cli_process(argv) == 0
    for split in ("train", "validation"):
        assert split_rows(crashed, split) == split_rows(out, split)


def test_a_fraction_is_recorded_in_the_run_and_another_value_is_refused(tmp_path, capsys):
    out = tmp_path / "ds"
    assert main([*ARGV, "--validation", "0.5", "--out", str(out)]) == 0
    assert RunDirectory(out / ".runs" / CONFIG).read_run_file()["fields"]["validation"] == 0.5
    train, validation = split_rows(out, "train"), split_rows(out, "validation")
    assert f"wrote {len(train) + len(validation)} rows to " in capsys.readouterr().out  # both splits counted
    assert sorted(by_conversation(validation)) == [1]  # the one conversation drawn below 0.5 with seed 0
    assert 1 not in by_conversation(train) and train
    capsys.readouterr()
    assert main([*ARGV, "--validation", "0.3", "--out", str(out)]) == 2
    assert "validation: run has 0.5, this command has 0.3" in capsys.readouterr().err
    assert main(["build", CONFIG, "--run-dir", str(out / ".runs" / CONFIG), "--validation", "2",
                 "--out", str(tmp_path / "again")]) == 2
    assert "--validation 2: the run directory" in capsys.readouterr().err
