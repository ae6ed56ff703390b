"""What a dataset folder may hold (`dataset.folder.check_out_folder`): everything a build writes
there is recognised as ours, leftovers of killed builds included; anything else is named; a config
from another run is replaced only when asked, also by the Python builder path and at install time."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from eagle3_synth.cli import main
from eagle3_synth.dataset.card import CARD_MARKER
from eagle3_synth.dataset.folder import (RUN_DIR_KEY, RUN_INFO_FILE, check_out_folder, config_files, foreign_entries,
                                         install_config, is_our_card)
from eagle3_synth.errors import ConfigError
from eagle3_synth.run.lock import FOLDER_LOCK_FILE

from ..conftest import KIMI_TOKENIZER
from ..support.cli_runs import write_replay

CONFIG = "B1_glaive"


@pytest.fixture
def built(tmp_path, kimi_tokenizer) -> Path:
    """A folder `build` wrote (replay engine, default run directory)."""
    write_replay(tmp_path / "replay.jsonl", kimi_tokenizer, 6)
    out = tmp_path / "ds"
    assert main(["build", CONFIG, "--model", str(KIMI_TOKENIZER), "--engine", "replay",
                 "--replay", str(tmp_path / "replay.jsonl"), "--out", str(out)]) == 0
    return out


def test_what_builds_leave_in_a_folder_is_ours(built, tmp_path):
    assert sorted(p.name for p in built.iterdir()) == [".eagle3-synth.lock", ".runs", CONFIG, "README.md"]
    [shard] = config_files(built, CONFIG)
    # Left by builds killed part-way: staging, an install's staging and old copy, temporary files.
    (built / ".assemble-B1_glaive-k2j4" / "cache").mkdir(parents=True)
    (built / ".B3_ultrachat-x8a1_k3q").mkdir()
    (built / ".B1_glaive-old").mkdir()
    shutil.copy(shard, built / ".B1_glaive-old" / shard.name)
    (built / ".README.md.tmp").write_text("half a card")
    (built / CONFIG / ".run_info.json.tmp").write_text("{")
    (built / ".publish" / "v1.0.0").mkdir(parents=True)  # publish --dry-run's tree
    (built / ".publish-3kx9").mkdir()  # a killed release's
    # Another config's --run-dir inside the folder.
    (built / "runs" / "B3_ultrachat").mkdir(parents=True)
    (built / "runs" / "B3_ultrachat" / "run.json").write_text("{}")
    assert foreign_entries(built) == []
    check_out_folder(built, CONFIG, built / ".runs" / CONFIG)  # a rebuild from its run directory


def test_a_card_is_ours_only_with_the_marker_right_after_its_front_matter(built, tmp_path):
    card = (built / "README.md").read_text()
    assert is_our_card(built / "README.md")
    assert card.split("\n---\n\n", 1)[1].startswith(CARD_MARKER + "\n")
    for name, text in [("unmarked.md", card.replace(CARD_MARKER + "\n", "")),
                       ("quoted.md", "---\npretty_name: mine\n---\n\n# Mine\n\n```\n" + CARD_MARKER + "\n```\n"),
                       ("no-front-matter.md", CARD_MARKER + "\n")]:
        (tmp_path / name).write_text(text)
        assert not is_our_card(tmp_path / name), name


def test_what_is_not_ours_is_named(built):
    (built / "data").mkdir()
    (built / "data" / "train-00000-of-00001.parquet").write_bytes(b"PAR1")  # a Hub layout's unfingerprinted shard
    (built / "notes").mkdir()  # empty, but not ours
    (built / CONFIG / "extra.txt").write_text("mine")  # something added to one of our config folders
    (built / ".gitattributes").write_text("*.parquet filter=lfs\n")
    (built / ".ipynb_checkpoints").mkdir()  # a hidden folder not of a build's making
    assert foreign_entries(built) == [".gitattributes", ".ipynb_checkpoints/", f"{CONFIG}/", "data/", "notes/"]
    with pytest.raises(ConfigError) as error:
        check_out_folder(built, CONFIG, built / ".runs" / CONFIG)
    assert str(error.value) == (f"--out {built} holds what eagle3-synth did not write: .gitattributes, "
                                f".ipynb_checkpoints/, {CONFIG}/ and 2 more; nothing was written: choose another "
                                "folder (a new or empty one, or one eagle3-synth built)")


def test_a_config_not_recorded_or_from_another_run_is_replaced_only_with_overwrite(built, tmp_path):
    info_path = built / CONFIG / RUN_INFO_FILE
    assert json.loads(info_path.read_text())[RUN_DIR_KEY] == f".runs/{CONFIG}"
    other = tmp_path / "other-run"
    with pytest.raises(ConfigError) as error:
        check_out_folder(built, CONFIG, other)
    assert str(error.value) == (f"--out {built}: {CONFIG} there holds rows from the run directory "
                                f"{built / '.runs' / CONFIG}, not this build's {other}; --overwrite replaces them, "
                                "or choose another --out")
    check_out_folder(built, CONFIG, other, overwrite=True)
    check_out_folder(built, "B3_ultrachat", other)  # another config: nothing to replace
    info_path.unlink()
    with pytest.raises(ConfigError, match=f"{CONFIG} there holds rows from a run directory not recorded, not "
                                          f"this build's {built / '.runs' / CONFIG}; --overwrite replaces them"):
        check_out_folder(built, CONFIG, built / ".runs" / CONFIG)


def test_the_python_builder_path_holds_the_same_rule(built, tmp_path):
    from eagle3_synth_builders.folder_build import Eagle3SynthConfig, build_config

    settings = Eagle3SynthConfig(name=CONFIG, model=str(KIMI_TOKENIZER), engine="replay",
                                 replay=str(tmp_path / "replay.jsonl"), run_dir=str(tmp_path / "run-py"))
    rows_before = [p.read_bytes() for p in config_files(built, CONFIG)]
    with pytest.raises(ConfigError, match=f"holds rows from the run directory {built / '.runs' / CONFIG}"):
        build_config(settings, built, echo=lambda line: None)
    assert [p.read_bytes() for p in config_files(built, CONFIG)] == rows_before
    assert not (tmp_path / "run-py").exists()  # refused before anything ran
    rows, _ = build_config(settings, built, overwrite=True, echo=lambda line: None)
    assert rows == 6
    assert json.loads((built / CONFIG / RUN_INFO_FILE).read_text())[RUN_DIR_KEY] == str(tmp_path / "run-py")


def test_install_checks_again_what_came_into_the_folder_meanwhile(built, tmp_path):
    """A README someone put there while the build generated: the install refuses, under the
    folder's lock, before anything of the folder changes."""
    (built / "README.md").write_text("# written while the build ran\n")

    def files() -> dict[Path, bytes]:  # the lock file records who took the lock last: ours to write
        return {p: p.read_bytes() for p in built.rglob("*") if p.is_file() and p.name != FOLDER_LOCK_FILE}

    before = files()
    source = tmp_path / "new.parquet"
    shutil.copy(config_files(built, CONFIG)[0], source)
    with pytest.raises(ConfigError, match=r"README\.md \(not a card eagle3-synth wrote\)"):
        install_config(built, CONFIG, [str(source)], built / ".runs" / CONFIG, 6)
    assert files() == before
    assert source.exists()


@pytest.mark.parametrize("inside", ["", CONFIG, f"{CONFIG}/run"])
def test_a_run_directory_where_the_dataset_files_go_is_refused(tmp_path, inside):
    folder = tmp_path / "ds"
    run_dir = folder / inside if inside else folder
    with pytest.raises(ConfigError) as error:
        check_out_folder(folder, CONFIG, run_dir)
    assert str(error.value) == (f"--run-dir {run_dir}: where --out {folder} keeps {CONFIG}'s dataset files, which a "
                                f"build replaces; leave --run-dir out (default {folder / '.runs' / CONFIG}) or "
                                "choose another")
    assert not folder.exists()
