"""`eagle3-synth build CONFIG --out DIR`: generate what is missing, then write the config's dataset.

With --model it generates first (resuming any earlier run; nothing already journaled is generated
again). Without it, it only assembles: `build CONFIG --run-dir URL --out DIR` turns a run that
`eagle3-synth generate` filled, possibly as many shards on many nodes, into the dataset. It refuses
while samples have no result yet, naming the shards to finish, unless --partial is given.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from eagle3_synth.dataset.folder import assemble_config
from eagle3_synth.errors import ConfigError
from eagle3_synth.run.journal import RunDirectory
from eagle3_synth.run.generate import check_run, generate, no_rows_message
from eagle3_synth.cli.options import add_generation_arguments, generate_options, report_generation


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "build",
        help="generate a config (resuming any earlier run) or assemble a generated run, into a Hub-layout folder",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_generation_arguments(parser)
    parser.add_argument("--out", required=True, help="dataset folder: OUT/CONFIG/train-*.parquet + OUT/README.md")
    parser.add_argument("--partial", action="store_true",
                        help="assemble even though some samples have no result yet (they are left out)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    run_dir = args.run_dir or str(Path(args.out) / ".runs" / args.config)
    if args.model or args.tokenizer or args.replay:
        status = report_generation(generate(generate_options(args, run_dir)))
        if status:
            return status
    elif not RunDirectory(run_dir).exists():
        raise ConfigError(f"{run_dir} holds no run yet: give --model (and --engine ...) to generate the config, "
                              "or --run-dir of a run that `eagle3-synth generate` filled")
    coverage = check_run(run_dir, args.config)
    for line in coverage.lines():
        print(line)
    if coverage.rows == 0:
        raise ConfigError(no_rows_message(run_dir, args.config, coverage, args.out))
    if not coverage.complete:
        if not args.partial:
            raise ConfigError(coverage.missing_message())
        print(f"  --partial: building without the {len(coverage.missing)} samples that have no result yet")
    rows, files = assemble_config(run_dir, args.out, args.config)
    print(f"{args.config}: wrote {rows} rows to {', '.join(str(f) for f in files)}")
    return 0
