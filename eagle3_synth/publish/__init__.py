"""Publish a built folder to the Hub as a versioned release: checked, staged, one commit, one tag.

    result = publish(PublishOptions(folder=Path("out"), repo_id="org/eagle3-synth", tag="v1.0.0"))

Steps, each a module of this package: `checks` (refuse a folder that breaks the data contract),
`tree` (write the exact repo tree -- viewer-sized shards, card, plots, provenance -- to a staging
folder and check it), `hub` (one atomic `create_commit`, then `create_tag`). `dry_run` stops after
the tree is staged and checked, prints the operations, and never contacts the Hub.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from eagle3_synth.dataset.card import DEFAULT_CONFIG
from eagle3_synth.dataset.folder import PUBLISH_STAGING, built_configs
from eagle3_synth.dataset.stores import REPO_ID
from eagle3_synth.contract.ranges import check_range
from eagle3_synth.errors import ConfigError
from eagle3_synth.publish.checks import Tokenizers, check_folder, config_provenance
from eagle3_synth.publish.hub import PublishError, Released, check_tag_is_free, release
from eagle3_synth.publish.tree import (
    PREVIEW_CHARS,
    PREVIEW_COLUMNS,
    StagedTree,
    TreeLimits,
    clear_stage,
    operations_summary,
    stage_tree,
)

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
