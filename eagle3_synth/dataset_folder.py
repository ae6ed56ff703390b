"""The Hub-layout dataset folder: `<config>/train-*.parquet` plus README.md listing every config.

The same folder loads locally with `load_dataset(folder, config)` and is what gets published, so
the README front matter (`configs`, `dataset_info`) is kept in step with the Parquet files here.
"""

from __future__ import annotations

import glob
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from datasets import DatasetInfo
from datasets.info import DatasetInfosDict
from datasets.utils.metadata import MetadataConfigs
from huggingface_hub import DatasetCard, DatasetCardData

from .records import FEATURES

CARD_TEMPLATE = Path(__file__).resolve().parent.parent / "dataset_card.md"
DEFAULT_CONFIG = "B1_glaive"


def config_data_files(config: str) -> list[dict[str, str]]:
    return [{"split": "train", "path": f"{config}/train-*.parquet"}]


def built_configs(folder: Path) -> list[str]:
    """Configs with Parquet files in the folder, sorted (B1 before B2 ...)."""
    return sorted(p.parent.name for p in folder.glob("*/train-*.parquet") if not p.parent.name.startswith("."))


def install_parquet_files(sources: list[str], folder: Path, config: str) -> list[Path]:
    """Move freshly written Parquet shards into `<folder>/<config>/` as `train-XXXXX-of-YYYYY`.

    The new files are staged beside the old ones and swapped in with renames, so an interrupted
    build never leaves a config half old, half new.
    """
    target = folder / config
    staging = Path(tempfile.mkdtemp(prefix=f".{config}-", dir=folder))
    staging.chmod(0o755)  # mkdtemp makes it private; the published folder should not be
    total = len(sources)
    installed = []
    for i, source in enumerate(sorted(sources)):
        dest = staging / f"train-{i:05d}-of-{total:05d}.parquet"
        shutil.move(source, dest)
        installed.append(target / dest.name)
    old = None
    if target.exists():
        old = folder / f".{config}-old"
        if old.exists():
            shutil.rmtree(old)
        target.rename(old)
    staging.rename(target)
    if old is not None:
        shutil.rmtree(old)
    return installed


def card_data(folder: Path, num_rows: dict[str, int]) -> DatasetCardData:
    """YAML front matter for every config in the folder."""
    configs = built_configs(folder)
    default = DEFAULT_CONFIG if DEFAULT_CONFIG in configs else (configs[0] if configs else None)
    data = DatasetCardData(pretty_name="eagle3-synth", tags=["eagle3", "speculative-decoding", "synthetic"])
    MetadataConfigs(
        {
            name: {"data_files": config_data_files(name), **({"default": True} if name == default else {})}
            for name in configs
        }
    ).to_dataset_card_data(data)
    infos = DatasetInfosDict()
    for name in configs:
        info = DatasetInfo(features=FEATURES, config_name=name)
        if name in num_rows:
            from datasets.splits import SplitDict, SplitInfo

            splits = SplitDict()
            splits.add(SplitInfo(name="train", num_examples=num_rows[name]))
            info.splits = splits
        infos[name] = info
    infos.to_dataset_card_data(data)
    return data


def _existing_rows(folder: Path) -> dict[str, int]:
    """Row counts of configs already described in README.md (kept when another config is added)."""
    readme = folder / "README.md"
    if not readme.exists():
        return {}
    card = DatasetCard.load(readme)
    rows: dict[str, int] = {}
    infos = card.data.to_dict().get("dataset_info") or []
    for info in [infos] if isinstance(infos, dict) else infos:  # one config: a mapping, not a list
        for split in info.get("splits", []) or []:
            if split.get("name") == "train":
                rows[info.get("config_name", "default")] = split.get("num_examples", 0)
    return rows


def write_readme(folder: Path, num_rows: dict[str, int], context: dict[str, Any] | None = None) -> Path:
    """(Re)write README.md: front matter for every built config, body from dataset_card.md."""
    rows = {**_existing_rows(folder), **num_rows}
    data = card_data(folder, rows)
    template = CARD_TEMPLATE.read_text(encoding="utf-8") if CARD_TEMPLATE.exists() else "# eagle3-synth\n"
    configs = built_configs(folder)
    table = "\n".join(f"| `{name}` | {rows.get(name, '?')} |" for name in configs)
    body = template.replace("{{ configs_table }}", "| config | samples |\n|---|---|\n" + table)
    for key, value in (context or {}).items():
        body = body.replace("{{ " + key + " }}", str(value))
    card = DatasetCard(f"---\n{data.to_yaml()}\n---\n\n{body}")
    path = folder / "README.md"
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text(str(card), encoding="utf-8")
    os.replace(tmp, path)
    return path


def assemble_config(run_dir: str, folder: str | Path, config: str) -> tuple[int, list[Path]]:
    """Write a config's rows from its run directory into the folder; return (rows, files)."""
    from builders import Eagle3Synth

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".assemble-", dir=folder) as tmp:
        builder = Eagle3Synth(config_name=config, run_dir=str(run_dir), cache_dir=os.path.join(tmp, "cache"))
        output_dir = os.path.join(tmp, "out")
        builder.download_and_prepare(output_dir=output_dir, file_format="parquet")
        sources = glob.glob(os.path.join(output_dir, "*-train*.parquet"))
        num_rows = builder.info.splits["train"].num_examples
        files = install_parquet_files(sources, folder, config)
    write_readme(folder, {config: num_rows})
    return num_rows, files
