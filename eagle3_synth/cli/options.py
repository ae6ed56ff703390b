"""Arguments shared by the commands that generate (`build`, `generate` for shards, `launch`).

Made from the fields of the run configuration (`run.settings`: one argument group per concern, each
option's help, default and reading in its field's metadata); `generation_settings` turns the parsed
arguments into `GenerationSettings`, which build the run spec (the builder's config is the same class).
"""

from __future__ import annotations

import argparse
from dataclasses import MISSING, fields

from eagle3_synth import exit_status
from eagle3_synth.cli import EXIT_RESUMABLE
from eagle3_synth.engines import option_name
from eagle3_synth.run.directory import run_dir_under
from eagle3_synth.run.progress import RunSummary
from eagle3_synth.run.staging import DryRun
from eagle3_synth.run.settings import CONCERNS, GenerationSettings, parse_key_value

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
