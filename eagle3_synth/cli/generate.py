"""`eagle3-synth generate CONFIG --run-dir URL [--num-shards N --shard-index I]`: generate only.

Journals results into the run directory (a local path or any fsspec URL) and writes no dataset, so
many nodes can share a config: each runs one shard (the samples with sample_id % N == I) against
the same --run-dir. Re-running the same command after any crash continues where it stopped. When
every shard is done, `eagle3-synth build CONFIG --run-dir URL --out DIR` assembles the dataset.
A shard that stopped early (--max-hours, SIGTERM) is not finished yet: the same command resumes it;
failed samples are generated again with --retry-errors. --dry-run prepares
the prompts and prints what the shard would generate, without an engine and without writing.
"""

from __future__ import annotations

import argparse

from eagle3_synth.exit_status import DONE, FAILED_SAMPLES, INTERRUPTED, RESUMABLE, USER_ERROR, help_line
from eagle3_synth.run.generate import dry_run, generate
from eagle3_synth.cli.options import add_generation_arguments, generation_settings, report_dry_run, report_generation


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "generate",
        help="generate one shard of a config into a run directory (no dataset written)",
        description=__doc__ + help_line(DONE, FAILED_SAMPLES, USER_ERROR, RESUMABLE, INTERRUPTED),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_generation_arguments(parser, sharded=True)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    spec, options = generation_settings(args, args.run_dir).resolve(args.config)
    if args.dry_run:
        return report_dry_run(dry_run(spec, options))
    status = report_generation(generate(spec, options))
    if status == 0:
        print(f"when every shard is done: eagle3-synth build {args.config} --run-dir {args.run_dir} --out DIR")
    return status
