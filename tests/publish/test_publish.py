"""Publishing round-trips through the real huggingface_hub and datasets against a loopback Hub.

The server (tests/support/hub_server.py) speaks the Hub's HTTP API; the publisher uses the real
`HfApi`, and `load_dataset(repo, config, revision=...)` runs in a subprocess whose HF_ENDPOINT
points at the server (both libraries read it at import time).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from huggingface_hub import DatasetCard

from eagle3_synth.contract.row import COLUMNS
from eagle3_synth.errors import ConfigError
from eagle3_synth.publish import (PREVIEW_CHARS, PREVIEW_COLUMNS, PublishError, PublishOptions, TreeLimits, publish,
                                  features_with_previews)
from eagle3_synth.view import output_preview, prompt_preview

from ..support.built_datasets import KIMI_CONFIG as B1
from ..support.built_datasets import QWEN_CONFIG as B3
from ..support.built_datasets import (
    build,
    checks_dataset,
    copy_dataset,
    kimi_outputs,
    rewrite_rows,
    write_prompts,
)
from ..conftest import KIMI_TOKENIZER
from ..support.hub_server import HubServer

TOKEN = "hf_loopbackSecretToken0123456789"
REPO = "org/eagle3-synth"
# Small enough that B1 needs several shards (the defaults give one).
SMALL = TreeLimits(row_group_bytes=20_000, shard_bytes=1)


@pytest.fixture(scope="module")
def hub():
    with pytest.MonkeyPatch.context() as patch:
        from huggingface_hub import constants

        # conftest makes tests offline; this module talks to its own loopback server only.
        patch.setattr(constants, "HF_HUB_OFFLINE", False)
        # The server speaks LFS only; with hf_xet installed the client uploads over Xet unless this is set
        # (huggingface_hub 2.5.0 _commit_api.py `_upload_files`, utils/_runtime.py `is_xet_available`).
        patch.setattr(constants, "HF_HUB_DISABLE_XET", True)
        with HubServer(token=TOKEN) as server:
            yield server


@pytest.fixture(scope="module")
def folders(tmp_path_factory, kimi_tokenizer, qwen_tokenizer):
    """v1: the shared fixture folder (B1 Kimi, B3 Qwen3). v2: B1 generated again with other
    outputs (a change); B3 untouched. Copies: publishing stages inside the folder."""
    shared = checks_dataset(tmp_path_factory, kimi_tokenizer, qwen_tokenizer)
    root = tmp_path_factory.mktemp("publish")
    v1, v2 = copy_dataset(shared, root / "v1"), copy_dataset(shared, root / "v2")
    shutil.rmtree(v2 / ".runs" / B1)
    build(v2, B1, KIMI_TOKENIZER, kimi_outputs(kimi_tokenizer, 24, seed=7), shared.parent / "kimi-prompts.jsonl")
    return v1, v2


def folder_rows(folder: Path, config: str, split: str = "train") -> list[dict]:
    """A config's rows of `split` as stored in the folder, in file order."""
    return [row for f in sorted((folder / config).glob(f"{split}-*.parquet")) for row in pq.read_table(f).to_pylist()]


def options(folder: Path, hub: HubServer, tag: str, **kwargs) -> PublishOptions:
    return PublishOptions(folder=folder, repo_id=kwargs.pop("repo_id", REPO), tag=tag, endpoint=hub.url,
                          token=TOKEN, **kwargs)


def run_cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "eagle3_synth.cli", *args], env=env, capture_output=True,
                          text=True, timeout=300, check=False)


def client_env(hub: HubServer, tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "HF_ENDPOINT": hub.url, "HF_TOKEN": TOKEN, "HF_HUB_OFFLINE": "0",
            "HF_DATASETS_OFFLINE": "0", "HF_HUB_DISABLE_XET": "1", "HF_HOME": str(tmp_path / "hf_home")}


@pytest.fixture(scope="module")
def releases(hub, folders, tmp_path_factory):
    """v1.0.0 through the library API, v1.1.0 through the CLI in a subprocess (as a user runs it)."""
    v1, v2 = folders
    first = publish(options(v1, hub, "v1.0.0"), echo=lambda line: None)
    cli = run_cli(["publish", str(v2), REPO, "--tag", "v1.1.0"], client_env(hub, tmp_path_factory.mktemp("cli")))
    assert cli.returncode == 0, cli.stderr
    repo = hub.repo(REPO)
    return first, cli, repo


def load_rows(hub: HubServer, tmp_path: Path, loads: list[tuple[str, str | None]], repo: str = REPO,
              split: str = "train") -> dict[str, list[dict]]:
    """`load_dataset(repo, config, split=split, revision=...)` in a fresh process; rows per "config@revision"."""
    code = (
        "import json, sys\n"
        "from datasets import load_dataset\n"
        "out = {}\n"
        "for config, revision in json.loads(sys.argv[1]):\n"
        f"    ds = load_dataset({repo!r}, config, split={split!r}, revision=revision)\n"
        "    out[f'{config}@{revision}'] = {'rows': ds.to_list(), 'features': str(ds.features)}\n"
        "print(json.dumps(out))\n"
    )
    result = subprocess.run([sys.executable, "-c", code, json.dumps(loads)], env=client_env(hub, tmp_path),
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def contract_rows(rows: list[dict]) -> list[dict]:
    """The rows without the preview columns publish adds."""
    return [{name: row[name] for name in COLUMNS} for row in rows]


def test_each_version_loads_back_with_its_own_rows(hub, folders, releases, tmp_path):
    v1, v2 = folders
    loaded = load_rows(hub, tmp_path, [(B1, "v1.0.0"), (B3, "v1.0.0"), (B1, "v1.1.0"), (B3, "v1.1.0"), (B1, None)])
    assert contract_rows(loaded["B1_glaive@v1.0.0"]["rows"]) == folder_rows(v1, B1)
    assert contract_rows(loaded["B3_ultrachat@v1.0.0"]["rows"]) == folder_rows(v1, B3)
    assert contract_rows(loaded["B1_glaive@v1.1.0"]["rows"]) == folder_rows(v2, B1)
    assert contract_rows(loaded["B3_ultrachat@v1.1.0"]["rows"]) == folder_rows(v2, B3)
    assert folder_rows(v1, B1) != folder_rows(v2, B1)  # the change is real
    assert contract_rows(loaded["B1_glaive@None"]["rows"]) == folder_rows(v2, B1)  # main is the latest release
    assert "List(Value('int32'))" in loaded["B1_glaive@v1.1.0"]["features"]
    # The previews load with the rows, in the column order of the files.
    rows = loaded["B1_glaive@v1.1.0"]["rows"]
    assert list(rows[0]) == list(features_with_previews(PREVIEW_CHARS))
    assert any(f"[think_end {row['think_end']}]</think>" in row["output_preview"] for row in rows)


def test_each_release_is_one_commit_with_its_tag(releases):
    first, _, repo = releases
    v1_commit, v2_commit = repo.tags["v1.0.0"], repo.tags["v1.1.0"]
    assert first.released.commit == v1_commit
    assert repo.branches["main"] == v2_commit
    assert repo.commits[v2_commit].parent == v1_commit  # nothing in between
    assert repo.commits[repo.commits[v1_commit].parent].parent is None  # v1 directly on the initial commit
    v2_tree = repo.commits[v2_commit].tree
    assert not [p for p in v2_tree if p.endswith(".py")]
    assert {"README.md", ".gitattributes", f"figures/{B1}-output-lengths.png", f"{B3}/run_info.json"} <= set(v2_tree)


def test_files_of_the_previous_release_that_are_gone_are_deleted(hub, folders):
    """v1 in several shards, then in one: the old shards must go (the glob would still match them)."""
    v1, _ = folders
    repo_id = "org/reshard"
    publish(options(v1, hub, "v1", repo_id=repo_id, limits=SMALL), echo=lambda line: None)
    publish(options(v1, hub, "v2", repo_id=repo_id), echo=lambda line: None)
    repo = hub.repo(repo_id)
    before = sorted(p for p in repo.commits[repo.tags["v1"]].tree if p.startswith(f"{B1}/train-"))
    after = sorted(p for p in repo.commits[repo.tags["v2"]].tree if p.startswith(f"{B1}/train-"))
    assert len(before) > 1 and before[-1].endswith(f"-of-{len(before):05d}.parquet")
    assert after == [f"{B1}/train-00000-of-00001.parquet"]


def test_unchanged_config_is_byte_identical_across_releases(releases):
    _, _, repo = releases
    v1_tree, v2_tree = repo.commits[repo.tags["v1.0.0"]].tree, repo.commits[repo.tags["v1.1.0"]].tree
    shard = f"{B3}/train-00000-of-00001.parquet"
    assert v1_tree[shard].sha256 == v2_tree[shard].sha256  # LFS deduplicates it: nothing re-uploaded


def test_cli_output_never_contains_the_token(hub, releases):
    _, cli, _ = releases
    assert TOKEN not in cli.stdout + cli.stderr
    assert "tagged" in cli.stdout and "v1.1.0" in cli.stdout
    # ... while every write request did carry it.
    writes = [r for r in hub.state.requests if r.route in ("create_repo", "preupload", "commit", "tag")]
    assert writes and all(r.authorized for r in writes)


def test_an_existing_tag_is_never_overwritten(hub, folders, releases):
    _, v2 = folders
    repo = hub.repo(REPO)
    before = (dict(repo.tags), dict(repo.branches))
    seen = hub.request_count()
    with pytest.raises(ConfigError, match="already has tag v1.0.0"):
        publish(options(v2, hub, "v1.0.0"), echo=lambda line: None)
    assert (repo.tags, repo.branches) == before
    assert not {"preupload", "lfs_batch", "lfs_put", "commit", "tag"} & set(hub.routes(seen))


@pytest.mark.parametrize("route", ["lfs_put", "commit"])
def test_a_failure_mid_upload_leaves_no_commit_and_no_tag(hub, folders, route):
    v1, _ = folders
    repo_id = f"org/failing-{route.replace('_', '-')}"
    hub.fail_next(route, status=403)
    with pytest.raises(PublishError, match="No commit was made"):
        publish(options(v1, hub, "v1.0.0", repo_id=repo_id), echo=lambda line: None)
    repo = hub.repo(repo_id)
    assert len(repo.commits) == 1 and not repo.tags  # only the initial commit of the new repo
    assert route in hub.routes()
    # Running the same command again completes the release.
    publish(options(v1, hub, "v1.0.0", repo_id=repo_id), echo=lambda line: None)
    assert repo.tags["v1.0.0"] == repo.branches["main"]


def test_a_folder_that_breaks_the_contract_is_refused(folders, tmp_path):
    bad = copy_dataset(folders[0], tmp_path / "bad")

    def shift_think_end(row: dict) -> None:
        if row["sample_id"] == 0:
            row["think_end"] += 1

    rewrite_rows(bad, B1, shift_think_end)
    with pytest.raises(ConfigError, match=r"(?s)refusing to publish.*B1_glaive.*think_end.*sample ids: 0\b"):
        publish(PublishOptions(folder=bad, repo_id=REPO, tag="v1.0.0", dry_run=True), echo=lambda line: None)
    assert not (bad / ".publish").exists()


def test_a_folder_with_ids_outside_the_vocabulary_is_refused(folders, tmp_path):
    bad = copy_dataset(folders[0], tmp_path / "bad")

    def plant(row: dict) -> None:
        if row["sample_id"] in (3, 5):  # inside the reasoning text: no boundary moves
            row["output_ids"][1] = 5_000_000 if row["sample_id"] == 3 else -7

    rewrite_rows(bad, B1, plant)
    with pytest.raises(ConfigError, match=r"(?s)refusing to publish.*B1_glaive.*id_out_of_range: 2 rows.*"
                                          r"sample ids: 3, 5\b.*output_ids\[1\] = 5000000 is outside 0 <= id < 2048"):
        publish(PublishOptions(folder=bad, repo_id=REPO, tag="v1.0.0", dry_run=True), echo=lambda line: None)


def test_a_shard_with_the_wrong_types_is_refused(folders, tmp_path):
    bad = copy_dataset(folders[0], tmp_path / "bad")
    shard = next((bad / B3).glob("train-*.parquet"))
    table = pq.read_table(shard)
    index = table.schema.get_field_index("stop_index")
    pq.write_table(table.set_column(index, "stop_index", table.column("stop_index").cast(pa.int64())), shard)
    with pytest.raises(ConfigError, match="stop_index: has int64, contract int32"):
        publish(PublishOptions(folder=bad, repo_id=REPO, tag="v1.0.0", dry_run=True), echo=lambda line: None)


def test_dry_run_stages_and_checks_the_tree_and_contacts_nothing(hub, folders, capsys):
    v1, _ = folders
    seen = hub.request_count()
    result = publish(PublishOptions(folder=v1, repo_id="org/never-created", tag="v2.0.0", dry_run=True,
                                    endpoint=hub.url))
    out = capsys.readouterr().out
    assert hub.request_count() == seen
    root = v1 / ".publish" / "v2.0.0"
    staged = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert staged == result.tree.files
    for path in staged:
        assert f"add    {path} (" in out
    assert "then tag it v2.0.0. Nothing was uploaded" in out
    assert result.released is None


def test_preview_columns_and_viewer_sized_shards(folders, tmp_path, kimi_tokenizer, qwen_tokenizer):
    """By default each row is decoded beside its ids, boundaries tagged, the ids left as they were."""
    v1, _ = folders
    limits = TreeLimits(row_group_bytes=20_000, shard_bytes=1)  # every row group its own shard
    result = publish(PublishOptions(folder=v1, repo_id=REPO, tag="v1.0.0", dry_run=True,
                                    stage_dir=tmp_path / "stage", limits=limits), echo=lambda line: None)
    at = COLUMNS.index("output_ids") + 1
    assert list(result.tree.features) == [*COLUMNS[:at], *PREVIEW_COLUMNS, *COLUMNS[at:]]
    # Each config is decoded with the tokenizer it was made with (Kimi for B1, Qwen3 for B3).
    for config, tokenizer in ((B1, kimi_tokenizer), (B3, qwen_tokenizer)):
        shards = sorted((tmp_path / "stage" / config).glob("train-*.parquet"))
        for shard in shards:
            metadata = pq.ParquetFile(shard).metadata
            assert all(metadata.row_group(i).total_byte_size <= limits.row_group_bytes
                       for i in range(metadata.num_row_groups))
            assert pq.read_schema(shard).names == list(result.tree.features)
        staged = pa.concat_tables(pq.read_table(shard) for shard in shards)
        built = pa.concat_tables(pq.read_table(f) for f in sorted((v1 / config).glob("train-*.parquet")))
        for name in COLUMNS:  # the same rows, same order, the ids untouched
            assert staged.column(name).equals(built.column(name).cast(staged.schema.field(name).type)), name
        for row in staged.to_pylist():
            assert row["prompt_preview"] == prompt_preview(tokenizer, row["prompt_ids"], PREVIEW_CHARS)
            assert row["output_preview"] == output_preview(row, tokenizer, PREVIEW_CHARS)
            if row["think_end"] >= 0:  # the close marker, tagged at its position, special token kept
                assert f"[think_end {row['think_end']}]</think>[/think_end]" in row["output_preview"]
            if row["stop_index"] >= 0:
                assert f"[stop {row['stop_index']}]" in row["output_preview"]
    assert len(list((tmp_path / "stage" / B1).glob("train-*.parquet"))) > 1


def test_previews_are_on_by_default_and_no_preview_leaves_them_out(releases, folders, tmp_path):
    _, _, repo = releases
    v2_tree = repo.commits[repo.tags["v1.1.0"]].tree  # published by the CLI with its defaults
    data = v2_tree[f"{B1}/train-00000-of-00001.parquet"].data
    assert pq.read_schema(pa.BufferReader(data)).names == list(features_with_previews(PREVIEW_CHARS))
    stage = tmp_path / "stage"
    done = run_cli(["publish", str(folders[1]), REPO, "--tag", "v9", "--dry-run", "--no-preview",
                    "--stage-dir", str(stage)], dict(os.environ))
    assert done.returncode == 0, done.stderr
    for config in (B1, B3):
        [shard] = (stage / config).glob("train-*.parquet")
        assert pq.read_schema(shard).names == list(COLUMNS)
    card = (stage / "README.md").read_text(encoding="utf-8")
    assert "prompt_preview" not in card and "| `sampling` |" in card


@pytest.mark.parametrize("args, message", [
    (["--no-preview", "--preview-chars", "300"], "argument --preview-chars: not allowed with argument --no-preview"),
    (["--preview-chars", "0"], "--preview-chars must be >= 1, got 0"),
])
def test_preview_options_that_contradict_are_refused(folders, tmp_path, args, message):
    done = run_cli(["publish", str(folders[0]), REPO, "--tag", "v9", "--dry-run", "--stage-dir", str(tmp_path / "s"),
                    *args], dict(os.environ))
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert not (tmp_path / "s").exists()


def test_a_missing_token_is_a_clear_error(folders, monkeypatch, tmp_path):
    from huggingface_hub import constants

    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(tmp_path / "no-tokens"))
    with pytest.raises(ConfigError, match=r"HF_TOKEN or run `hf auth login`"):
        publish(PublishOptions(folder=folders[0], repo_id=REPO, tag="v9"), echo=lambda line: None)


@pytest.mark.parametrize("repo_id, tag, message", [
    ("eagle3-synth", "v1", "expected NAMESPACE/NAME"),
    ("org/eagle3-synth", "v1 final", "--tag 'v1 final'"),
])
def test_bad_repo_or_tag_is_refused(repo_id, tag, message, tmp_path):
    with pytest.raises(ConfigError, match=message):
        PublishOptions(folder=tmp_path, repo_id=repo_id, tag=tag)



@pytest.mark.slow  # over 3.5 s of CPU: near the fast tier's 5 s on a slower machine
def test_a_validation_split_is_published_and_loads_as_its_own_split(hub, tmp_path, kimi_tokenizer):
    """A build with --validation: both splits reach the Hub, checked, and load back as they are."""
    write_prompts(tmp_path / "prompts.jsonl", 24)
    folder = tmp_path / "ds"
    build(folder, B1, KIMI_TOKENIZER, kimi_outputs(kimi_tokenizer, 24), tmp_path / "prompts.jsonl",
          extra=["--validation", "6"])
    lines: list[str] = []
    result = publish(options(folder, hub, "v1.0.0", repo_id="org/held-out", limits=SMALL), echo=lines.append)
    assert result.tree.validation_rows == {B1: 6} and result.tree.num_rows == {B1: 18}
    assert any(f"{B1} (validation): 6 rows" in line for line in lines), lines  # its rows were checked too
    tree = hub.repo("org/held-out").commits[hub.repo("org/held-out").tags["v1.0.0"]].tree
    staged = [f for f in tree if f.endswith(".parquet")]
    assert any(f.startswith(f"{B1}/validation-") for f in staged) and any(f.startswith(f"{B1}/train-") for f in staged)
    for split in ("train", "validation"):
        loaded = load_rows(hub, tmp_path / split, [(B1, "v1.0.0")], repo="org/held-out", split=split)
        assert contract_rows(loaded[f"{B1}@v1.0.0"]["rows"]) == folder_rows(folder, B1, split)
    # The published card's sizes are each split's files'.
    info = DatasetCard(tree["README.md"].data.decode()).data.to_dict()["dataset_info"]  # one config: a mapping
    sizes = {}
    for split in ("train", "validation"):
        files = [pq.ParquetFile(pa.BufferReader(tree[f].data)) for f in staged if f.startswith(f"{B1}/{split}-")]
        sizes[split] = (sum(f.metadata.row_group(i).total_byte_size for f in files for i in range(f.num_row_groups)),
                        sum(len(tree[f].data) for f in staged if f.startswith(f"{B1}/{split}-")))
    assert info["splits"] == [{"name": "train", "num_bytes": sizes["train"][0], "num_examples": 18},
                              {"name": "validation", "num_bytes": sizes["validation"][0], "num_examples": 6}]
    assert info["dataset_size"] == sizes["train"][0] + sizes["validation"][0]
    assert info["download_size"] == sizes["train"][1] + sizes["validation"][1]
    card = (folder / "README.md").read_text(encoding="utf-8")
    assert f"| `{B1}` | 18 (+ 6 validation) |" in card and 'a `validation` split\n(`split="validation"`)' in card
    held_out = {r["conversation_id"] for r in folder_rows(folder, B1, "validation")}
    assert held_out and not held_out & {r["conversation_id"] for r in folder_rows(folder, B1)}


def test_a_bad_validation_row_stops_the_release(tmp_path, kimi_tokenizer):
    """The contract check covers the held-out split: a planted bad id there is refused, named."""
    write_prompts(tmp_path / "prompts.jsonl", 24)
    folder = tmp_path / "ds"
    build(folder, B1, KIMI_TOKENIZER, kimi_outputs(kimi_tokenizer, 24), tmp_path / "prompts.jsonl",
          extra=["--validation", "6"])
    for path in sorted((folder / B1).glob("validation-*.parquet")):
        rows = pq.read_table(path).to_pylist()
        rows[0]["output_ids"] = [*rows[0]["output_ids"][:-1], 10_000_000]
        pq.write_table(pa.Table.from_pylist(rows, schema=pq.read_schema(path)), path)
    with pytest.raises(ConfigError, match=rf"refusing to publish .*\n  {B1} \(validation\):"):
        publish(PublishOptions(folder=folder, repo_id=REPO, tag="v9", dry_run=True, stage_dir=tmp_path / "stage"),
                echo=lambda line: None)
