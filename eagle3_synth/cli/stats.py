"""`eagle3-synth stats DIR [CONFIG...]`: length and boundary statistics per config (and per turn of
on-policy conversations), with the share of rows over trainers' usual length caps.

Reads only the small scalar columns (no token ids). `--plot FILE.png` writes output-length
histograms; `--json` prints the figures as JSON; `--markdown` prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json

from eagle3_synth.dataset.stores import resolve_configs
from eagle3_synth.dataset.stats import STATS_COLUMNS, config_stats, format_stats_table, plot_output_lengths, turn_stats
from eagle3_synth.cli.options import add_source_argument, open_from_args, add_overwrite_argument, check_outputs


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("stats", help="token-length quantiles, truncation and boundary shares per config",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_source_argument(parser)
    parser.add_argument("configs", metavar="CONFIG", nargs="*", help="configs (default: all)")
    parser.add_argument("--plot", metavar="FILE.png", help="write output-length histograms per config")
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print the figures as JSON")
    output.add_argument("--markdown", action="store_true", help="print a Markdown table")
    add_overwrite_argument(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.plot:
        check_outputs([args.plot], "--plot", args.overwrite)
    source = open_from_args(args)
    tables = {config: source.table(config, STATS_COLUMNS) for config in resolve_configs(source, args.configs)}
    stats = [row for config, table in tables.items() for row in (config_stats(table, config), *turn_stats(table, config))]
    if args.json:
        print(json.dumps([s.as_dict() for s in stats], indent=2))
    else:
        print(format_stats_table(stats, markdown=args.markdown))
    if args.plot:
        print(f"wrote {plot_output_lengths(tables, args.plot)}")
    return 0
