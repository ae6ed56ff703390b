"""The dataset card (README.md): front matter that `load_dataset` and the Hub read, and the body.

The front matter (`configs` with their `data_files`, `dataset_info` with features and split sizes)
is rendered from the Parquet files actually there (by `folder.write_readme` for a local folder, by
`publish.tree` for a release). The body is `dataset_card.md` (package data beside this module)
with every placeholder filled: counts, length quantiles, shares, provenance of every config.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from datasets import DatasetInfo, Features
from datasets.info import DatasetInfosDict
from datasets.splits import SplitDict, SplitInfo
from datasets.utils.metadata import MetadataConfigs
from huggingface_hub import DatasetCardData

from eagle3_synth.contract.row import COLUMNS, FEATURES, column_table
from eagle3_synth.dataset.parquet import SplitBytes

CARD_TEMPLATE = resources.files("eagle3_synth.dataset") / "dataset_card.md"
DEFAULT_CONFIG = "B1_glaive"
PRETTY_NAME = "eagle3-synth"
TAGS = ["eagle3", "speculative-decoding", "synthetic", "reasoning", "tool-calling"]
_LICENSE_ID = re.compile(r"^[a-z0-9][a-z0-9.\-]*$")
_PLACEHOLDER = re.compile(r"\{\{ (\w+) \}\}")
_HTML_TAG_START = re.compile(r"<(?=[/A-Za-z])")
# The first line after the front matter of every card rendered here: how a folder's README.md is
# known to be ours (`dataset.folder.is_our_card`), so a build rewrites it and nobody else's. An HTML
# comment: the Hub page does not show it.
CARD_MARKER = "<!-- eagle3-synth dataset card: rendered from the files beside it; every build rewrites it -->"


def config_data_files(config: str, fingerprint: str | None = None, validation: bool = False) -> list[dict[str, str]]:
    """The card's `data_files` of a config: its shards (of one build if `fingerprint`), `validation`'s too if asked."""
    splits = ("train", "validation") if validation else ("train",)
    return [{"split": split, "path": f"{config}/{split}-{fingerprint + '-' if fingerprint else ''}*.parquet"}
            for split in splits]


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
    split_bytes: Mapping[str, Mapping[str, SplitBytes]] | None = None,
) -> DatasetCardData:
    """YAML front matter: one `configs` entry per config (one `default: true`) and its `dataset_info`.

    `data_files` per config defaults to all its shards (`config_data_files`); `validation_rows`:
    the rows of each config built with a `validation` split; `split_bytes`: each config's sizes per
    split (`parquet.parquet_bytes` of its files).

    Sizes are the Hub dataset viewer's, so the card and the viewer's own `dataset_info` agree: a
    split's `num_bytes` is its Parquet data uncompressed, `download_size` the files' bytes,
    `dataset_size` the splits' `num_bytes` summed (dataset-viewer f62009e
    services/worker/src/worker/job_runners/config/parquet_and_info.py `fill_builder_info`). datasets
    5.2 means the same by them: `num_bytes` the Arrow data written (arrow_writer.py
    `ArrowWriter.write_table`), `dataset_size` its sum over the splits (builder.py
    `download_and_prepare`), `download_size` the files it downloads; it checks only `num_examples`
    (utils/info_utils.py `verify_splits`)."""
    run_infos, data_files, validation_rows = run_infos or {}, data_files or {}, validation_rows or {}
    split_bytes = split_bytes or {}
    default = DEFAULT_CONFIG if DEFAULT_CONFIG in configs else (configs[0] if configs else None)
    facts = {c: config_facts(c, run_infos.get(c)) for c in configs}
    licenses = sorted({hub_license(str(f.get("license", ""))) if f else "unknown"
                       for f in facts.values()}) or ["unknown"]
    data = DatasetCardData(
        pretty_name=PRETTY_NAME,
        license=licenses[0] if len(licenses) == 1 else licenses,
        tags=list(TAGS),
        task_categories=["text-generation"],
        size_categories=[size_category(sum(num_rows.get(c, 0) + validation_rows.get(c, 0) for c in configs))],
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
        sizes = split_bytes.get(name, {})
        rows = {"train": num_rows.get(name, 0)}
        if name in validation_rows:  # a build with --validation
            rows["validation"] = validation_rows[name]
        splits = SplitDict()
        for split, count in rows.items():
            splits.add(SplitInfo(name=split, num_examples=count, num_bytes=sizes.get(split, SplitBytes()).num_bytes))
        total = sum((sizes.get(split, SplitBytes()) for split in rows), SplitBytes())
        infos[name] = DatasetInfo(features=features, config_name=name, splits=splits,
                                  download_size=total.files, dataset_size=total.num_bytes)
    infos.to_dataset_card_data(data)
    return data


# -- card body ---------------------------------------------------------------------------------------
SPLITS_NOTE = """
`samples` counts the `train` split. A config with `(+ N validation)` also has a `validation` split
(`split="validation"`): whole source conversations, every rollout and turn, held out from `train`
by a seeded draw (`--validation`) and generated by the same target. The figures describe `train`.
"""


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


def display_name(location: str | None) -> str | None:
    """A model/tokenizer as people should read it: a local folder by its name, a Hub id as is."""
    if not location:
        return location
    return Path(location).name if Path(location).is_dir() else location


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
    split_bytes: Mapping[str, Mapping[str, SplitBytes]] | None = None,
) -> str:
    """README.md text: front matter for `configs`, body from dataset_card.md with every figure filled.

    `stats` are `stats.ConfigStats` in config order; `plots` maps a config to its PNG path in the
    repo; `data_files` (per config), `validation_rows` and `split_bytes` as in `card_data`. A
    placeholder the template names but nothing fills is an error, so template and code cannot drift
    apart silently.
    """
    from eagle3_synth.dataset.stats import format_stats_table

    data = card_data(configs, num_rows, features, run_infos=run_infos, data_files=data_files,
                     validation_rows=validation_rows, split_bytes=split_bytes)
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
        "splits_note": SPLITS_NOTE if validation_rows else "",
        # A header such as "no </think>" would be read as an HTML tag and vanish from the page.
        "stats_table": _HTML_TAG_START.sub("&lt;", format_stats_table(list(stats), markdown=True)),
        "generation_table": _generation_table(configs, run_infos),
        "figures": _figures(plots or {}),
        "columns_table": _columns_table(features),
    }
    missing = sorted(set(_PLACEHOLDER.findall(template)) - set(values))
    if missing:
        raise ValueError(f"{CARD_TEMPLATE} names placeholders nothing fills: {missing}")
    body = _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), template)
    return f"---\n{data.to_yaml()}\n---\n\n{CARD_MARKER}\n\n{body}"


# What the preview columns (`publish.tree.PREVIEW_COLUMNS`) hold, for the card's column table.
PREVIEW_MEANINGS = {
    "prompt_preview": "for reading in the viewer only: `prompt_ids` decoded, special tokens kept; a long prompt "
                      "shows its first and last tokens around `⟨… N tokens …⟩`. Never train on it",
    "output_preview": "for reading in the viewer only: `output_ids` decoded, special tokens kept, each region tagged "
                      "with its positions in `output_ids` (`[reasoning 0:812]…[/reasoning]`, `[think_end 812]`, "
                      "`[response …]`, `[tool_call 1 …]`, `[stop …]`); a long region shows its first and last "
                      "tokens around `⟨… N tokens …⟩`. Never train on it",
}


def _columns_table(features: Features) -> str:
    """The column table in `features`' order: the contract's rows, and a row per preview column."""
    header, rule, *lines = column_table().rstrip("\n").split("\n")
    rows = dict(zip(COLUMNS, lines))
    for name in features:
        if name not in rows:
            rows[name] = f"| `{name}` | `string` | {PREVIEW_MEANINGS[name]} |"
    return "\n".join([header, rule, *(rows[name] for name in features)])
