"""Files a command writes: never over an existing file unless asked, never inside a dataset folder.

`export --out`, `vocab --out/--json`, `validate --report` and `stats --plot` write where the user
points them. A typo (`--out demo_out/README.md`, `--out b1.jsonl` where last week's export lives)
must not destroy anything, so an existing file is refused unless `--overwrite` is given, and no
command ever writes over a file inside a dataset folder (a folder with a dataset card `README.md`
and config folders, or a run directory's `.runs/`): its files belong to `build`, which replaces
them atomically itself. The check runs before any work starts, so a refused command has done
nothing.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from pathlib import Path

from eagle3_synth.errors import ConfigError
from eagle3_synth.run.directory import RUN_FILE, RUNS_DIR


def add_overwrite_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--overwrite", action="store_true",
                        help="replace output files that already exist (never files inside a dataset folder)")


def dataset_folder_holding(path: Path) -> Path | None:
    """The dataset folder (or run directory) that `path` lies in, if any.

    A dataset folder is what `build --out` writes: README.md beside `.runs/` or beside a config
    folder holding run_info.json; a run directory holds run.json."""
    for folder in path.resolve().parents:
        if (folder / RUN_FILE).is_file():
            return folder
        if (folder / "README.md").is_file() and ((folder / RUNS_DIR).is_dir()
                                                 or any(folder.glob("*/run_info.json"))):
            return folder
    return None


def check_outputs(paths: Iterable[str | Path], option: str, overwrite: bool) -> None:
    """Refuse, naming the option and the file, to write over an existing file (unless `overwrite`)
    or over anything inside a dataset folder; a path that is a folder is refused too."""
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            raise ConfigError(f"{option} {raw}: is a folder; give a file path")
        if not path.exists() and not path.is_symlink():
            continue
        inside = dataset_folder_holding(path)
        if inside is not None:
            raise ConfigError(f"{option} {raw}: exists inside the dataset folder {inside}, whose files only "
                              "`build` writes; write elsewhere")
        if not overwrite:
            raise ConfigError(f"{option} {raw}: exists; pass --overwrite to replace it, or write elsewhere")
