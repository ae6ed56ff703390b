"""The Hub-layout dataset folder: `<config>/train-*.parquet`, per-config provenance, README.md card.

The same folder loads locally with `load_dataset(folder, config)` and is what gets published, so
the README front matter (`configs`, `dataset_info`) is always rendered from the Parquet files that
are actually there. The card body is rendered from `dataset_card.md` (package data beside this
module) with the figures people want before downloading (counts, length quantiles, shares) and the
provenance of every config, which `build` copies from the run directory into
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
import re
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from datasets import DatasetInfo, Features
from datasets.info import DatasetInfosDict
from datasets.splits import SplitDict, SplitInfo
from datasets.utils.metadata import MetadataConfigs
from huggingface_hub import DatasetCardData

from eagle3_synth.timestamps import utc_timestamp
from eagle3_synth.contract.row import FEATURES
from eagle3_synth.dataset.folder_lock import folder_lock
from eagle3_synth.dataset.parquet import SHARD_NAME, install_shards, parquet_rows
from eagle3_synth.prompts.validation import SPLITS
from eagle3_synth.run.directory import RUN_FILE, run_dir_under
from eagle3_synth.run.kill_points import kill_point

CARD_TEMPLATE = resources.files("eagle3_synth.dataset") / "dataset_card.md"
DEFAULT_CONFIG = "B1_glaive"
RUN_INFO_FILE = "run_info.json"
PRETTY_NAME = "eagle3-synth"
TAGS = ["eagle3", "speculative-decoding", "synthetic", "reasoning", "tool-calling"]
_LICENSE_ID = re.compile(r"^[a-z0-9][a-z0-9.\-]*$")
_PLACEHOLDER = re.compile(r"\{\{ (\w+) \}\}")
_HTML_TAG_START = re.compile(r"<(?=[/A-Za-z])")


def config_data_files(config: str, fingerprint: str | None = None, validation: bool = False) -> list[dict[str, str]]:
    """The card's `data_files` of a config: its shards (of one build if `fingerprint`), `validation`'s too if asked."""
    splits = ("train", "validation") if validation else ("train",)
    return [{"split": split, "path": f"{config}/{split}-{fingerprint + '-' if fingerprint else ''}*.parquet"}
            for split in splits]


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
def display_name(location: str | None) -> str | None:
    """A model/tokenizer as people should read it: a local folder by its name, a Hub id as is."""
    if not location:
        return location
    return Path(location).name if Path(location).is_dir() else location


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
    """Write `path` whole or not at all: a temporary file beside it, then a rename. Callers hold the
    folder's lock, so the name is fixed: a killed writer's temporary file is overwritten, not left."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


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


# -- front matter ------------------------------------------------------------------------------------
def hub_license(text: str) -> str:
    """A source's license as a Hub license id; free-text licenses ("unspecified (...)") are `unknown`."""
    return text if _LICENSE_ID.match(text) else "unknown"


def size_category(rows: int) -> str:
    """The Hub's `size_categories` bucket for a row count."""
    bounds = [(1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"),
              (10_000_000, "1M<n<10M"), (100_000_000, "10M<n<100M")]
    for bound, label in bounds:
        if rows < bound:
            return label
    return "100M<n<1B"


def config_facts(config: str, run_info: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """A config's source, pattern and license: a built-in's from the registry; another's as its run
    recorded it (a --config-file need not be loaded in this process), else the live registry's."""
    from eagle3_synth.prompts.configs import BUILTIN_CONFIGS, CONFIGS

    recorded = ((run_info or {}).get("meta") or {}).get("config")
    if config not in BUILTIN_CONFIGS and isinstance(recorded, dict):
        return recorded
    spec = CONFIGS.get(config)
    return {"source": spec.source, "pattern": spec.pattern, "license": spec.license} if spec else None


def card_data(
    configs: Sequence[str], num_rows: Mapping[str, int], features: Features = FEATURES, *,
    run_infos: Mapping[str, Mapping[str, Any] | None] | None = None,
    data_files: Mapping[str, list[dict[str, str]]] | None = None,
    validation_rows: Mapping[str, int] | None = None,
) -> DatasetCardData:
    """YAML front matter: one `configs` entry per config (one `default: true`) and its `dataset_info`.

    `data_files` per config defaults to all its shards (`config_data_files`); `validation_rows`:
    the rows of each config built with a `validation` split."""
    run_infos, data_files, validation_rows = run_infos or {}, data_files or {}, validation_rows or {}
    default = DEFAULT_CONFIG if DEFAULT_CONFIG in configs else (configs[0] if configs else None)
    facts = {c: config_facts(c, run_infos.get(c)) for c in configs}
    licenses = sorted({hub_license(str(f.get("license", ""))) if f else "unknown"
                       for f in facts.values()}) or ["unknown"]
    data = DatasetCardData(
        pretty_name=PRETTY_NAME,
        license=licenses[0] if len(licenses) == 1 else licenses,
        tags=list(TAGS),
        task_categories=["text-generation"],
        size_categories=[size_category(sum(num_rows.get(c, 0) for c in configs))],
    )
    MetadataConfigs(
        {
            name: {"data_files": data_files.get(name) or config_data_files(name),
                   **({"default": True} if name == default else {})}
            for name in configs
        }
    ).to_dataset_card_data(data)
    infos = DatasetInfosDict()
    for name in configs:
        splits = SplitDict()
        splits.add(SplitInfo(name="train", num_examples=num_rows.get(name, 0)))
        if name in validation_rows:  # a build with --validation
            splits.add(SplitInfo(name="validation", num_examples=validation_rows[name]))
        infos[name] = DatasetInfo(features=features, config_name=name, splits=splits)
    infos.to_dataset_card_data(data)
    return data


# -- card body ---------------------------------------------------------------------------------------
def _configs_table(configs: Sequence[str], num_rows: Mapping[str, int],
                   run_infos: Mapping[str, Mapping[str, Any] | None], validation_rows: Mapping[str, int]) -> str:
    lines = ["| config | samples | prompts from | what it teaches | license |", "|---|---|---|---|---|"]
    for name in configs:
        facts = config_facts(name, run_infos.get(name))
        samples = f"{num_rows.get(name, 0)}" + (f" (+ {validation_rows[name]} validation)" if name in validation_rows else "")
        if facts is None:  # a --config-file config neither recorded by its run nor given to this process
            lines.append(f"| `{name}` | {samples} | - | - | unknown |")
            continue
        source = facts.get("source")
        source = f"[{source}](https://huggingface.co/datasets/{source})" if source else "-"
        lines.append(f"| `{name}` | {samples} | {source} | {facts.get('pattern') or '-'} "
                     f"| {facts.get('license') or 'unknown'} |")
    return "\n".join(lines)


def _json_cell(value: Any) -> str:
    if value in (None, {}, []):
        return "-"
    return "`" + json.dumps(value, ensure_ascii=False, sort_keys=True).replace("|", "\\|") + "`"


def _generation_table(configs: Sequence[str], run_infos: Mapping[str, dict[str, Any] | None]) -> str:
    """Model, tokenizer, sampling, engine, versions and dates per config, from its run_info."""
    lines = ["| config | model | tokenizer | profile | engine | sampling | template kwargs | versions | generated (UTC) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name in configs:
        info = run_infos.get(name)
        if not info:
            lines.append(f"| `{name}` | not recorded | | | | | | | |")
            continue
        meta, fields = info.get("meta", {}), info.get("fields", {})
        display = info.get("display", {})
        versions = dict(meta.get("versions") or {})
        if meta.get("eagle3_synth_version"):
            versions.setdefault("eagle3-synth", meta["eagle3_synth_version"])
        generated = info.get("generated") or {"started": meta.get("started")}
        dates = generated.get("started") or "-"
        if generated.get("assembled"):
            dates += f" → {generated['assembled']} ({generated.get('sessions', '?')} session(s))"
        lines.append(
            f"| `{name}` | {display.get('model') or display_name(meta.get('model')) or '-'} "
            f"| {display.get('tokenizer') or display_name(meta.get('tokenizer')) or '-'} "
            f"| {fields.get('profile') or '-'} | {meta.get('engine') or '-'} | {_json_cell(fields.get('sampling'))} "
            f"| {_json_cell(fields.get('template_kwargs'))} | {_json_cell(versions)} | {dates} |"
        )
    return "\n".join(lines)


def _figures(plots: Mapping[str, str]) -> str:
    if not plots:
        return "Length histograms per config are added to the card when the dataset is published."
    return "\n\n".join(f"![{name}: output length distribution]({path})" for name, path in plots.items())


def render_card(
    configs: Sequence[str], num_rows: Mapping[str, int], *,
    stats: Sequence[Any],
    run_infos: Mapping[str, dict[str, Any] | None],
    repo_id: str,
    version: str | None = None,
    plots: Mapping[str, str] | None = None,
    features: Features = FEATURES,
    data_files: Mapping[str, list[dict[str, str]]] | None = None,
    validation_rows: Mapping[str, int] | None = None,
) -> str:
    """README.md text: front matter for `configs`, body from dataset_card.md with every figure filled.

    `stats` are `stats.ConfigStats` in config order; `plots` maps a config to its PNG path in the
    repo; `data_files` (per config) and `validation_rows` as in `card_data`. A placeholder the template names but nothing
    fills is an error, so template and code cannot drift apart silently.
    """
    from eagle3_synth.dataset.stats import format_stats_table

    data = card_data(configs, num_rows, features, run_infos=run_infos, data_files=data_files,
                     validation_rows=validation_rows)
    if not CARD_TEMPLATE.is_file():
        raise FileNotFoundError(f"the card template {CARD_TEMPLATE} is missing from the installed package; "
                                "reinstall eagle3-synth")
    template = CARD_TEMPLATE.read_text(encoding="utf-8")
    default = DEFAULT_CONFIG if DEFAULT_CONFIG in configs else configs[0]
    values = {
        "repo_id": repo_id,
        "version": version or "unreleased (local build)",
        "revision_arg": f', revision="{version}"' if version else "",
        "default_config": default,
        "configs_table": _configs_table(configs, num_rows, run_infos, validation_rows or {}),
        # A header such as "no </think>" would be read as an HTML tag and vanish from the page.
        "stats_table": _HTML_TAG_START.sub("&lt;", format_stats_table(list(stats), markdown=True)),
        "generation_table": _generation_table(configs, run_infos),
        "figures": _figures(plots or {}),
        "extra_columns": _extra_columns(features),
    }
    missing = sorted(set(_PLACEHOLDER.findall(template)) - set(values))
    if missing:
        raise ValueError(f"{CARD_TEMPLATE} names placeholders nothing fills: {missing}")
    body = _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), template)
    return f"---\n{data.to_yaml()}\n---\n\n{body}"


def _extra_columns(features: Features) -> str:
    """Rows of the column table for columns beyond the contract (the optional preview columns)."""
    extra = [name for name in features if name not in FEATURES]
    return "".join(
        f"\n| `{name}` | for reading in the viewer only: the first characters of the decoded "
        f"{name.split('_')[0]}, special tokens kept; never train on it |" for name in extra
    )


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
    )
    path = folder / "README.md"
    kill_point("readme.rendered")
    _replace_text(path, text)
    return path
