"""Arguments shared by the commands that generate (`build`, `generate` for shards, `launch`).

Made from the fields of the run configuration (`run.settings`: one argument group per concern, each
option's help, default and reading in its field's metadata); `generation_settings` turns the parsed
arguments into `GenerationSettings`, which build the run spec (the builder's config is the same class).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

from eagle3_synth import exit_status
from eagle3_synth.cli import EXIT_RESUMABLE
from eagle3_synth.engines import option_name
from eagle3_synth.run.directory import run_dir_under, RUN_FILE, RUNS_DIR
from eagle3_synth.run.progress import RunSummary
from eagle3_synth.run.staging import DryRun
from eagle3_synth.run.settings import CONCERNS, GenerationSettings, parse_key_value
from eagle3_synth.errors import ConfigError
from eagle3_synth.contract.profiles import PROFILES, MarkerIds
from eagle3_synth.dataset.stores import (Provenance, RowSource, data_markers, data_tokenizer, open_source,
                                         resolve_configs)

# Files a command writes: never over an existing file unless asked, never inside a dataset folder.
#
# `export --out`, `vocab --out/--json`, `validate --report` and `stats --plot` write where the user
# points them. A typo (`--out demo_out/README.md`, `--out b1.jsonl` where last week's export lives)
# must not destroy anything, so an existing file is refused unless `--overwrite` is given, and no
# command ever writes over a file inside a dataset folder (a folder with a dataset card `README.md`
# and config folders, or a run directory's `.runs/`): its files belong to `build`, which replaces
# them atomically itself. The check runs before any work starts, so a refused command has done
# nothing.


def add_overwrite_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--overwrite", action="store_true",
                        help="replace output files that already exist (never files inside a dataset folder)")


def dataset_folder_holding(path: Path) -> Path | None:
    """The dataset folder (or run directory) that `path` lies in, if any.

    A dataset folder is what `build --out` writes: README.md beside `.runs/` or beside a config
    folder holding run_info.json; a run directory holds run.json."""
    for folder in path.resolve().parents:
        if (folder / RUN_FILE).is_file():
            return folder
        if (folder / "README.md").is_file() and ((folder / RUNS_DIR).is_dir()
                                                 or any(folder.glob("*/run_info.json"))):
            return folder
    return None


def check_outputs(paths: Iterable[str | Path], option: str, overwrite: bool) -> None:
    """Refuse, naming the option and the file, to write over an existing file (unless `overwrite`)
    or over anything inside a dataset folder; a path that is a folder is refused too."""
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            raise ConfigError(f"{option} {raw}: is a folder; give a file path")
        if not path.exists() and not path.is_symlink():
            continue
        inside = dataset_folder_holding(path)
        if inside is not None:
            raise ConfigError(f"{option} {raw}: exists inside the dataset folder {inside}, whose files only "
                              "`build` writes; write elsewhere")
        if not overwrite:
            raise ConfigError(f"{option} {raw}: exists; pass --overwrite to replace it, or write elsewhere")


# Arguments shared by the commands that read a dataset (`inspect`, `stats`, `validate`, `export`).
#
# DIR is a built folder, a run directory (or `OUT/.runs`) or a published repo id; see
# `eagle3_synth.rows`. The tokenizer is the one recorded with the data unless `--tokenizer` is given.


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


__all__ = ["parse_key_value"]  # the one KEY=VALUE reader, for every command's repeatable KEY=VALUE options

# How an option of each field type reads its value (other types: as the string given).
_TYPES = {"int": int, "int | None": int, "float": float, "float | None": float}


def add_generation_arguments(parser: argparse.ArgumentParser, *, sharded: bool = False) -> None:
    """The options of every generating command, one per field of `run.settings.CONCERNS`; `sharded`
    adds --num-shards/--shard-index and makes --run-dir required (a shard has no --out to put it under)."""
    parser.add_argument("config", metavar="CONFIG", help="config name, e.g. B1_glaive")
    for title, concern in CONCERNS:
        group = parser.add_argument_group(title)
        exclusive = None
        for f in fields(concern):
            read = dict(f.metadata.get("option", {}))
            if not read or (read.pop("sharded", False) and not sharded):  # a field of the builder's only
                continue
            for key in ("fingerprint", "parse", "name"):  # not argparse's
                read.pop(key, None)
            names = [option_name(f), *read.pop("aliases", ())]
            if f.type == "bool":
                read["action"] = "store_true"
            elif "type" not in read and "action" not in read and f.type in _TYPES:
                read["type"] = _TYPES[f.type]
            if read.get("action") == "append":
                read["default"] = []
            elif "action" not in read:
                read["default"] = f.default if f.default is not MISSING else None
            if f.name == "run_dir":
                read["required"] = sharded
                read["help"] += "" if sharded else "; default: OUT/.runs/CONFIG"
            if read.pop("exclusive", False):
                exclusive = exclusive or group.add_mutually_exclusive_group()
                exclusive.add_argument(*names, dest=f.name, **read)
            else:
                group.add_argument(*names, dest=f.name, **read)
    group.add_argument(  # the last group: run
        "--dry-run", action="store_true", help="check everything and prepare the prompts, then print what the run "
        "would generate (prompts kept, rejects by reason, turns, the engine) and stop: no engine starts, nothing is "
        "written")


EXIT_FAILED_SAMPLES = exit_status.FAILED_SAMPLES


def report_generation(summary: RunSummary) -> int:
    """Print the end-of-run summary; the exit status says whether the run is complete (work left:
    75, or 130 after Ctrl-C), and clean (1: failed samples)."""
    for line in summary.lines():
        print(line)
    if summary.remaining:
        return stopped_status(summary)
    return EXIT_FAILED_SAMPLES if summary.errors or summary.failed_before else 0


def stopped_status(summary: RunSummary) -> int:
    """The status of a run that stopped with work left: Ctrl-C's own (130), else resumable (75:
    --max-hours, SIGTERM, what schedulers requeue on). Either way the same command continues."""
    return exit_status.INTERRUPTED if summary.stopped == "interrupted" else EXIT_RESUMABLE


def report_dry_run(report: DryRun) -> int:
    """Print what a run would generate (`--dry-run`)."""
    for line in report.lines():
        print(line)
    return 0


def default_run_dir(args: argparse.Namespace) -> str:
    """`--run-dir`, else the one default: OUT/.runs/CONFIG."""
    return args.run_dir or run_dir_under(args.out, args.config)


def generation_settings(args: argparse.Namespace, run_dir: str | None,
                        kind: type[GenerationSettings] = GenerationSettings, **more: object) -> GenerationSettings:
    """The generating options as the settings the library takes, or as `kind` with `more` (`build`:
    the builder's config); a field the command has no option for (`workers`; the shard of `build`)
    keeps its default."""
    given, values = vars(args), {}
    for f in fields(GenerationSettings):
        parse = f.metadata.get("option", {}).get("parse")
        if f.name in given:
            values[f.name] = parse(given[f.name]) if parse else given[f.name]
    return kind(**{**values, "run_dir": run_dir}, **more)
