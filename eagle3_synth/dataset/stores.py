"""Where rows come from: a built folder, a run directory in progress, or a published repo id.

`open_source(location)` returns one `RowSource` whatever the user points at, so `inspect`, `stats`,
`validate` and `export` work the same on all three:

- a built folder (`<config>/train-*.parquet`): its Parquet files are read directly with pyarrow,
  projected to the columns asked for (stats reads no token ids at all);
- a run directory (`run.json` inside), or a folder of them (`OUT/.runs`): rows come from
  `pipeline.iter_rows`, so a run can be checked while it is still generating;
- a repo id (`org/name`): `datasets.load_dataset(repo_id, config)`, optionally at a `revision`.

A source reads one split, `train` unless `open_source(..., split="validation")` (a build with
`--validation`; a run directory's held-out conversations, `run.assemble.held_out_conversations`).

A source also says which tokenizer, template kwargs and markers made the data (`provenance`), as
far as it knows: validation re-templates prompts with exactly those.
"""

from __future__ import annotations

import json
import logging
import posixpath
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from eagle3_synth.errors import ConfigError
from eagle3_synth.run.directory import RUN_FILE, RunDirectory
from eagle3_synth.contract.row import COLUMNS, FEATURES
from eagle3_synth.contract.markers import describe
from eagle3_synth.contract.profiles import MarkerIds, ModelProfile

# What made a config's rows, as recorded beside them (run.json, or its copy run_info.json), and the
# tokenizer, profile and markers tools re-read the data with: validation re-templates prompts with
# exactly those.


@dataclass(frozen=True)
class Provenance:
    """What made a config's rows, as recorded beside them; any field may be unknown (None)."""

    tokenizer: str | None = None
    # The model folder the engine loaded (None: not recorded, or the replay engine).
    model: str | None = None
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    profile: str | None = None
    markers: MarkerIds | None = None
    # The profile as recorded (its YAML schema): a custom profile is known to tools from this.
    profile_definition: dict[str, Any] | None = None
    # How conversations were handed to the template and the date it rendered (None: not recorded).
    message_form: dict[str, Any] | None = None
    template_date: str | None = None
    # The model's vocabulary as meta records it ({"size", "from"}; None: not recorded) and max_new_tokens.
    vocab_size: dict[str, Any] | None = None
    max_new_tokens: int | None = None
    # Where these facts were read from, for messages ("run.json of demo_out/.runs/B1_glaive").
    origin: str = "nothing recorded"


def provenance_from_run_file(path: Path) -> Provenance:
    """Read a run's `run.json` (or its copy `run_info.json`): tokenizer and markers (meta),
    template kwargs and profile (fields)."""
    return provenance_from_run_info(json.loads(path.read_text(encoding="utf-8")), str(path))


def provenance_from_run_info(data: dict[str, Any], origin: str) -> Provenance:
    meta, fields = data.get("meta", {}), data.get("fields", {})
    markers = meta.get("markers")
    template = fields.get("template") or {}
    return Provenance(
        vocab_size=meta.get("vocab_size"), max_new_tokens=(fields.get("sampling") or {}).get("max_new_tokens"),
        profile_definition=fields.get("profile_definition"),
        message_form=template.get("message_form"),
        template_date=template.get("date"),
        tokenizer=meta.get("tokenizer"),
        model=meta.get("model") if isinstance(meta.get("model"), str) and meta.get("model") else None,
        template_kwargs=dict(fields.get("template_kwargs") or {}),
        profile=fields.get("profile") or (markers or {}).get("profile"),
        markers=MarkerIds.from_dict(markers) if markers else None,
        origin=origin,
    )


def data_tokenizer(
    provenance: Provenance, tokenizer_path: str | None = None, *, trust_remote_code: bool = False
) -> tuple[Any, str]:
    """The tokenizer the data was made with: `tokenizer_path` if given, else the recorded one."""
    from eagle3_synth.prompts.templating import load_tokenizer

    path = tokenizer_path or provenance.tokenizer
    if not path:
        raise ConfigError(
            f"which tokenizer made this data is not recorded ({provenance.origin}); pass --tokenizer PATH"
        )
    if not tokenizer_path and not Path(path).exists():
        raise ConfigError(
            f"the data was made with tokenizer {path!r} (from {provenance.origin}), which is not here; "
            "pass --tokenizer PATH"
        )
    try:
        return load_tokenizer(path, trust_remote_code=trust_remote_code), path
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot load tokenizer {path!r}: {exc}") from exc


def data_profile(tokenizer: Any, provenance: Provenance, profile: str | None = None) -> "ModelProfile":
    """The profile the data was made with: given > recorded (with its recorded definition, so a
    `--profile-file` profile needs no file here) > auto."""
    from eagle3_synth.contract.profiles import get_profile, profile_from_dict

    name = profile or provenance.profile or "auto"
    if provenance.profile_definition and name == provenance.profile:
        return profile_from_dict(name, provenance.profile_definition, provenance.origin)
    return get_profile(name, tokenizer)


def data_markers(tokenizer: Any, provenance: Provenance, profile: str | None = None) -> MarkerIds:
    """Markers resolved from `tokenizer` (profile: given > recorded > auto), checked against the
    recorded ones: a difference means the tokenizer is not the one the data was made with."""
    from eagle3_synth.contract.profiles import resolve_markers

    markers = resolve_markers(data_profile(tokenizer, provenance, profile), tokenizer)
    recorded = provenance.markers
    if recorded is not None and (profile is None or profile == recorded.profile) and recorded != markers:
        diffs = [f"{name}: recorded {describe(getattr(recorded, name))}, tokenizer gives {describe(getattr(markers, name))}"
                 for name in recorded.__dataclass_fields__ if getattr(recorded, name) != getattr(markers, name)]
        raise ConfigError(
            "this tokenizer resolves the markers differently from the ones the data was made with "
            f"({provenance.origin}): {'; '.join(diffs)}. Pass the original --tokenizer"
        )
    return markers


log = logging.getLogger(__name__)
SCHEMA = FEATURES.arrow_schema
# A Hub repo id `org/name`, each part starting with a letter or digit (the Hub's own rule).
REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")


class RowSource:
    """Rows of one or more configs. Subclasses implement `configs`, `table` and `iter_batches`."""

    kind = "source"
    split = "train"  # which split it reads (`open_source` sets it)

    def __init__(self, location: str):
        self.location = location

    def configs(self) -> list[str]:
        raise NotImplementedError

    def table(self, config: str, columns: Sequence[str] | None = None) -> pa.Table:
        """The config's rows as a Table, with only `columns` (all contract columns by default)."""
        raise NotImplementedError

    def iter_batches(self, config: str, batch_size: int = 256) -> Iterator[list[dict[str, Any]]]:
        """Full rows in batches, so a large config never has to fit in memory as Python objects."""
        raise NotImplementedError

    def provenance(self, config: str) -> Provenance:
        return Provenance()

    def check_config(self, config: str) -> None:
        known = self.configs()
        if config not in known:
            raise ConfigError(
                f"{self.location} has no config {config!r}; it has: {', '.join(known) or 'none'}"
            )

    def iter_rows(self, config: str) -> Iterator[dict[str, Any]]:
        for batch in self.iter_batches(config):
            yield from batch

    def rows_by_id(self, config: str, sample_ids: Sequence[int]) -> list[dict[str, Any]]:
        """The rows with these sample ids, in the order asked; an unknown id is an error."""
        wanted = {int(s) for s in sample_ids}
        found: dict[int, dict[str, Any]] = {}
        for row in self._candidate_rows(config, wanted):
            if row["sample_id"] in wanted:
                found[row["sample_id"]] = row
        missing = [s for s in sample_ids if s not in found]
        if missing:
            raise ConfigError(f"{self.location} {config}: no sample_id {', '.join(map(str, missing))}")
        return [found[s] for s in sample_ids]

    def _candidate_rows(self, config: str, wanted: set[int]) -> Iterable[dict[str, Any]]:
        return self.iter_rows(config)


def _rows_to_table(rows: Iterable[dict[str, Any]], columns: Sequence[str]) -> pa.Table:
    """Rows (dicts) to a Table of `columns` with the contract's types, one column list at a time."""
    data: dict[str, list[Any]] = {name: [] for name in columns}
    for row in rows:
        for name in columns:
            data[name].append(row[name])
    return pa.table({name: pa.array(data[name], type=SCHEMA.field(name).type) for name in columns})


def _check_columns(columns: Sequence[str] | None) -> list[str]:
    columns = list(columns) if columns is not None else list(COLUMNS)
    unknown = [c for c in columns if c not in COLUMNS]
    if unknown:
        raise ConfigError(f"unknown column(s) {unknown}; the contract has {list(COLUMNS)}")
    return columns


class FolderSource(RowSource):
    """A Hub-layout folder: `<config>/train-*.parquet`, read with pyarrow (no datasets cache)."""

    kind = "folder"

    def __init__(self, location: str):
        super().__init__(location)
        self.path = Path(location)

    def configs(self) -> list[str]:
        from eagle3_synth.dataset.folder import built_configs

        return built_configs(self.path)

    def _dataset(self, config: str):
        import pyarrow.dataset as pads

        from eagle3_synth.dataset.folder import config_files, read_run_info

        self.check_config(config)
        files = [str(p) for p in config_files(self.path, config, self.split)]
        if not files:
            asked = ((read_run_info(self.path, config) or {}).get("fields") or {}).get("validation")
            why = ("built without --validation" if asked is None else
                   f"built with --validation {asked}, but no held-out conversation has a row yet")
            raise ConfigError(f"{self.location}: config {config} has no {self.split} split ({why})")
        return pads.dataset(files, format="parquet")

    def table(self, config: str, columns: Sequence[str] | None = None) -> pa.Table:
        columns = _check_columns(columns)
        dataset = self._dataset(config)
        return dataset.to_table(columns=columns)

    def iter_batches(self, config: str, batch_size: int = 256) -> Iterator[list[dict[str, Any]]]:
        for batch in self._dataset(config).to_batches(batch_size=batch_size):
            yield batch.to_pylist()

    def _candidate_rows(self, config: str, wanted: set[int]) -> Iterable[dict[str, Any]]:
        import pyarrow.dataset as pads

        # Parquet row-group statistics let pyarrow skip most of a large config.
        return self._dataset(config).to_table(filter=pads.field("sample_id").isin(sorted(wanted))).to_pylist()

    def provenance(self, config: str) -> Provenance:
        # `build` copies the run's run.json to <config>/run_info.json (`folder.run_info_path`).
        from eagle3_synth.dataset.folder import run_info_path

        path = run_info_path(self.path, config)
        return provenance_from_run_file(path) if path else Provenance(origin=f"nothing recorded for {config} in {self.path}")


def find_run_dirs(location: str) -> list[str]:
    """`location` itself if it is a run directory, else its subfolders that are (any fsspec URL)."""
    import fsspec

    if RunDirectory(location).exists():
        return [location]
    fs, root = fsspec.core.url_to_fs(location)
    found = sorted(posixpath.dirname(p) for p in fs.glob(posixpath.join(root, "*", RUN_FILE)))
    return [p if "://" not in location else fs.unstrip_protocol(p) for p in found]


class RunSource(RowSource):
    """One run directory, or a folder holding one per config (`OUT/.runs`), possibly in progress."""

    kind = "run directory"

    def __init__(self, location: str):
        super().__init__(location)
        self.run_dirs: dict[str, str] = {}
        self.run_info: dict[str, dict[str, Any]] = {}
        for url in find_run_dirs(location):
            info = RunDirectory(url).read_run_file()
            config = info.get("fields", {}).get("config") or posixpath.basename(url.rstrip("/"))
            self.run_dirs[config], self.run_info[config] = url, info

    def configs(self) -> list[str]:
        return sorted(self.run_dirs)

    def iter_rows(self, config: str) -> Iterator[dict[str, Any]]:
        from eagle3_synth.run.assemble import iter_rows

        self.check_config(config)
        if self.split != "train" and self.run_info[config].get("fields", {}).get("validation") is None:
            raise ConfigError(f"{self.run_dirs[config]}: the run has no {self.split} split "
                              "(generated without --validation)")
        return iter_rows(self.run_dirs[config], split=self.split)

    def table(self, config: str, columns: Sequence[str] | None = None) -> pa.Table:
        return _rows_to_table(self.iter_rows(config), _check_columns(columns))

    def iter_batches(self, config: str, batch_size: int = 256) -> Iterator[list[dict[str, Any]]]:
        batch: list[dict[str, Any]] = []
        for row in self.iter_rows(config):
            batch.append(row)
            if len(batch) == batch_size:
                yield batch
                batch = []
        if batch:
            yield batch

    def provenance(self, config: str) -> Provenance:
        self.check_config(config)
        return provenance_from_run_info(self.run_info[config], posixpath.join(self.run_dirs[config], RUN_FILE))


class LoadDatasetSource(RowSource):
    """A published repo id (or any path `datasets.load_dataset` understands), one config at a time."""

    kind = "repo"

    def __init__(self, location: str, revision: str | None = None):
        super().__init__(location)
        self.revision = revision
        self._loaded: dict[str, Any] = {}

    def configs(self) -> list[str]:
        from datasets import get_dataset_config_names

        return sorted(get_dataset_config_names(self.location, revision=self.revision))

    def dataset(self, config: str) -> Any:
        if config not in self._loaded:
            from datasets import load_dataset

            try:
                self._loaded[config] = load_dataset(self.location, config, split=self.split, revision=self.revision)
            except ValueError as exc:  # an unknown config name: datasets lists the known ones
                raise ConfigError(f"{self.location}: {exc}") from exc
        return self._loaded[config]

    def table(self, config: str, columns: Sequence[str] | None = None) -> pa.Table:
        columns = _check_columns(columns)
        dataset = self.dataset(config)
        return dataset.select_columns(columns).with_format("arrow")[:].select(columns)

    def provenance(self, config: str) -> Provenance:
        """The repo's `<config>/run_info.json` (published with the data), if it has one."""
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError, LocalEntryNotFoundError

        from eagle3_synth.dataset.folder import RUN_INFO_FILE, run_info_path

        if Path(self.location).is_dir():  # a local folder given to load_dataset
            path = run_info_path(Path(self.location), config)
            return provenance_from_run_file(path) if path else Provenance(origin=f"nothing recorded in {self.location}")
        try:
            path = hf_hub_download(self.location, f"{config}/{RUN_INFO_FILE}", repo_type="dataset",
                                   revision=self.revision)
        except (EntryNotFoundError, LocalEntryNotFoundError, HfHubHTTPError):
            return Provenance(origin=f"no {config}/{RUN_INFO_FILE} in {self.location}")
        return provenance_from_run_file(Path(path))

    def _candidate_rows(self, config: str, wanted: set[int]) -> Iterable[dict[str, Any]]:
        import pyarrow.compute as pc

        dataset = self.dataset(config)
        ids = self.table(config, ["sample_id"]).column("sample_id")
        mask = pc.is_in(ids, value_set=pa.array(sorted(wanted), type=pa.int64()))
        positions = [i for i, hit in enumerate(mask.to_pylist()) if hit]
        return dataset.select(positions).to_list()

    def iter_batches(self, config: str, batch_size: int = 256) -> Iterator[list[dict[str, Any]]]:
        dataset = self.dataset(config).with_format("arrow")
        for start in range(0, len(dataset), batch_size):
            yield dataset[start : start + batch_size].to_pylist()


def open_source(location: str, *, revision: str | None = None, split: str = "train") -> RowSource:
    """The right source for what the user pointed at, reading `split`; a clear error if it is none of them."""
    from eagle3_synth.prompts.held_out import SPLITS

    if split not in SPLITS:
        raise ConfigError(f"--split must be one of {', '.join(SPLITS)}, got {split!r}")
    source = _open_source(location, revision)
    source.split = split
    return source


def _open_source(location: str, revision: str | None) -> RowSource:
    path = Path(location)
    if "://" in location and not path.exists():  # a run directory on an object store (fsspec URL)
        if revision is not None:
            raise ConfigError(f"--revision applies to a repo id, not to the run directory {location}")
        source = RunSource(location)
        if not source.run_dirs:
            raise ConfigError(f"{location} is not a run directory ({RUN_FILE} inside) nor a folder of them")
        return source
    if path.is_dir():
        if revision is not None:
            raise ConfigError(f"--revision applies to a repo id, not to the local folder {location}")
        if (path / RUN_FILE).is_file() or any(path.glob(f"*/{RUN_FILE}")):
            return RunSource(location)
        folder = FolderSource(location)
        if folder.configs():
            return folder
        if any((path / ".runs").glob(f"*/{RUN_FILE}")):
            # `build` was started but has not written a config yet: show what is generated so far.
            log.warning("%s has no built config yet; reading its run directories in %s/.runs", location, location)
            return RunSource(str(path / ".runs"))
        raise ConfigError(
            f"{location} is neither a dataset folder (<config>/train-*.parquet) nor a run directory "
            f"({RUN_FILE} inside)"
        )
    if path.exists():
        raise ConfigError(f"{location} is a file; point at a dataset folder, a run directory or a repo id")
    if REPO_ID.match(location):
        return LoadDatasetSource(location, revision=revision)
    raise ConfigError(f"{location}: no such folder, and not a repo id (org/name)")


def resolve_configs(source: RowSource, requested: Sequence[str] | None) -> list[str]:
    """The configs asked for (each checked), or every config of the source."""
    if not requested:
        configs = source.configs()
        if not configs:
            raise ConfigError(f"{source.location} holds no configs yet")
        return configs
    for config in requested:
        source.check_config(config)
    return list(requested)
