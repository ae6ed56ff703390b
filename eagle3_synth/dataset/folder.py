"""The Hub-layout dataset folder: `<config>/train-*.parquet`, per-config provenance, README.md card.

The same folder loads locally with `load_dataset(folder, config)` and is what gets published, so
the README front matter (`configs`, `dataset_info`) is always rendered from the Parquet files that
are actually there (`card.py` renders it). The card body shows the figures people want before
downloading (counts, length quantiles, shares) and the provenance of every config, which `build`
copies from the run directory into
`<config>/run_info.json` so it travels with the data.

Shard names carry a fingerprint of the build's bytes (`train-<fp8>-00000-of-00001.parquet`, named
and installed by `dataset.parquet`, the package's one Parquet writer) and the README's `data_files`
name it: datasets caches a local folder under a hash of its README's configs, not of the files'
contents, so a rebuilt folder changes that hash and loads its own rows.

Builds of several configs into one folder run at once (one command per config): each installs its
config and rewrites README.md, run_info.json and the config's folder under the folder's lock
(`folder_lock.py`), and README.md is rendered inside it from the files then on disk, so the
last build to write it lists every config installed before -- none is lost to a race.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any


from eagle3_synth.files import write_text_whole
from eagle3_synth.timestamps import utc_timestamp
from eagle3_synth.dataset.card import config_data_files, display_name, render_card
from eagle3_synth.dataset.folder_lock import folder_lock
from eagle3_synth.dataset.parquet import SHARD_NAME, install_shards, parquet_bytes, parquet_rows
from eagle3_synth.prompts.held_out import SPLITS
from eagle3_synth.run.directory import RUN_FILE, run_dir_under
from eagle3_synth.run.kill_points import kill_point

RUN_INFO_FILE = "run_info.json"


def shard_fingerprint(folder: Path, config: str) -> str | None:
    """The build fingerprint a config's shard names carry (None for names without one)."""
    files = [p for split in SPLITS for p in config_files(folder, config, split)]
    found = {m.group(1) if (m := SHARD_NAME.fullmatch(p.name)) else None for p in files}
    return found.pop() if len(found) == 1 else None


def built_configs(folder: Path) -> list[str]:
    """Configs with Parquet files in the folder, sorted (B1 before B2 ...).

    Dot folders (another build's `.assemble-*` staging, `.runs`) are never looked into: a build
    running beside this one removes its staging folder at any moment, and `Path.glob("*/...")`
    would fail on a folder listed and then gone (pathlib's `_scandir`: FileNotFoundError)."""
    try:
        entries = [entry for entry in os.scandir(folder) if not entry.name.startswith(".") and entry.is_dir()]
    except FileNotFoundError:
        return []
    return sorted(entry.name for entry in entries if _has_shards(Path(entry.path)))


def _has_shards(config_folder: Path) -> bool:
    try:  # a validation split is never without a train split
        return any(config_folder.glob("train-*.parquet"))
    except FileNotFoundError:  # removed since it was listed
        return False


def config_files(folder: Path, config: str, split: str = "train") -> list[Path]:
    """A config's Parquet shards of `split` in order (the names sort as `train-00000-of-N`, `...-00001-of-N`)."""
    return sorted((Path(folder) / config).glob(f"{split}-*.parquet"))


# -- provenance --------------------------------------------------------------------------------------
def _sessions(run: Any) -> list[dict[str, Any]]:
    """The header (first line) of every journal file: which session wrote it and when it started."""
    headers = []
    for path in run.journal_files():
        with run.fs.open(path, "rb") as handle:
            first = handle.readline()
        try:
            header = json.loads(first)
        except json.JSONDecodeError:
            continue  # an empty or torn file: it holds no results either
        if isinstance(header, dict) and "journal" in header:
            headers.append(header)
    return headers


def write_run_info(folder: Path, config: str, run_dir: str | Path) -> Path:
    """Copy the run's `run.json` (fingerprint, fields, meta) into `<config>/run_info.json`.

    The run directory may live anywhere (`--run-dir`, any fsspec URL) and is never published, so
    what the card needs -- model, tokenizer, sampling, engine, versions, markers, dates -- is
    copied beside the Parquet files. It keeps run.json's shape (a superset), so readers of
    run.json read it too. Dates: when the first and the last generation session started (from
    the journal headers) and when the rows were assembled; results carry no time of their own.
    """
    from eagle3_synth.run.directory import RunDirectory

    run = RunDirectory(run_dir)
    info = run.read_run_file()
    meta = info.get("meta", {})
    sessions = _sessions(run)
    starts = sorted(h["started"] for h in sessions if h.get("started")) or [meta.get("started")]
    info["generated"] = {
        "started": starts[0],
        "last_session_started": starts[-1],
        "sessions": len({h.get("session") for h in sessions}),
        "assembled": utc_timestamp(),
    }
    info["display"] = {"model": display_name(meta.get("model")), "tokenizer": display_name(meta.get("tokenizer"))}
    path = Path(folder) / config / RUN_INFO_FILE
    with folder_lock(folder):
        _replace_text(path, json.dumps(info, indent=2, ensure_ascii=False) + "\n")
    return path


def _replace_text(path: Path, text: str) -> None:
    """Write `path` whole or not at all (`files.write_text_whole`). Callers hold the folder's lock,
    so the name is fixed: a killed writer's temporary file is overwritten, not left."""
    write_text_whole(path, text, unique=False)


def install_config(folder: Path, config: str, sources: Sequence[str], run_dir: str | Path, num_rows: int,
                   on_wait: Callable[[str], None] | None = None, validation: Sequence[str] = ()) -> list[Path]:
    """Install a build's Parquet files as `<folder>/<config>/` (swapped in whole, `install_shards`),
    copy its run's provenance and rewrite README.md, all under the folder's lock (`on_wait` hears
    whom it waits for): parallel builds into one folder take turns and every config stays listed."""
    with folder_lock(folder, on_wait):
        files = install_shards(sources, folder, config, validation)
        kill_point("assemble.installed")
        write_run_info(folder, config, run_dir)
        write_readme(folder, {config: num_rows})
    return files


def run_info_path(folder: Path, config: str) -> Path | None:
    """Where the config's provenance is: `<config>/run_info.json`, else the default run dir's run.json."""
    for path in (Path(folder) / config / RUN_INFO_FILE, Path(run_dir_under(folder, config)) / RUN_FILE):
        if path.is_file():
            return path
    return None


def read_run_info(folder: Path, config: str) -> dict[str, Any] | None:
    path = run_info_path(folder, config)
    return json.loads(path.read_text(encoding="utf-8")) if path else None


def folder_stats(folder: Path, configs: Sequence[str]) -> list[Any]:
    """`stats.config_stats` per config, reading only the small scalar columns of its Parquet files."""
    import pyarrow.dataset as pads

    from eagle3_synth.dataset.stats import STATS_COLUMNS, config_stats

    def table(config: str) -> Any:
        files = [str(p) for p in config_files(folder, config)]
        return pads.dataset(files, format="parquet").to_table(columns=list(STATS_COLUMNS))

    return [config_stats(table(c), config=c) for c in configs]


def write_readme(folder: Path, num_rows: Mapping[str, int] | None = None) -> Path:
    """(Re)write README.md for every built config; `num_rows` are counts already known (else footers).

    Under the folder's lock, reading the configs on disk inside it: a build of another config
    installs under the same lock, so it is either seen here or rewrites README.md after."""
    with folder_lock(folder):
        return _write_readme(Path(folder), num_rows)


def _write_readme(folder: Path, num_rows: Mapping[str, int] | None) -> Path:
    configs = built_configs(folder)
    known = num_rows or {}
    rows = {c: known[c] if c in known else parquet_rows(config_files(folder, c)) for c in configs}
    validation_rows = {c: parquet_rows(files) for c in configs if (files := config_files(folder, c, "validation"))}
    text = render_card(
        configs,
        rows,
        stats=folder_stats(folder, configs),
        run_infos={c: read_run_info(folder, c) for c in configs},
        repo_id=str(folder),
        # Each build's own shards, so a rebuilt folder is a new dataset to datasets' cache.
        data_files={c: config_data_files(c, shard_fingerprint(folder, c), c in validation_rows) for c in configs},
        validation_rows=validation_rows,
        split_bytes={c: {s: parquet_bytes(files) for s in SPLITS if (files := config_files(folder, c, s))}
                     for c in configs},
    )
    path = folder / "README.md"
    kill_point("readme.rendered")
    _replace_text(path, text)
    return path
