"""`eagle3-synth export DIR CONFIG --format speculators|specforge|jsonl --out PATH`.

speculators: {id, input_ids, loss_mask, text, metadata} per line, token-exact (input_ids =
prompt_ids + output_ids). specforge: {id, conversations, tools} with reasoning_content and
tool_calls decoded from the boundaries; SpecForge re-tokenizes this text, so it is NOT
token-exact, and rows that did not stop are left out unless --include-unfinished. jsonl: the
stored rows as they are.
"""

from __future__ import annotations

import argparse

from eagle3_synth.errors import ConfigError
from eagle3_synth.tools.export import FORMATS, ExportOptions, export_rows
from eagle3_synth.tools.training import TRAIN_ON
from eagle3_synth.cli.data_options import TokenizerCache, add_source_argument, add_tokenizer_arguments, open_config


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("export", help="write a config for speculators, SpecForge or as plain JSONL",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_source_argument(parser)
    parser.add_argument("config", metavar="CONFIG", help="config name, e.g. B1_glaive")
    parser.add_argument("--format", required=True, choices=sorted(FORMATS))
    parser.add_argument("--out", required=True, metavar="PATH", help="output JSONL file")
    parser.add_argument("--train-on", choices=TRAIN_ON, default="output",
                        help="speculators loss_mask: every output token (reasoning and response, default) "
                        "or the response only")
    parser.add_argument("--no-text", action="store_true", help="speculators: leave out the review-only text")
    parser.add_argument("--include-unfinished", action="store_true",
                        help="specforge: also export rows cut off by max_new_tokens")
    add_tokenizer_arguments(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    source, config = open_config(args)
    if args.format != "speculators" and args.train_on != "output":
        raise ConfigError("--train-on applies to --format speculators only")
    tokenizer = markers = None
    if args.format == "specforge" or (args.format == "speculators" and not args.no_text):
        tokenizer, markers = TokenizerCache(args).get(source.provenance(config))
    options = ExportOptions(config=config, tokenizer=tokenizer, profile=markers.profile if markers else None,
                            train_on=args.train_on, include_unfinished=args.include_unfinished)
    summary = export_rows(source.iter_batches(config), args.format, args.out, options)
    plural = "s" if summary.skipped != 1 else ""
    skipped = (f", left out {summary.skipped} row{plural} that did not stop (--include-unfinished keeps them)"
               if summary.skipped else "")
    print(f"{config}: wrote {summary.written} rows to {summary.path} ({args.format}){skipped}")
    return 0
