"""The Hub side of a release: one atomic commit of the staged tree, then the tag.

Why this shape:
- `HfApi.create_commit` with every operation makes the new tree visible all at once or not at all:
  files are uploaded first (LFS/Xet), and only the final commit call changes the branch. A failure
  before it leaves `main` and the tags exactly as they were.
- `parent_commit` is the head we planned against, so a concurrent push fails the commit instead of
  being silently mixed into this release.
- Files of the previous release that are not in the new tree are deleted in the same commit (a
  stale `train-00001-of-00002.parquet` would otherwise still match the config's glob).
- The tag is created on that commit only; an existing tag is never moved or overwritten.

The token is left to `huggingface_hub` (`HF_TOKEN` or `hf auth login`) and never printed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi
from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError
from huggingface_hub.hf_api import RepoFile

from eagle3_synth.errors import ConfigError, Eagle3SynthError
from eagle3_synth.publish.tree import StagedTree

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
