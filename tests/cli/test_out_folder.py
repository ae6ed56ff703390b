"""`--out` is ours or empty: a folder holding what eagle3-synth did not write is refused before
anything loads, and a config built there from another run directory is replaced only with
--overwrite. Nothing of the user's is modified, nothing is left behind by a refusal."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datasets import load_dataset

from eagle3_synth.cli import main

from ..conftest import KIMI_TOKENIZER, TINY_MODEL
from ..support.cli_runs import run_cli, write_replay

PROJECT_README = "# my project\n\n" + "".join(f"Line {i} of a README someone wrote.\n" for i in range(110))
CSV_CARD = """---
configs:
- config_name: mine
  data_files:
  - split: train
    path: train.csv
---

# My dataset
"""
HUB_CARD = """---
configs:
- config_name: default
  data_files:
  - split: train
    path: data/train-*
---

# Someone's text dataset
"""


def snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every path under `folder` with its bytes (None: a folder)."""
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None for p in folder.rglob("*")}


@pytest.fixture
def nothing_loads(monkeypatch):
    """A build that gets as far as loading a tokenizer or a model fails the test: refusals come
    before (transformers' own loaders, looked up on their classes at every call)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.tokenization_utils_tokenizers import TokenizersBackend

    def refuse(cls, path, *args, **kwargs):
        raise AssertionError(f"{cls.__name__} loaded {path} before --out was checked")

    for loader in (AutoModelForCausalLM, AutoTokenizer, TokenizersBackend):
        monkeypatch.setattr(loader, "from_pretrained", classmethod(refuse))


def replay_build(tmp_path: Path, kimi_tokenizer, out: Path, *extra: str) -> list[str]:
    write_replay(tmp_path / "replay.jsonl", kimi_tokenizer, 6)
    return ["build", "B1_glaive", "--model", str(KIMI_TOKENIZER), "--engine", "replay",
            "--replay", str(tmp_path / "replay.jsonl"), "--out", str(out), *extra]


def refusal(out: Path, listed: str) -> str:
    return (f"eagle3-synth build: error: --out {out} holds what eagle3-synth did not write: {listed}; nothing was "
            "written: choose another folder (a new or empty one, or one eagle3-synth built)")


def test_a_folder_with_someone_elses_readme_is_refused_and_the_readme_kept(tmp_path, kimi_tokenizer, capsys,
                                                                          nothing_loads):
    out = tmp_path / "project"
    out.mkdir()
    (out / "README.md").write_text(PROJECT_README, encoding="utf-8")
    before = snapshot(out)
    code, printed = run_cli(replay_build(tmp_path, kimi_tokenizer, out), capsys)
    assert code == 2
    assert printed.strip() == refusal(out, "README.md (not a card eagle3-synth wrote)")
    assert snapshot(out) == before  # byte for byte; no .runs/, no config folder, no lock file


def test_a_csv_dataset_with_its_card_is_refused_and_still_loads(tmp_path, kimi_tokenizer, capsys, nothing_loads):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "README.md").write_text(CSV_CARD, encoding="utf-8")
    (out / "train.csv").write_text("text\nhello\nworld\n", encoding="utf-8")
    before = snapshot(out)
    code, printed = run_cli(replay_build(tmp_path, kimi_tokenizer, out), capsys)
    assert code == 2
    assert printed.strip() == refusal(out, "README.md (not a card eagle3-synth wrote), train.csv")
    assert snapshot(out) == before
    assert load_dataset(str(out), "mine", split="train")["text"] == ["hello", "world"]


def hub_layout_dataset(folder: Path) -> None:
    (folder / "data").mkdir(parents=True)
    pq.write_table(pa.table({"text": ["one", "two"]}), folder / "data" / "train-00000-of-00001.parquet")
    (folder / "README.md").write_text(HUB_CARD, encoding="utf-8")


@pytest.mark.parametrize("dry_run", [False, True])
def test_a_hub_layout_dataset_is_refused_before_generation(tmp_path, capsys, nothing_loads, dry_run):
    """The bundled tiny model on the transformers engine: refused before it (or its tokenizer)
    loads and before any prompt is prepared, --dry-run too; the other dataset is untouched."""
    out = tmp_path / "other"
    hub_layout_dataset(out)
    before = snapshot(out)
    code, printed = run_cli(["build", "B1_glaive", "--model", str(TINY_MODEL), "--max-new-tokens", "8",
                             "--out", str(out), *["--dry-run"] * dry_run], capsys)
    assert code == 2
    assert printed.strip() == refusal(out, "README.md (not a card eagle3-synth wrote), data/")
    assert snapshot(out) == before
    assert load_dataset(str(out), split="train")["text"] == ["one", "two"]


def test_a_refusal_lists_a_few_names_then_how_many_more(tmp_path, kimi_tokenizer, capsys, nothing_loads):
    out = tmp_path / "busy"
    out.mkdir()
    for name in ("a.txt", "b.txt", "c.txt", "d.txt", "e.txt"):
        (out / name).write_text(name)
    (out / "notes").mkdir()
    code, printed = run_cli(replay_build(tmp_path, kimi_tokenizer, out), capsys)
    assert code == 2
    assert printed.strip() == refusal(out, "a.txt, b.txt, c.txt and 3 more")
    assert sorted(p.name for p in out.iterdir()) == ["a.txt", "b.txt", "c.txt", "d.txt", "e.txt", "notes"]


def test_a_new_or_empty_folder_and_our_own_are_accepted(tmp_path, kimi_tokenizer):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(replay_build(tmp_path, kimi_tokenizer, empty)) == 0
    assert main(replay_build(tmp_path, kimi_tokenizer, tmp_path / "new" / "ds")) == 0
    # Rebuilt from the same (default) run directory, our card and files in it: the normal resume.
    assert main(replay_build(tmp_path, kimi_tokenizer, empty)) == 0
    assert load_dataset(str(empty), "B1_glaive", split="train").num_rows == 6


def another_run_refusal(out: Path, old_run: Path, new_run: Path) -> str:
    return (f"eagle3-synth build: error: --out {out}: B1_glaive there holds rows from the run directory "
            f"{old_run}, not this build's {new_run}; --overwrite replaces them, or choose another --out")


def test_a_config_from_another_run_directory_needs_overwrite(tmp_path, kimi_tokenizer, capsys):
    out, run0, run1 = tmp_path / "ds", tmp_path / "run-0", tmp_path / "run-1"
    assert main(replay_build(tmp_path, kimi_tokenizer, out, "--run-dir", str(run0))) == 0
    assert main(replay_build(tmp_path, kimi_tokenizer, out, "--run-dir", str(run0))) == 0  # a rebuild: allowed
    capsys.readouterr()
    before = snapshot(out)

    code, printed = run_cli(replay_build(tmp_path, kimi_tokenizer, out, "--run-dir", str(run1)), capsys)
    assert code == 2
    assert printed.strip() == another_run_refusal(out, run0, run1)
    assert snapshot(out) == before and not run1.exists()

    # Assembling only (no --model) from another run is the same rule.
    assert main(replay_build(tmp_path, kimi_tokenizer, tmp_path / "elsewhere", "--run-dir", str(run1))) == 0
    capsys.readouterr()
    code, printed = run_cli(["build", "B1_glaive", "--run-dir", str(run1), "--out", str(out)], capsys)
    assert code == 2
    assert printed.strip() == another_run_refusal(out, run0, run1)
    assert snapshot(out) == before

    code, printed = run_cli(["build", "B1_glaive", "--run-dir", str(run1), "--out", str(out), "--overwrite"], capsys)
    assert code == 0, printed
    # Now the rows are run-1's: a build from run-0 is the one refused.
    code, printed = run_cli(replay_build(tmp_path, kimi_tokenizer, out, "--run-dir", str(run0)), capsys)
    assert code == 2
    assert printed.strip() == another_run_refusal(out, run1, run0)


def test_the_default_run_directory_is_known_after_the_folder_moves(tmp_path, kimi_tokenizer, capsys):
    """The default run directory (OUT/.runs/CONFIG) is recorded relative to the folder: a folder
    moved whole rebuilds from its own runs; a build into it from elsewhere names the one inside."""
    first = tmp_path / "first"
    assert main(replay_build(tmp_path, kimi_tokenizer, first)) == 0
    moved = first.rename(tmp_path / "moved")
    assert main(replay_build(tmp_path, kimi_tokenizer, moved)) == 0
    capsys.readouterr()
    other = tmp_path / "run-other"
    code, printed = run_cli(replay_build(tmp_path, kimi_tokenizer, moved, "--run-dir", str(other)), capsys)
    assert code == 2
    assert printed.strip() == another_run_refusal(moved, moved / ".runs" / "B1_glaive", other)


def test_launch_refuses_a_foreign_out_and_an_overwrite_without_out(tmp_path, kimi_tokenizer, capsys,
                                                                  nothing_loads):
    out = tmp_path / "other"
    hub_layout_dataset(out)
    before = snapshot(out)
    write_replay(tmp_path / "replay.jsonl", kimi_tokenizer, 6)
    launch = ["launch", "B1_glaive", "--model", str(KIMI_TOKENIZER), "--engine", "replay", "--replay",
              str(tmp_path / "replay.jsonl"), "--run-dir", str(tmp_path / "run"), "--executor", "local", "--tasks", "2"]
    code, printed = run_cli([*launch, "--wait", "--out", str(out)], capsys)
    assert code == 2
    assert printed.strip() == refusal(out, "README.md (not a card eagle3-synth wrote), data/").replace(
        "eagle3-synth build:", "eagle3-synth launch:")
    assert snapshot(out) == before and not (tmp_path / "run").exists()

    code, printed = run_cli([*launch, "--overwrite"], capsys)
    assert code == 2
    assert printed.strip() == ("eagle3-synth launch: error: --overwrite replaces a config in --out; without --out "
                               "nothing is assembled")
