"""`eagle3-synth build CONFIG ... --out DIR`: generate what is missing, then write the config."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..dataset_folder import assemble_config
from ..pipeline import generate
from .common import add_generation_arguments, generate_options


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "build",
        help="generate a config (resuming any earlier run) and write it into a Hub-layout folder",
        description=__doc__,
    )
    add_generation_arguments(parser)
    parser.add_argument("--out", required=True, help="dataset folder: OUT/CONFIG/train-*.parquet + OUT/README.md")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    run_dir = args.run_dir or str(Path(args.out) / ".runs" / args.config)
    summary = generate(generate_options(args, run_dir))
    for line in summary.lines():
        print(line)
    rows, files = assemble_config(run_dir, args.out, args.config)
    print(f"{args.config}: wrote {rows} rows to {', '.join(str(f) for f in files)}")
    return 0
