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
(`run/lock.py`), and README.md is rendered inside it from the files then on disk, so the
last build to write it lists every config installed before -- none is lost to a race.

A build writes into a folder that is new, empty, or holds only what eagle3-synth writes there
(`check_out_folder`, before anything loads and again under the lock at install): the card (known
by `card.CARD_MARKER` right after its front matter), config folders of fingerprinted shards and
run_info.json, run directories (`.runs/` and any `--run-dir` put inside), the lock file, and the
staging folders and temporary files of builds and of publish. Anything else -- someone's README,
another dataset's card or data files -- is theirs: the build is refused and nothing is written.
A config already there is replaced by a build from the run directory its run_info.json records
(a rebuild, a resume), and by any other only when asked (`--overwrite`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any


from eagle3_synth.errors import ConfigError
from eagle3_synth.files import temporary_name, write_text_whole, utc_timestamp
from eagle3_synth.dataset.card import CARD_MARKER, config_data_files, display_name, render_card
from eagle3_synth.dataset.parquet import SHARD_NAME, install_shards, parquet_bytes, parquet_rows
from eagle3_synth.prompts.held_out import SPLITS
from eagle3_synth.run.directory import RUN_FILE, RUNS_DIR, run_dir_under
from eagle3_synth.run.kill_points import kill_point
from eagle3_synth.run.lock import FOLDER_LOCK_FILE, folder_lock

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


# -- what a dataset folder may hold ------------------------------------------------------------------
STAGING_PREFIX = ".assemble-"  # a build's staging folder: `.assemble-<config>-<random>` (folder_build)
# publish's staged trees: `.publish/<tag>` (a dry run's, kept), `.publish-<random>` (a release's, removed)
PUBLISH_STAGING = ".publish"
RUN_DIR_KEY = "run_dir"  # in run_info.json: the run directory the rows came from (`recorded_run_dir`)
_README = "README.md"
# Files written whole under the folder's lock (`files.temporary_name`, fixed names): a killed writer's.
_TEMPORARY_FILES = (temporary_name(_README, unique=False), temporary_name(RUN_INFO_FILE, unique=False))
# `install_shards`' staging (`.<config>-` + mkdtemp's 8 characters) and the old copy it swaps out.
_INSTALL_STAGING = re.compile(r"\..+-(?:old|[a-z0-9_]{8})")
_LISTED = 3  # foreign names a refusal lists before "and N more"


def is_our_card(path: Path) -> bool:
    """Whether `path` is a card `card.render_card` wrote: its front matter, then `CARD_MARKER`."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            head = handle.read(1 << 20)  # the front matter of many configs is tens of KB
    except OSError:
        return False
    return re.match(r"---\n.*?\n---\n\n" + re.escape(CARD_MARKER) + "\n", head, re.DOTALL) is not None


def _holds_only_config_files(folder: Path, temporary: bool) -> bool:
    """A config folder as `install_shards` makes it: our shards (fingerprinted names) and
    run_info.json; `temporary` (its staging or old copy) may be empty."""
    try:
        names = [(entry.name, entry.is_file()) for entry in os.scandir(folder)]
    except FileNotFoundError:
        return True  # renamed or removed since it was listed: a build installing beside this one
    except OSError:
        return False
    return (temporary or bool(names)) and all(
        is_file and (name in (RUN_INFO_FILE, *_TEMPORARY_FILES)
                     or bool((m := SHARD_NAME.fullmatch(name)) and m.group(1)))
        for name, is_file in names)


def _is_ours(entry: os.DirEntry, run_dir_parts: tuple[str, ...]) -> bool:
    """Whether an entry of a dataset folder is one eagle3-synth writes there (module docstring)."""
    name, path = entry.name, Path(entry.path)
    if entry.is_file():
        return name in (FOLDER_LOCK_FILE, *_TEMPORARY_FILES) or (name == _README and is_our_card(path))
    if not os.path.lexists(path):
        return True  # gone since it was listed: another build's staging, swapped in or removed
    if not entry.is_dir():
        return False
    if name in (RUNS_DIR, PUBLISH_STAGING) or name.startswith((STAGING_PREFIX, PUBLISH_STAGING + "-")):
        return True  # the default run directories; a build's or publish's staging
    if name in run_dir_parts[:1]:
        return True  # this build's own --run-dir
    if _is_run_dir(path) or _holds_only_run_dirs(path):
        return True  # another config's --run-dir under this folder, or a folder of them
    if name.startswith("."):
        return bool(_INSTALL_STAGING.fullmatch(name)) and _holds_only_config_files(path, temporary=True)
    return _holds_only_config_files(path, temporary=False)


def _is_run_dir(path: Path) -> bool:
    return (path / RUN_FILE).is_file()


def _holds_only_run_dirs(folder: Path) -> bool:
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return False
    return bool(entries) and all(entry.is_dir(follow_symlinks=False) and _is_run_dir(Path(entry.path))
                                 for entry in entries)


def foreign_entries(folder: Path, run_dir: str | Path | None = None) -> list[str]:
    """What in `folder` eagle3-synth did not write (sorted names, folders with a trailing `/`):
    anything but our card (README.md), config folders of our shards and run_info.json, `.runs/`,
    the staging folders and temporary files of builds and of publish, the lock file, and run
    directories (`run_dir`: the folder's part of this build's)."""
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return []
    parts = _inside(Path(run_dir), folder).parts if run_dir is not None and "://" not in str(run_dir) else ()
    return sorted(entry.name + "/" * entry.is_dir() for entry in entries if not _is_ours(entry, parts))


def _inside(path: Path, folder: Path) -> Path:
    """`path` relative to `folder` (both resolved) if it is inside, else an empty path."""
    path, folder = Path(os.path.realpath(path)), Path(os.path.realpath(folder))
    return path.relative_to(folder) if path.is_relative_to(folder) and path != folder else Path()


def recorded_run_dir(folder: Path, run_dir: str | Path) -> str:
    """A run directory as run_info.json records it: a URL as given; a local one resolved, relative to
    the dataset folder when inside it (`.runs/B1_glaive`), so a folder moved or copied whole with its
    runs still names its own."""
    text = str(run_dir)
    if "://" in text:
        return text.rstrip("/")
    inside = _inside(Path(text), folder)
    return str(inside) if inside.parts else os.path.realpath(text)


def _recorded_run_dir_of(folder: Path, config: str) -> str | None:
    """The run directory a config's rows came from, as its run_info.json records it (None: not recorded)."""
    try:
        info = json.loads((folder / config / RUN_INFO_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    recorded = info.get(RUN_DIR_KEY) if isinstance(info, dict) else None
    return recorded if isinstance(recorded, str) else None


def _shown_run_dir(folder: Path, recorded: str) -> str:
    return recorded if "://" in recorded or os.path.isabs(recorded) else str(Path(folder) / recorded)


def check_out_folder(folder: str | Path, config: str, run_dir: str | Path | None, *, overwrite: bool = False,
                     option: str = "--out") -> None:
    """A build of `config` from `run_dir` may write into `folder`: it is new, empty, or holds only
    what eagle3-synth writes there (`foreign_entries`), and a `config` already in it came from
    `run_dir` -- rows of another run (or of one not recorded) are replaced only with `overwrite`.
    `run_dir` None: a run of the builder's own, never one already recorded. A ConfigError naming
    `option` otherwise; reads only."""
    if "://" in str(folder):
        return  # not a local folder: its own client says what it refuses
    folder = Path(folder)
    local_run = run_dir is not None and "://" not in str(run_dir)
    if local_run and (os.path.realpath(run_dir) == os.path.realpath(folder)
                      or _inside(Path(run_dir), folder).parts[:1] == (config,)):
        raise ConfigError(f"--run-dir {run_dir}: where {option} {folder} keeps {config}'s dataset files, which a build "
                          f"replaces; leave --run-dir out (default {run_dir_under(folder, config)}) or choose another")
    try:
        foreign = foreign_entries(folder, run_dir)
    except OSError as exc:
        raise ConfigError(f"{option} {folder}: cannot be read ({exc.strerror or exc})") from None
    if foreign:
        named = ", ".join(f"{name} (not a card eagle3-synth wrote)" if name == _README else name
                          for name in foreign[:_LISTED])
        more = f" and {len(foreign) - _LISTED} more" if len(foreign) > _LISTED else ""
        raise ConfigError(f"{option} {folder} holds what eagle3-synth did not write: {named}{more}; nothing "
                          "was written: choose another folder (a new or empty one, or one eagle3-synth built)")
    if overwrite or config not in built_configs(folder):
        return
    recorded = _recorded_run_dir_of(folder, config)
    if recorded is not None and run_dir is not None and recorded == recorded_run_dir(folder, run_dir):
        return  # a rebuild from the same run: what resuming a build does
    came_from = (f"the run directory {_shown_run_dir(folder, recorded)}" if recorded is not None
                 else "a run directory not recorded")
    this = f"this build's {run_dir}" if run_dir is not None else "this build's own run"
    raise ConfigError(f"{option} {folder}: {config} there holds rows from {came_from}, not {this}; "
                      f"--overwrite replaces them, or choose another {option}")


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


def run_info(folder: Path, run_dir: str | Path) -> dict[str, Any]:
    """What `<config>/run_info.json` holds: the run's `run.json` (fingerprint, fields, meta), with
    dates, display names and the run directory the rows came from.

    The run directory may live anywhere (`--run-dir`, any fsspec URL) and is never published, so
    what the card needs -- model, tokenizer, sampling, engine, versions, markers, dates -- is
    copied beside the Parquet files. It keeps run.json's shape (a superset), so readers of
    run.json read it too. Dates: when the first and the last generation session started (from
    the journal headers) and when the rows were assembled; results carry no time of their own.
    `run_dir` is recorded as `recorded_run_dir` writes it: a later build from another run is told
    apart from a rebuild (`check_out_folder`).
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
    info[RUN_DIR_KEY] = recorded_run_dir(folder, run_dir)
    return info


def _replace_text(path: Path, text: str) -> None:
    """Write `path` whole or not at all (`files.write_text_whole`). Callers hold the folder's lock,
    so the name is fixed: a killed writer's temporary file is overwritten, not left."""
    write_text_whole(path, text, unique=False)


def install_config(folder: Path, config: str, sources: Sequence[str], run_dir: str | Path, num_rows: int,
                   on_wait: Callable[[str], None] | None = None, validation: Sequence[str] = (),
                   overwrite: bool = False) -> list[Path]:
    """Install a build's Parquet files with its run's provenance as `<folder>/<config>/` (swapped in
    whole, `install_shards`) and rewrite README.md, all under the folder's lock (`on_wait` hears
    whom it waits for): parallel builds into one folder take turns and every config stays listed.
    The folder is checked again under the lock (`check_out_folder`: what came into it while this
    build generated), before anything in it changes."""
    with folder_lock(folder, on_wait):
        check_out_folder(folder, config, run_dir, overwrite=overwrite)
        info = json.dumps(run_info(folder, run_dir), indent=2, ensure_ascii=False) + "\n"
        files = install_shards(sources, folder, config, validation, texts={RUN_INFO_FILE: info})
        kill_point("assemble.installed")
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
