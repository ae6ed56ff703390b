"""Arguments shared by the commands that read a dataset (`inspect`, `stats`, `validate`, `export`).

DIR is a built folder, a run directory (or `OUT/.runs`) or a published repo id; see
`eagle3_synth.rows`. The tokenizer is the one recorded with the data unless `--tokenizer` is given.
"""

from __future__ import annotations

import argparse
from typing import Any

from eagle3_synth.contract.profiles import PROFILES, MarkerIds
from eagle3_synth.dataset.stores import Provenance, RowSource, data_markers, data_tokenizer, open_source, resolve_configs
from eagle3_synth.cli.options import parse_key_value


def add_source_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", metavar="DIR",
                        help="built dataset folder, run directory (or OUT/.runs), or a repo id org/name")
    parser.add_argument("--revision", help="repo id only: a tag, branch or commit (e.g. v1.0.0)")
    parser.add_argument("--split", choices=("train", "validation"), default="train",
                        help="which split to read: train (default), or validation (a build with --validation)")


def add_tokenizer_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("tokenizer (default: the one recorded with the data)")
    group.add_argument("--tokenizer", help="tokenizer folder the data was made with")
    group.add_argument("--profile", metavar="NAME",
                       help=f"marker profile: auto, {', '.join(PROFILES)} (default: the recorded one, else auto)")
    group.add_argument("--trust-remote-code", action="store_true", help="allow the tokenizer's own code (Kimi)")


def open_from_args(args: argparse.Namespace) -> RowSource:
    return open_source(args.source, revision=args.revision, split=args.split)


def open_config(args: argparse.Namespace) -> tuple[RowSource, str]:
    """The source and its one config named by `args.config` (checked to exist)."""
    source = open_from_args(args)
    return source, resolve_configs(source, [args.config])[0]


class TokenizerCache:
    """Loads each tokenizer once, however many configs share it."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self._loaded: dict[str, Any] = {}

    def get(self, provenance: Provenance) -> tuple[Any, MarkerIds]:
        path = self.args.tokenizer or provenance.tokenizer or ""
        if path not in self._loaded:
            self._loaded[path] = data_tokenizer(provenance, self.args.tokenizer,
                                                trust_remote_code=self.args.trust_remote_code)[0]
        tokenizer = self._loaded[path]
        return tokenizer, data_markers(tokenizer, provenance, self.args.profile)


def kwarg_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The --template-kwarg values given (over what the data records)."""
    return dict(parse_key_value(item, "--template-kwarg") for item in getattr(args, "template_kwarg", []) or [])


def template_kwargs(args: argparse.Namespace, provenance: Provenance) -> dict[str, Any]:
    """The recorded template kwargs, overridden by any --template-kwarg."""
    return {**provenance.template_kwargs, **kwarg_overrides(args)}
