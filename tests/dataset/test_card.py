"""The dataset card: its YAML describes exactly the tree, its figures are the data's, it parses back.

The card is checked on a staged release tree (what `publish --dry-run` writes) and on the README
that `build` writes into a folder, with figures recomputed here independently of eagle3_synth.stats.
"""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from datasets import Features, load_dataset
from huggingface_hub import DatasetCard

from eagle3_synth.dataset import card as dataset_card
from eagle3_synth.dataset.card import card_data, hub_license, render_card, size_category
from eagle3_synth.errors import ConfigError
from eagle3_synth.publish import PREVIEW_CHARS, PublishOptions, TreeLimits, publish, features_with_previews, verify_tree
from eagle3_synth.contract.row import COLUMNS, FEATURES

from ..support.built_datasets import KIMI_CONFIG as B1
from ..support.built_datasets import QWEN_CONFIG as B3
from ..support.built_datasets import checks_dataset
from ..conftest import KIMI_TOKENIZER

REPO = "org/eagle3-synth"


@pytest.fixture(scope="module")
def folder(tmp_path_factory, kimi_tokenizer, qwen_tokenizer):
    """The shared fixture folder (B1 made with the Kimi tokenizer, B3 with Qwen3); read only."""
    return checks_dataset(tmp_path_factory, kimi_tokenizer, qwen_tokenizer)


@pytest.fixture(scope="module")
def staged(folder, tmp_path_factory):
    """The release tree of the folder, as `publish --dry-run` stages it."""
    stage = tmp_path_factory.mktemp("card") / "stage"
    result = publish(PublishOptions(folder=folder, repo_id=REPO, tag="v1.0.0", dry_run=True, stage_dir=stage),
                     echo=lambda line: None)
    return result.tree.root, result.tree.files


def split_sizes(files: list[Path]) -> tuple[int, int]:
    """(the row groups' uncompressed bytes, the files' bytes), read here from the files themselves."""
    groups = [pq.ParquetFile(f).metadata.row_group(i) for f in files for i in range(pq.ParquetFile(f).num_row_groups)]
    return sum(group.total_byte_size for group in groups), sum(len(Path(f).read_bytes()) for f in files)


def tree_rows(root: Path, config: str) -> dict[str, np.ndarray]:
    files = sorted((root / config).glob("train-*.parquet"))
    table = pq.read_table(files[0]) if len(files) == 1 else None
    if table is None:
        import pyarrow as pa

        table = pa.concat_tables([pq.read_table(f) for f in files])
    return {name: table.column(name).to_pylist() for name in table.column_names}


def nearest_rank(values: list[int], q: float) -> int:
    ordered = sorted(values)
    return ordered[max(0, int(np.ceil(q * len(ordered))) - 1)]


def test_card_parses_back_and_its_yaml_matches_the_tree(staged):
    root, files = staged
    card = DatasetCard.load(root / "README.md")
    meta = card.data.to_dict()
    parquet = [f for f in files if f.endswith(".parquet")]
    configs = {c["config_name"]: c for c in meta["configs"]}
    assert sorted(configs) == [B1, B3]
    assert [name for name, c in configs.items() if c.get("default")] == [B1]
    for name, entry in configs.items():
        [data_files] = entry["data_files"]
        assert data_files["split"] == "train"
        matched = [f for f in parquet if fnmatch.fnmatch(f, data_files["path"])]
        assert matched == [f for f in parquet if f.startswith(f"{name}/")] and matched
    infos = {i["config_name"]: i for i in meta["dataset_info"]}
    assert sorted(infos) == [B1, B3]
    for name, info in infos.items():
        assert Features._from_yaml_list(info["features"]) == features_with_previews(PREVIEW_CHARS)
        files = [root / f for f in parquet if f.startswith(f"{name}/")]
        rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
        num_bytes, download = split_sizes(files)
        assert num_bytes > 0 and download > 0
        assert info["splits"] == [{"name": "train", "num_bytes": num_bytes, "num_examples": rows}]
        assert (info["download_size"], info["dataset_size"]) == (download, num_bytes)
    assert meta["license"] == ["apache-2.0", "mit"]  # B1 is apache-2.0, B3 is mit
    assert meta["size_categories"] == ["n<1K"]
    assert meta["pretty_name"] == "eagle3-synth"
    assert "speculative-decoding" in meta["tags"]
    assert "{{" not in card.text


def test_card_figures_are_the_datas(staged):
    root, _ = staged
    text = (root / "README.md").read_text()
    for config in (B1, B3):
        rows = tree_rows(root, config)
        n = len(rows["sample_id"])
        output = rows["completion_tokens"]
        quantiles = "/".join(str(nearest_rank(output, q)) for q in (0, 0.5, 0.9, 0.99, 1.0))
        truncated = sum(f == "length" for f in rows["finish_reason"]) / n
        lowered = sum(f == "length" and c < json.loads(s)["max_new_tokens"]
                      for f, c, s in zip(rows["finish_reason"], output, rows["sampling"])) / n
        no_close = sum(t == -1 for t in rows["think_end"]) / n
        tools = sum(bool(c) for c in rows["tool_calls"]) / n
        line = next(l for l in text.splitlines() if l.startswith(f"| {config} |"))
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[1] == str(n)
        assert cells[3] == quantiles
        assert cells[5:9] == [f"{100 * truncated:.1f}%", f"{100 * lowered:.1f}%", f"{100 * no_close:.1f}%",
                              f"{100 * tools:.1f}%"]
        assert f"| `{config}` | {n} |" in text  # the configs table
    assert "| no &lt;/think> |" in text  # a raw </think> header would be read as an HTML tag and vanish


def test_card_says_how_the_data_was_generated(staged, folder):
    root, _ = staged
    text = (root / "README.md").read_text()
    run = json.loads((folder / ".runs" / B1 / "run.json").read_text())
    line = next(l for l in text.splitlines() if l.startswith(f"| `{B1}` | {KIMI_TOKENIZER.name} "))
    assert "| replay |" in line and "| kimi_k2 |" in line
    assert '"temperature": 0.6' in line and '"max_new_tokens": 10240' in line
    # Generated: from the first session's start (journal headers), one session here.
    journals = sorted((folder / ".runs" / B1 / "journal").glob("*.jsonl"))
    started = min(json.loads(path.open().readline())["started"] for path in journals)
    assert f"| {started} → " in line and "(1 session(s)) |" in line
    assert '"eagle3-synth": "0.1.0"' in line
    assert any(l.startswith(f"| `{B3}` | qwen3 | qwen3 | qwen3 |") for l in text.splitlines())
    # The provenance travels with the data, without local paths.
    published = json.loads((root / B1 / "run_info.json").read_text())
    assert published["fingerprint"] == run["fingerprint"]
    assert published["meta"]["tokenizer"] == KIMI_TOKENIZER.name
    assert str(KIMI_TOKENIZER) not in (root / B1 / "run_info.json").read_text()


def test_card_embeds_a_length_plot_per_config_and_shows_how_to_train(staged):
    root, files = staged
    card = DatasetCard.load(root / "README.md")
    for config in (B1, B3):
        image = f"figures/{config}-output-lengths.png"
        assert f"]({image})" in card.text and image in files
        assert (root / image).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert 'load_dataset("org/eagle3-synth", "B1_glaive", split="train", revision="v1.0.0")' in card.text
    assert "input_ids = row[\"prompt_ids\"] + row[\"output_ids\"]" in card.text
    assert "loss_mask = [0] * len(row[\"prompt_ids\"]) + [1] * len(row[\"output_ids\"])" in card.text


def test_built_folder_readme_is_a_card_that_loads(folder):
    card = DatasetCard.load(folder / "README.md")
    assert [c["config_name"] for c in card.data.to_dict()["configs"]] == [B1, B3]
    assert "unreleased (local build)" in card.text
    assert load_dataset(str(folder), B3, split="train").features == FEATURES
    # The build's own Parquet, no preview columns, its sizes true.
    for info in card.data.to_dict()["dataset_info"]:
        files = sorted((folder / info["config_name"]).glob("train-*.parquet"))
        assert pq.read_schema(files[0]).names == list(COLUMNS)
        num_bytes, download = split_sizes(files)
        assert info["splits"][0]["num_bytes"] == num_bytes == info["dataset_size"] > 0
        assert info["download_size"] == download


def test_the_staged_tree_loads_with_its_previews(staged, folder):
    root, _ = staged
    loaded = load_dataset(str(root), B3, split="train")
    assert loaded.features == features_with_previews(PREVIEW_CHARS)
    built = load_dataset(str(folder), B3, split="train")
    assert loaded.remove_columns(["prompt_preview", "output_preview"]).to_list() == built.to_list()


def test_size_categories_count_every_split():
    data = card_data([B1, B3], {B1: 600, B3: 300}, validation_rows={B1: 150}).to_dict()
    assert data["size_categories"] == ["1K<n<10K"]  # 1,050 rows: 900 train, 150 validation


def test_a_card_whose_sizes_are_not_the_files_is_refused(folder, tmp_path):
    result = publish(PublishOptions(folder=folder, repo_id=REPO, tag="v1.0.0", dry_run=True, preview_chars=None,
                                    stage_dir=tmp_path / "stage"), echo=lambda line: None)
    readme = result.tree.root / "README.md"
    text = readme.read_text(encoding="utf-8")
    info = next(i for i in DatasetCard(text).data.to_dict()["dataset_info"] if i["config_name"] == B3)
    num_bytes = info["splits"][0]["num_bytes"]
    readme.write_text(text.replace(f"num_bytes: {num_bytes}\n", f"num_bytes: {num_bytes + 1}\n", 1), encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"{B3}: the card says train is {num_bytes + 1} bytes, "
                                          rf"its row groups hold {num_bytes}"):
        verify_tree(result.tree, TreeLimits())


def test_a_placeholder_nothing_fills_is_an_error(folder, tmp_path, monkeypatch):
    template = tmp_path / "card.md"
    template.write_text("# card\n\n{{ configs_table }}\n\n{{ not_a_figure }}\n")
    monkeypatch.setattr(dataset_card, "CARD_TEMPLATE", template)
    with pytest.raises(ValueError, match="not_a_figure"):
        render_card([B1], {B1: 6}, stats=[], run_infos={}, repo_id=REPO)


def test_licenses_and_sizes_use_hub_vocabulary():
    assert hub_license("apache-2.0") == "apache-2.0"
    assert hub_license("cc-by-4.0") == "cc-by-4.0"
    assert hub_license("unspecified (mixed upstream sources)") == "unknown"
    assert [size_category(n) for n in (0, 999, 1_000, 88_000, 100_000, 2_000_000)] == [
        "n<1K", "n<1K", "1K<n<10K", "10K<n<100K", "100K<n<1M", "1M<n<10M"]


def test_a_config_from_a_users_config_file_gets_an_unknown_license():
    text = render_card(["MY_support_chats"], {"MY_support_chats": 3}, stats=[], run_infos={}, repo_id=REPO)
    card = DatasetCard(text)
    assert card.data.to_dict()["license"] == "unknown"
    assert "| `MY_support_chats` | 3 | - | - | unknown |" in card.text
    assert "| `MY_support_chats` | not recorded |" in card.text


def test_a_run_info_without_display_names_shows_the_model_folder_by_name(tmp_path):
    # Run info written before the `display` block existed: the card names the folders itself.
    from eagle3_synth.dataset.card import _generation_table

    model = tmp_path / "Qwen3-8B"
    model.mkdir()
    table = _generation_table(["B1_glaive"], {"B1_glaive": {"meta": {"model": str(model), "tokenizer": "org/tok"}}})
    assert "| `B1_glaive` | Qwen3-8B | org/tok |" in table
