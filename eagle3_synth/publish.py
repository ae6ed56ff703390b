"""Publish a built folder to the Hub as a versioned release: checked, staged, one commit, one tag.

    result = publish(PublishOptions(folder=Path("out"), repo_id="org/eagle3-synth", tag="v1.0.0"))

Steps: the checks (refuse a folder that breaks the data contract), the tree (write the exact repo
tree -- viewer-sized shards, card, plots, provenance -- to a staging folder and check it), the Hub's
commit (one atomic `create_commit`, then `create_tag`). `dry_run` stops after
the tree is staged and checked, prints the operations, and never contacts the Hub.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Callable, Sequence, Iterator
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from datasets import Features, Value
from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi, DatasetCard
from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError
from huggingface_hub.hf_api import RepoFile

from eagle3_synth.dataset.card import DEFAULT_CONFIG, config_data_files, render_card
from eagle3_synth.dataset.folder import (PUBLISH_STAGING, built_configs, config_files, run_info_path, RUN_DIR_KEY,
                                         RUN_INFO_FILE, display_name, folder_stats, read_run_info)
from eagle3_synth.dataset.stores import (REPO_ID, FolderSource, Provenance, data_markers, data_tokenizer,
                                         provenance_from_run_file)
from eagle3_synth.contract.ranges import check_range
from eagle3_synth.errors import ConfigError, Eagle3SynthError
from eagle3_synth.contract.row import FEATURES
from eagle3_synth.prompts.held_out import SPLITS
from eagle3_synth.checks import RowValidator, data_vocabulary, validate_rows
from eagle3_synth.dataset.parquet import (ShardLimits, SplitBytes, features_with, parquet_bytes, parquet_rows,
                                          write_shards)
from eagle3_synth.view import output_preview, prompt_preview

# The exact repo tree of a release, written to a local staging folder and checked there.
#
# Layout (what `load_dataset(repo, config)` and the Hub's viewer read):
#
#     README.md                              card: front matter (configs, dataset_info) + figures
#     <config>/train-XXXXX-of-YYYYY.parquet  the rows, rewritten for the viewer (see below)
#     <config>/validation-XXXXX-of-YYYYY.parquet  the held-out rows of a build with --validation
#     <config>/run_info.json                 provenance (model, tokenizer, sampling, engine, dates)
#     figures/<config>-output-lengths.png    the length histogram embedded in the card
#
# Shards are always rewritten, not copied, by the package's one Parquet writer (`dataset.parquet`):
# each row group stays under `row_group_bytes` (the viewer reads its first rows from these very
# files and refuses a read of more than 300 MB at once: `ShardLimits`), files end near `shard_bytes`,
# a page index is written for random access, and the preview columns are added: `prompt_preview`
# and `output_preview` right after `output_ids`, the row decoded with its boundaries tagged
# (`view.render.output_preview`), so the viewer, which shows columns in schema order, shows text
# beside the ids. The ids columns are copied as Arrow arrays, never decoded and re-encoded.
# Rewriting the same rows gives the same bytes, so a config that did not change between releases
# is not uploaded again (LFS deduplicates by sha256).
#
# No `.py` file is ever staged: a loading script beside the data makes `load_dataset` fail.

FIGURES_DIR = "figures"
PREVIEW_COLUMNS = ("prompt_preview", "output_preview")
# The previews' default length, in characters of decoded text per column: a screen of text in a cell.
# The viewer's first rows are at most 1 MB of JSON: at least 10 rows, more while they fit; when 10 do
# not, their cells are cut to 100 bytes each, the last rows first (dataset-viewer f62009e
# services/worker/src/worker/config.py `FirstRowsConfig`, libs/libcommon/src/libcommon/viewer_utils/
# truncate_rows.py `create_truncated_row_items`). A long row's ids weigh far more there (about 6 bytes
# of JSON an id) than two previews of this length.
PREVIEW_CHARS = 2000
# The contract column the preview columns follow: the viewer lists a split's columns in schema order
# (dataset-viewer f62009e libs/libcommon/src/libcommon/viewer_utils/features.py `to_features_list`),
# so the text shows beside the ids, after the row's ids (`sample_id`, `source_id`).
PREVIEW_AFTER = "output_ids"
# The columns a row's output preview is made from (its ids and boundaries).
_OUTPUT_REGION_COLUMNS = ("output_ids", "reasoning_start", "think_end", "response_start", "tool_calls", "stop_index")
# Rows read from the built shards at a time; small enough that a batch never dominates a row group.
READ_BATCH_ROWS = 64


# The release tree's size limits (viewer-sized row groups, ~500 MB files): the writer's own.
TreeLimits = ShardLimits


@dataclass
class StagedTree:
    """A staged release: the files under `root` are exactly what will be in the repo."""

    root: Path
    configs: list[str]
    num_rows: dict[str, int]
    features: Features
    files: list[str] = field(default_factory=list)
    # The rows of each config's `validation` split (configs built with --validation only).
    validation_rows: dict[str, int] = field(default_factory=dict)
    # Each config's sizes per split, as the card states them.
    split_bytes: dict[str, dict[str, SplitBytes]] = field(default_factory=dict)

    def size(self, path: str) -> int:
        return (self.root / path).stat().st_size


def features_with_previews(preview_chars: int | None) -> Features:
    """The contract's features, with the two preview string columns after `output_ids` when previews are on."""
    if preview_chars is None:
        return features_with(None)
    return features_with({name: Value("string") for name in PREVIEW_COLUMNS}, after=PREVIEW_AFTER)


def _batches(files: Sequence[Path]) -> Iterator[pa.RecordBatch]:
    for path in files:
        yield from pq.ParquetFile(path).iter_batches(batch_size=READ_BATCH_ROWS)


def _with_previews(batch: pa.RecordBatch, schema: pa.Schema, tokenizer: Any, chars: int | None) -> pa.RecordBatch:
    """`batch` in `schema`'s order: its columns as they are, the preview columns (if any) made from them."""
    previews: dict[str, pa.Array] = {}
    if chars is not None:
        prompts = batch.column("prompt_ids").to_pylist()
        rows = batch.select(list(_OUTPUT_REGION_COLUMNS)).to_pylist()
        previews = {
            "prompt_preview": pa.array([prompt_preview(tokenizer, ids, chars) for ids in prompts], pa.string()),
            "output_preview": pa.array([output_preview(row, tokenizer, chars) for row in rows], pa.string()),
        }
    columns = [previews[name] if name in previews else batch.column(name) for name in schema.names]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def write_config_shards(
    sources: Sequence[Path], target: Path, features: Features, limits: TreeLimits,
    tokenizer: Any = None, preview_chars: int | None = None, split: str = "train",
) -> list[Path]:
    """Rewrite a config's rows of `split` (in order) into viewer-sized shards under `target`."""
    schema = features.arrow_schema
    return write_shards((_with_previews(batch, schema, tokenizer, preview_chars) for batch in _batches(sources)),
                        target, schema, limits, split)


def _public_run_info(info: dict[str, Any]) -> dict[str, Any]:
    """run_info with local paths replaced by their display names, and without the run directory
    (what a later build compares, `check_out_folder`): a local folder layout is private."""
    info = json.loads(json.dumps(info))
    info.pop(RUN_DIR_KEY, None)
    meta, display = info.get("meta", {}), info.get("display", {})
    for key in ("model", "tokenizer"):
        if meta.get(key):
            meta[key] = display.get(key) or display_name(meta[key])
    return info


def stage_tree(
    folder: Path,
    root: Path,
    configs: Sequence[str],
    *,
    repo_id: str,
    version: str,
    limits: TreeLimits = TreeLimits(),
    preview_chars: int | None = None,
    tokenizer_for: Callable[[str], Any] | None = None,
    echo: Callable[[str], None] = print,
) -> StagedTree:
    """Write the release tree of `configs` from `folder` into the empty folder `root`; `preview_chars`:
    the previews' length (`view.render.output_preview`), None for none."""
    from eagle3_synth.dataset.stats import plot_output_lengths

    features = features_with_previews(preview_chars)
    tree = StagedTree(root=root, configs=list(configs), num_rows={}, features=features)
    plots: dict[str, str] = {}
    run_infos: dict[str, dict[str, Any] | None] = {}
    for config in configs:
        tokenizer = tokenizer_for(config) if (preview_chars is not None and tokenizer_for) else None
        shards = write_config_shards(config_files(folder, config), root / config, features, limits, tokenizer,
                                     preview_chars)
        tree.num_rows[config] = parquet_rows(shards)
        tree.split_bytes[config] = {"train": parquet_bytes(shards)}
        held_out = config_files(folder, config, "validation")
        if held_out:  # the same rewrite, so both splits load with load_dataset(..., split=...)
            validation = write_config_shards(held_out, root / config, features, limits, tokenizer, preview_chars,
                                             split="validation")
            tree.validation_rows[config] = parquet_rows(validation)
            tree.split_bytes[config]["validation"] = parquet_bytes(validation)
        run_infos[config] = read_run_info(folder, config)
        if run_infos[config] is not None:
            (root / config / RUN_INFO_FILE).write_text(
                json.dumps(_public_run_info(run_infos[config]), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        (root / FIGURES_DIR).mkdir(exist_ok=True)
        plot = f"{FIGURES_DIR}/{config}-output-lengths.png"
        lengths = [pq.read_table(p, columns=["completion_tokens"]).column(0).to_numpy() for p in shards]
        plot_output_lengths({config: np.concatenate(lengths)}, root / plot)
        plots[config] = plot
        held = (f" (+ {tree.validation_rows[config]} validation rows)" if config in tree.validation_rows else "")
        echo(f"  staged {config}: {tree.num_rows[config]} rows in {len(shards)} shard(s){held}")
    card = render_card(
        list(configs), tree.num_rows, stats=folder_stats(root, configs), run_infos=run_infos,
        repo_id=repo_id, version=version, plots=plots, features=features,
        data_files={c: config_data_files(c, validation=c in tree.validation_rows) for c in configs},
        validation_rows=tree.validation_rows, split_bytes=tree.split_bytes,
    )
    (root / "README.md").write_text(card, encoding="utf-8")
    tree.files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    verify_tree(tree, limits)
    return tree


def verify_tree(tree: StagedTree, limits: TreeLimits) -> None:
    """Check the staged tree as a reader will see it; raise ConfigError on the first class of problem.

    The card's YAML must describe exactly the tree (configs, their data files, row counts, byte
    sizes, features), every Parquet file must fit the viewer's limits with the declared schema, and the
    card must point only at files that are there.
    """
    problems: list[str] = []
    scripts = [f for f in tree.files if f.endswith(".py")]
    if scripts:
        problems.append(f"Python files would be published ({scripts}); a loading script breaks load_dataset")
    card = DatasetCard.load(tree.root / "README.md")
    meta = card.data.to_dict()
    configs = meta.get("configs") or []
    defaults = [c["config_name"] for c in configs if c.get("default")]
    if len(defaults) != 1:
        problems.append(f"the card must mark exactly one config default: true, it marks {defaults}")
    if [c["config_name"] for c in configs] != tree.configs:
        problems.append(f"the card lists configs {[c['config_name'] for c in configs]}, the tree has {tree.configs}")
    infos = meta.get("dataset_info") or []
    infos = {i["config_name"]: i for i in ([infos] if isinstance(infos, dict) else infos)}
    expected_schema = tree.features.arrow_schema.remove_metadata()
    for config in tree.configs:
        entry = next((c for c in configs if c["config_name"] == config), {})
        expected_files = config_data_files(config, validation=config in tree.validation_rows)
        if entry.get("data_files") != expected_files:
            problems.append(f"{config}: card data_files {entry.get('data_files')} != {expected_files}")
        shards = [f for f in tree.files if f.startswith(f"{config}/") and f.endswith(".parquet")]
        patterns = [f["path"] for f in expected_files]
        if not shards or not all(any(fnmatch(f, pattern) for pattern in patterns) for f in shards):
            problems.append(f"{config}: Parquet files {shards} do not match {' or '.join(patterns)}")
        rows = {"train": 0, "validation": 0}
        sizes = {"train": SplitBytes(), "validation": SplitBytes()}
        for name in shards:
            parquet = pq.ParquetFile(tree.root / name)
            split = "validation" if Path(name).name.startswith("validation-") else "train"
            rows[split] += parquet.metadata.num_rows
            sizes[split] += parquet_bytes([tree.root / name])
            if not parquet.schema_arrow.remove_metadata().equals(expected_schema):
                problems.append(f"{name}: schema differs from the card's features")
            for i in range(parquet.metadata.num_row_groups):
                group = parquet.metadata.row_group(i).total_byte_size
                if group > limits.row_group_bytes:
                    problems.append(f"{name}: row group {i} is {group} bytes, over {limits.row_group_bytes}")
        info = infos.get(config, {})
        splits = {s["name"]: s for s in info.get("splits", [])}
        for split, count in rows.items():
            said = splits.get(split, {})
            if said.get("num_examples", 0) != count:
                problems.append(f"{config}: the card says {said.get('num_examples', 0)} {split} rows, "
                                f"the files hold {count}")
            if said.get("num_bytes", 0) != sizes[split].num_bytes:
                problems.append(f"{config}: the card says {split} is {said.get('num_bytes', 0)} bytes, "
                                f"its row groups hold {sizes[split].num_bytes}")
        total = sizes["train"] + sizes["validation"]
        if (info.get("download_size"), info.get("dataset_size")) != (total.files, total.num_bytes):
            problems.append(f"{config}: the card's download_size/dataset_size {info.get('download_size')}/"
                            f"{info.get('dataset_size')} != the files' {total.files}/{total.num_bytes}")
        declared = Features._from_yaml_list(infos.get(config, {}).get("features", []))
        if declared != tree.features:
            problems.append(f"{config}: the card's features differ from the staged columns")
    for image in _image_links(card.text):
        if image not in tree.files:
            problems.append(f"the card embeds {image}, which is not in the tree")
    if problems:
        raise ConfigError(f"the staged tree at {tree.root} is not publishable:\n  " + "\n  ".join(problems))


def _image_links(markdown: str) -> list[str]:
    import re

    return re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", markdown)


def operations_summary(tree: StagedTree, deletions: Sequence[str] = ()) -> list[str]:
    """One line per operation of the commit, as the dry run prints them."""
    lines = [f"add    {path} ({tree.size(path):,} bytes)" for path in tree.files]
    lines += [f"delete {path}" for path in deletions]
    return lines


def clear_stage(root: Path, owned: bool) -> None:
    """Prepare `root` for staging: a folder we own is replaced; a user's must be empty or absent."""
    if root.exists() and any(root.iterdir()):
        if not owned:
            raise ConfigError(f"--stage-dir {root} is not empty; give an empty or new folder")
        shutil.rmtree(root)
    root.mkdir(parents=True, exist_ok=True)


# Contract checks a folder must pass before any of it is published.
#
# A release is permanent (tags are never overwritten), so nothing that breaks the data contract may
# reach the Hub: every Parquet file must have exactly the contract's schema, and every row must pass
# `eagle3-synth validate` (prompt re-templated from its messages, boundaries recomputed from
# `output_ids`, stop tokens, counts, every id in the model's vocabulary, no output over the run's
# max_new_tokens, unique sample ids) with the tokenizer the data was made with.
# The row checks are `validate.validate_rows`, not a second implementation.

CONTRACT_SCHEMA = FEATURES.arrow_schema.remove_metadata()


def config_provenance(folder: Path, config: str) -> Provenance:
    """What made the config: its run_info.json (written by `build`), else its run directory's run.json."""
    path = run_info_path(folder, config)
    return provenance_from_run_file(path) if path else Provenance(origin=f"nothing recorded for {config}")


def schema_problems(folder: Path, config: str) -> list[str]:
    """Every shard's Arrow schema (both splits) must be the contract's, field for field (types included)."""
    problems = []
    for path in [p for split in SPLITS for p in config_files(folder, config, split)]:
        schema = pq.read_schema(path).remove_metadata()
        if not schema.equals(CONTRACT_SCHEMA):
            got = {f.name: str(f.type) for f in schema}
            want = {f.name: str(f.type) for f in CONTRACT_SCHEMA}
            diffs = [f"{name}: has {got.get(name, 'nothing')}, contract {want.get(name, 'nothing')}"
                     for name in dict.fromkeys([*want, *got]) if got.get(name) != want.get(name)]
            problems.append(f"{config}: {path.name} does not have the contract's schema ({'; '.join(diffs)})")
    return problems


class Tokenizers:
    """Each tokenizer loaded once, however many configs share it."""

    def __init__(self, override: str | None, trust_remote_code: bool):
        self.override = override
        self.trust_remote_code = trust_remote_code
        self._loaded: dict[str, Any] = {}

    def get(self, provenance: Provenance) -> Any:
        key = self.override or provenance.tokenizer or ""
        if key not in self._loaded:
            self._loaded[key] = data_tokenizer(provenance, self.override, trust_remote_code=self.trust_remote_code)[0]
        return self._loaded[key]


def check_folder(
    folder: Path, configs: Sequence[str], tokenizers: Tokenizers, echo: Callable[[str], None] = print
) -> None:
    """Raise ConfigError listing every violation when any config fails; say what passed otherwise."""
    problems: list[str] = []
    for config in configs:
        found = schema_problems(folder, config)
        if found:  # rows of the wrong shape cannot be checked further
            problems += found
            continue
        provenance = config_provenance(folder, config)
        tokenizer = tokenizers.get(provenance)
        validator = RowValidator(tokenizer, data_markers(tokenizer, provenance), provenance.template_kwargs,
                                 vocab=data_vocabulary(provenance, tokenizer), max_new_tokens=provenance.max_new_tokens)
        for split in [s for s in SPLITS if config_files(folder, config, s)]:
            source = FolderSource(str(folder))
            source.split = split
            name = config if split == "train" else f"{config} ({split})"
            report = validate_rows(source.iter_rows(config), validator, name)
            if report.ok:
                echo(f"  {report.lines()[0]}")
            else:
                problems += report.lines()
    if problems:
        raise ConfigError(
            f"refusing to publish {folder}: it breaks the data contract\n  " + "\n  ".join(problems)
            + f"\n(see `eagle3-synth validate {folder}`; rebuild the affected configs before publishing)"
        )


# The Hub side of a release: one atomic commit of the staged tree, then the tag.
#
# Why this shape:
# - `HfApi.create_commit` with every operation makes the new tree visible all at once or not at all:
#   files are uploaded first (LFS/Xet), and only the final commit call changes the branch. A failure
#   before it leaves `main` and the tags exactly as they were.
# - `parent_commit` is the head we planned against, so a concurrent push fails the commit instead of
#   being silently mixed into this release.
# - Files of the previous release that are not in the new tree are deleted in the same commit (a
#   stale `train-00001-of-00002.parquet` would otherwise still match the config's glob).
# - The tag is created on that commit only; an existing tag is never moved or overwritten.
#
# The token is left to `huggingface_hub` (`HF_TOKEN` or `hf auth login`) and never printed.

REPO_TYPE = "dataset"
KEEP = (".gitattributes",)  # repo housekeeping the Hub creates; never deleted by a release


class PublishError(Eagle3SynthError):
    """The Hub refused or failed a step; the message says what state the repo was left in."""


@dataclass(frozen=True)
class Released:
    commit: str
    tag: str
    added: int
    deleted: list[str]


def _tag_target(api: HfApi, repo_id: str, tag: str) -> tuple[str | None, str | None]:
    """(commit the tag points at or None, head of main or None)."""
    refs = api.list_repo_refs(repo_id, repo_type=REPO_TYPE)
    tagged = next((t.target_commit for t in refs.tags if t.name == tag), None)
    head = next((b.target_commit for b in refs.branches if b.name == "main"), None)
    return tagged, head


def check_tag_is_free(api: HfApi, repo_id: str, tag: str) -> None:
    """Refuse a taken tag before the long local steps; `release` checks again just before uploading."""
    try:
        tagged, _ = _tag_target(api, repo_id, tag)
    except RepositoryNotFoundError:
        return  # a new repo: every tag is free
    except HfHubHTTPError as exc:
        raise PublishError(f"could not read the tags of {repo_id}: {_describe(exc)}") from exc
    refuse_existing_tag(repo_id, tag, tagged)


def _describe(exc: BaseException) -> str:
    """The error and its cause in one line (huggingface_hub wraps LFS failures in RuntimeError)."""
    parts = [f"{type(exc).__name__}: {exc}"]
    if exc.__cause__ is not None:
        parts.append(f"caused by {type(exc.__cause__).__name__}: {exc.__cause__}")
    return " ".join(" ".join(parts).split())


def refuse_existing_tag(repo_id: str, tag: str, tagged: str | None) -> None:
    if tagged is not None:
        raise ConfigError(
            f"{repo_id} already has tag {tag} (commit {tagged[:12]}); a release is never overwritten. "
            "Publish under a new tag, e.g. the next version"
        )


def release(
    api: HfApi, tree: StagedTree, repo_id: str, tag: str, *, private: bool, echo: Callable[[str], None] = print
) -> Released:
    """Create the repo if needed, commit the staged tree to main in one commit, tag that commit."""
    try:
        api.create_repo(repo_id, repo_type=REPO_TYPE, private=private, exist_ok=True)
        tagged, head = _tag_target(api, repo_id, tag)
        refuse_existing_tag(repo_id, tag, tagged)
        remote = [
            entry.path for entry in api.list_repo_tree(repo_id, repo_type=REPO_TYPE, revision=head, recursive=True)
            if isinstance(entry, RepoFile)
        ] if head else []
    except HfHubHTTPError as exc:
        raise PublishError(f"could not prepare the release in {repo_id}: {_describe(exc)}. Nothing was uploaded") from exc

    stale = sorted(p for p in remote if p not in tree.files and p not in KEEP)
    operations: list[CommitOperationAdd | CommitOperationDelete] = [
        CommitOperationAdd(path_in_repo=path, path_or_fileobj=str(tree.root / path)) for path in tree.files
    ]
    operations += [CommitOperationDelete(path_in_repo=path) for path in stale]
    echo(f"uploading {len(tree.files)} files to {repo_id} (deleting {len(stale)} stale ones) in one commit ...")
    try:
        commit = api.create_commit(
            repo_id, operations, repo_type=REPO_TYPE, revision="main", parent_commit=head,
            commit_message=f"Release {tag}",
            commit_description=f"eagle3-synth release {tag}: configs {', '.join(tree.configs)}",
        )
    except Exception as exc:  # whatever failed (HTTP, network, a file), main did not move
        raise PublishError(
            f"the upload to {repo_id} failed: {_describe(exc)}. No commit was made and tag {tag} was not created; "
            "run the same command again (files already uploaded are not sent twice)"
        ) from exc
    echo(f"committed {commit.oid} to main")
    try:
        api.create_tag(repo_id, tag=tag, revision=commit.oid, repo_type=REPO_TYPE, tag_message=f"Release {tag}")
    except HfHubHTTPError as exc:
        raise PublishError(
            f"commit {commit.oid} is on main of {repo_id}, but creating tag {tag} failed: {_describe(exc)}. Run the same "
            "command again: the unchanged tree makes no new commit, and the tag is created on it"
        ) from exc
    echo(f"tagged {commit.oid[:12]} as {tag}")
    return Released(commit=commit.oid, tag=tag, added=len(tree.files), deleted=stale)


__all__ = ["PREVIEW_CHARS", "PREVIEW_COLUMNS", "PublishError", "PublishOptions", "PublishResult", "TreeLimits",
           "publish"]

# Git ref names the Hub accepts as tags, kept simple: v1.0.0, 2024-06-01, release_3 ...
TAG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class PublishOptions:
    folder: Path
    repo_id: str
    tag: str
    private: bool = False
    dry_run: bool = False
    # The length of the `prompt_preview`/`output_preview` columns (each row decoded, its boundaries
    # tagged: `publish.tree`), in characters of decoded text; None: no preview columns.
    preview_chars: int | None = PREVIEW_CHARS
    # The tokenizer the data was made with, if not the one its run_info records.
    tokenizer: str | None = None
    trust_remote_code: bool = False
    # Where the tree is staged; default: DIR/.publish/<tag> for a dry run (kept), a temp folder
    # inside DIR otherwise (removed).
    stage_dir: Path | None = None
    limits: TreeLimits = field(default_factory=TreeLimits)
    # Hub endpoint; None: huggingface_hub's (HF_ENDPOINT, else huggingface.co).
    endpoint: str | None = None
    # None: huggingface_hub finds it (HF_TOKEN, else `hf auth login`). Never printed.
    token: str | None = None

    def __post_init__(self) -> None:
        if not REPO_ID.match(self.repo_id):
            raise ConfigError(f"repo id {self.repo_id!r}: expected NAMESPACE/NAME, e.g. org/eagle3-synth")
        if not TAG.match(self.tag):
            raise ConfigError(f"--tag {self.tag!r}: use letters, digits, '.', '_' or '-', e.g. v1.0.0")
        if self.preview_chars is not None:
            check_range("preview_chars", self.preview_chars)
        if not Path(self.folder).is_dir():
            raise ConfigError(f"{self.folder}: no such folder")


@dataclass(frozen=True)
class PublishResult:
    tree: StagedTree
    operations: list[str]
    released: Released | None  # None for a dry run


def _stage_root(options: PublishOptions) -> tuple[Path, bool, bool]:
    """(staging folder, whether we own its contents, whether to remove it afterwards)."""
    if options.stage_dir is not None:
        return Path(options.stage_dir), False, False
    if options.dry_run:
        return Path(options.folder) / PUBLISH_STAGING / options.tag, True, False
    return Path(tempfile.mkdtemp(prefix=f"{PUBLISH_STAGING}-", dir=options.folder)), True, True


def _api(options: PublishOptions):
    from huggingface_hub import HfApi, get_token

    if options.token is None and get_token() is None:
        raise ConfigError("no Hugging Face token: set HF_TOKEN or run `hf auth login` (a write token)")
    return HfApi(endpoint=options.endpoint, token=options.token)


def publish(options: PublishOptions, echo: Callable[[str], None] = print) -> PublishResult:
    """Check, stage and (unless a dry run) release the folder; see the module docstring."""
    folder = Path(options.folder)
    configs = built_configs(folder)
    if not configs:
        raise ConfigError(f"{folder} holds no built configs (<config>/train-*.parquet); run `eagle3-synth build` first")
    api = None
    if not options.dry_run:  # fail on a missing token or a taken tag before the long steps
        api = _api(options)
        check_tag_is_free(api, options.repo_id, options.tag)
    tokenizers = Tokenizers(options.tokenizer, options.trust_remote_code)
    echo(f"checking {len(configs)} config(s) of {folder} against the data contract ...")
    check_folder(folder, configs, tokenizers, echo)

    root, owned, remove = _stage_root(options)
    clear_stage(root, owned)
    try:
        echo(f"staging the release tree in {root} ...")
        tree = stage_tree(
            folder, root, configs, repo_id=options.repo_id, version=options.tag, limits=options.limits,
            preview_chars=options.preview_chars,
            tokenizer_for=lambda config: tokenizers.get(config_provenance(folder, config)),
            echo=echo,
        )
        total = sum(tree.size(p) for p in tree.files)
        echo(f"tree checked: {len(tree.files)} files, {total:,} bytes")
        if options.dry_run:
            operations = operations_summary(tree)
            echo(f"dry run: one commit to {options.repo_id} (main) would")
            for line in operations:
                echo(f"  {line}")
            echo("  delete every other file now in the repo (except .gitattributes)")
            echo(f"then tag it {options.tag}. Nothing was uploaded; the tree is in {root}")
            return PublishResult(tree=tree, operations=operations, released=None)
        released = release(api, tree, options.repo_id, options.tag, private=options.private, echo=echo)
        operations = operations_summary(tree, released.deleted)
        example = DEFAULT_CONFIG if DEFAULT_CONFIG in configs else configs[0]
        echo(f'load it: load_dataset("{options.repo_id}", "{example}", revision="{options.tag}")')
        return PublishResult(tree=tree, operations=operations, released=released)
    finally:
        if remove:
            shutil.rmtree(root, ignore_errors=True)
