"""`eagle3-synth publish DIR org/name --tag v1.0.0`: release a built folder on the Hub.

Checks every config against the data contract (with the tokenizer the data was made with), writes
the exact repo tree to a staging folder (viewer-sized Parquet shards with each row decoded beside
its ids, README.md card with figures and provenance, a length histogram per config), uploads it as
one commit to main and tags it.
An existing tag is never overwritten. Authenticate with HF_TOKEN or `hf auth login`.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from eagle3_synth.prompts.configs import load_config_file
from eagle3_synth.publish import PREVIEW_CHARS, PublishOptions, publish


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("publish", help="release a built folder on the Hub as a tagged version",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", metavar="DIR", help="built dataset folder (DIR/CONFIG/train-*.parquet)")
    parser.add_argument("repo_id", metavar="REPO", help="Hub dataset repo, NAMESPACE/NAME (created if missing)")
    parser.add_argument("--tag", required=True, help="version tag of this release, e.g. v1.0.0 (never overwritten)")
    parser.add_argument("--private", action="store_true", help="create the repo private (an existing repo keeps its visibility)")
    parser.add_argument("--dry-run", action="store_true",
                        help="stage and check the exact tree, print the operations, upload nothing")
    previews = parser.add_mutually_exclusive_group()
    previews.add_argument("--preview-chars", type=int, default=PREVIEW_CHARS, metavar="N",
                          help="length of the prompt_preview/output_preview columns the viewer shows beside the "
                               "ids (each row decoded, special tokens kept, boundaries tagged), in characters "
                               f"(default: {PREVIEW_CHARS})")
    previews.add_argument("--no-preview", action="store_true", help="publish without the preview columns")
    parser.add_argument("--tokenizer", help="tokenizer the data was made with (default: the one recorded in run_info)")
    parser.add_argument("--trust-remote-code", action="store_true", help="allow the tokenizer's own code (Kimi)")
    parser.add_argument("--config-file", metavar="YAML",
                        help="the --config-file your own configs were built with (for their source and license)")
    parser.add_argument("--stage-dir", type=Path, help="empty folder to stage the tree in "
                        "(default: DIR/.publish/TAG for --dry-run, else a temporary folder)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    # One INFO line per HTTP request would bury the summary (URLs only; the token is never logged).
    logging.getLogger("httpx2").setLevel(logging.WARNING)
    if args.config_file:
        load_config_file(args.config_file)
    publish(PublishOptions(
        folder=Path(args.folder), repo_id=args.repo_id, tag=args.tag, private=args.private, dry_run=args.dry_run,
        preview_chars=None if args.no_preview else args.preview_chars, tokenizer=args.tokenizer,
        trust_remote_code=args.trust_remote_code, stage_dir=args.stage_dir,
    ))
    return 0
