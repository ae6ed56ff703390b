"""`eagle3-synth build CONFIG --out DIR`: generate what is missing, then write the config's dataset.

With --model it generates first (resuming any earlier run; nothing already journaled is generated
again). Without it, it only assembles: `build CONFIG --run-dir URL --out DIR` turns a run that
`eagle3-synth generate` filled, possibly as many shards on many nodes, into the dataset. It refuses
while samples have no result yet, naming the shards to finish, unless --partial is given, and
refuses an option of generating (--engine, --temperature ...; --validation must match the run's).
Failed samples are left out of the dataset (--retry-errors generates them again).
--dry-run prepares the prompts and prints what would be generated, writing nothing.
--out is a new or empty folder or one eagle3-synth built: anything else in it is refused before
anything loads, and CONFIG already there from another run directory is replaced only with --overwrite.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path

from eagle3_synth.exit_status import DONE, FAILED_SAMPLES, INTERRUPTED, RESUMABLE, USER_ERROR, help_line
from eagle3_synth.cli.options import (EXIT_FAILED_SAMPLES, add_generation_arguments, default_run_dir,
                                      generation_settings, report_dry_run, stopped_status)
from eagle3_synth.dataset.folder import check_out_folder
from eagle3_synth.engines import option_name, options_given
from eagle3_synth.errors import ConfigError, RunIncomplete
from eagle3_synth.run.assemble import NoRowsToWrite, no_rows_message
from eagle3_synth.run.preflight import check_output_folder
from eagle3_synth.run.progress import counted
from eagle3_synth.run.settings import GenerationSettings


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "build",
        help="generate a config (resuming any earlier run) or assemble a generated run, into a Hub-layout folder",
        description=__doc__ + help_line(DONE, FAILED_SAMPLES, USER_ERROR, RESUMABLE, INTERRUPTED),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_generation_arguments(parser)
    parser.add_argument("--out", required=True, help="dataset folder: OUT/CONFIG/train-*.parquet + OUT/README.md; a "
                        "new or empty folder, or one eagle3-synth built (anything else is refused)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace CONFIG in --out when its rows came from another run directory")
    parser.add_argument("--partial", action="store_true",
                        help="assemble even though some samples have no result yet (they are left out)")
    parser.set_defaults(run=run)


def folder_builds():  # noqa: ANN201 - the module eagle3_synth_builders.folder_build
    """Where `build` writes a folder through the builder (`builders/folder_build.py`, installed as
    eagle3_synth_builders): the library never imports the builder, the command does."""
    try:
        from eagle3_synth_builders import folder_build
    except ImportError as exc:
        raise ConfigError(f"the builder package eagle3_synth_builders is not installed ({exc}); reinstall "
                          "eagle3-synth (pip install -e . in a checkout)") from None
    return folder_build


@contextmanager
def no_empty_folders_left(*folders: str) -> Iterator[None]:
    """A build that fails leaves no empty folder it made: `--out`, its default run directory under
    it, their parents. A folder with anything in it -- a run directory with prompts or a journal,
    which the next build resumes -- stays, and nothing that existed before is touched."""
    made = {path for folder in folders if "://" not in folder
            for path in (Path(folder), *Path(folder).parents) if not path.exists()}
    try:
        yield
    except BaseException:
        for path in sorted(made, key=lambda path: len(path.parts), reverse=True):  # deepest first
            try:
                path.rmdir()
            except OSError:  # not empty, or not made after all
                continue
        raise


def run(args: argparse.Namespace) -> int:
    settings = generation_settings(args, default_run_dir(args), folder_builds().Eagle3SynthConfig, name=args.config,
                                   partial=args.partial)
    # Assembling reads the run directory, the configs a --config-file defines (a config of one's own is
    # assembled by its name) and checks --validation against the run; every other option generates.
    generating = [option_name(f) for f in fields(GenerationSettings)
                  if f.name not in ("run_dir", "config_file", "validation")]
    given = [] if settings.generates else options_given(settings, generating)
    if given:
        raise ConfigError(f"{given[0]} applies to generating, and nothing is generated without --model (or "
                          f"--tokenizer, --replay): give one to generate, or drop {given[0]} to assemble --run-dir")
    check_output_folder(args.out, "--out")
    check_out_folder(args.out, args.config, settings.run_dir, overwrite=args.overwrite)
    if args.dry_run:
        if not settings.generates:
            raise ConfigError("--dry-run shows what a run would generate: give --model (or --tokenizer, --replay)")
        from eagle3_synth.run.generate import dry_run

        return report_dry_run(dry_run(*settings.resolve(args.config)))
    failed: list[int] = []
    with no_empty_folders_left(args.out, settings.run_dir):
        try:
            rows, files = folder_builds().build_config(settings, args.out, overwrite=args.overwrite,
                                                       on_coverage=lambda coverage: failed.append(
                                                           coverage.finish_reasons.get("abort", 0)))
        except RunIncomplete as exc:
            return stopped_status(exc.summary)  # its summary is printed; the run resumes with the same command
        except NoRowsToWrite as exc:
            raise ConfigError(no_rows_message(exc.run_dir, exc.config, exc.coverage, args.out)) from None
    print(f"{args.config}: wrote {counted(rows, 'rows')} to {', '.join(str(f) for f in files)}")
    if sum(failed):
        print(f"{args.config}: {counted(sum(failed), 'samples')} failed, not in the dataset (exit status "
              f"{EXIT_FAILED_SAMPLES}); build again with --retry-errors to generate them again")
        return EXIT_FAILED_SAMPLES
    return 0
