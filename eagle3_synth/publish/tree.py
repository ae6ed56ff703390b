"""The exact repo tree of a release, written to a local staging folder and checked there.

Layout (what `load_dataset(repo, config)` and the Hub's viewer read):

    README.md                              card: front matter (configs, dataset_info) + figures
    <config>/train-XXXXX-of-YYYYY.parquet  the rows, rewritten for the viewer (see below)
    <config>/validation-XXXXX-of-YYYYY.parquet  the held-out rows of a build with --validation
    <config>/run_info.json                 provenance (model, tokenizer, sampling, engine, dates)
    figures/<config>-output-lengths.png    the length histogram embedded in the card

Shards are always rewritten, not copied, by the package's one Parquet writer (`dataset.parquet`):
each row group stays under `row_group_bytes` (the viewer reads its first rows from these very
files and refuses a read of more than 300 MB at once: `ShardLimits`), files end near `shard_bytes`,
a page index is written for random access, and the preview columns are added: `prompt_preview`
and `output_preview` right after `output_ids`, the row decoded with its boundaries tagged
(`view.render.output_preview`), so the viewer, which shows columns in schema order, shows text
beside the ids. The ids columns are copied as Arrow arrays, never decoded and re-encoded.
Rewriting the same rows gives the same bytes, so a config that did not change between releases
is not uploaded again (LFS deduplicates by sha256).

No `.py` file is ever staged: a loading script beside the data makes `load_dataset` fail.
"""

from __future__ import annotations

import json
import shutil
from fnmatch import fnmatch
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from datasets import Features, Value
from huggingface_hub import DatasetCard

from eagle3_synth.dataset.folder import (
    RUN_DIR_KEY,
    RUN_INFO_FILE,
    config_files,
    display_name,
    folder_stats,
    read_run_info,
)
from eagle3_synth.dataset.card import config_data_files, render_card
from eagle3_synth.dataset.parquet import (
    ShardLimits,
    SplitBytes,
    features_with,
    parquet_bytes,
    parquet_rows,
    write_shards,
)
from eagle3_synth.errors import ConfigError
from eagle3_synth.view.render import output_preview, prompt_preview

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
