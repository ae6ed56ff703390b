"""`eagle3-synth export DIR CONFIG --format ids|specforge|modelopt|jsonl --out PATH`.

ids (alias speculators): {id, input_ids, loss_mask, text, metadata} per line, token-exact
(input_ids = prompt_ids + output_ids): the input of speculators and of SpecForge's
data.prompts_path. specforge: {id, conversations, tools, <template kwargs>} with the generated turn
as a serving stack's parsers return it; SpecForge re-tokenizes this text, so it is NOT token-exact.
modelopt: {conversation_id, messages} (no tools: ModelOpt renders none). jsonl: the stored rows.
Conversation formats write each rollout once (its last row holds every earlier turn) unless
--every-turn, and leave out rows that did not stop or stopped on a token that is not the template's
end of turn. --max-length L drops longer rows (--overlong truncate: cut --format ids rows at L).
"""

from __future__ import annotations

import argparse

from eagle3_synth.dataset.stores import data_profile
from eagle3_synth.contract.ranges import check_range
from eagle3_synth.errors import ConfigError
from eagle3_synth.prompts.forms import MessageForm
from eagle3_synth.train.export import FORMATS, KEPT, OVERLONG, ExportOptions, export_rows, TRAIN_ON
from eagle3_synth.cli.options import (TokenizerCache, add_source_argument, add_tokenizer_arguments, open_config,
                                      add_overwrite_argument, check_outputs)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("export", help="write a config for speculators, SpecForge, ModelOpt or as plain JSONL",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_source_argument(parser)
    parser.add_argument("config", metavar="CONFIG", help="config name, e.g. B1_glaive")
    parser.add_argument("--format", required=True, choices=sorted(FORMATS))
    parser.add_argument("--out", required=True, metavar="PATH", help="output JSONL file")
    parser.add_argument("--train-on", choices=TRAIN_ON, default="output",
                        help="ids loss_mask: every output token (reasoning and response, default) or the response only")
    parser.add_argument("--no-text", action="store_true", help="ids: leave out the review-only text")
    parser.add_argument("--include-unfinished", action="store_true",
                        help="specforge/modelopt: also export rows cut off by max_new_tokens")
    parser.add_argument("--include-other-stops", action="store_true",
                        help="specforge/modelopt: also export rows that stopped on a token other than the template's "
                        "end of turn (e.g. Kimi's [EOS])")
    parser.add_argument("--every-turn", action="store_true",
                        help="specforge/modelopt: one record per row instead of per rollout (its last turn)")
    parser.add_argument("--max-length", type=int, metavar="L",
                        help="rows over L total tokens (prompt + output) are dropped (see --overlong)")
    parser.add_argument("--min-loss-tokens", type=int, default=0, metavar="N",
                        help="leave out rows with fewer than N tokens under the loss mask, counted (a block "
                        "drafter needs at least 2 x its block size: see docs/data.md)")
    parser.add_argument("--overlong", choices=OVERLONG, default="drop",
                        help="--max-length: drop longer rows (default), or truncate them (--format ids: ids and "
                        "mask past L removed)")
    add_tokenizer_arguments(parser)
    add_overwrite_argument(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    check_range("max_length", args.max_length)
    check_outputs([args.out], "--out", args.overwrite)
    source, config = open_config(args)
    ids = args.format in ("ids", "speculators")
    if not ids and args.train_on != "output":
        raise ConfigError("--train-on applies to --format ids (speculators) only")
    tokenizer = markers = profile = None
    provenance = source.provenance(config)
    if args.format in ("specforge", "modelopt") or (ids and not args.no_text):
        tokenizer, markers = TokenizerCache(args).get(provenance)
        profile = data_profile(tokenizer, provenance, getattr(args, "profile", None))
    form = MessageForm.from_json(provenance.message_form) if provenance.message_form else MessageForm()
    options = ExportOptions(config=config, tokenizer=tokenizer, profile=profile, markers=markers, message_form=form,
                            train_on=args.train_on, text=not args.no_text, include_unfinished=args.include_unfinished,
                            include_other_stops=args.include_other_stops, every_turn=args.every_turn,
                            max_length=args.max_length, overlong=args.overlong, min_loss_tokens=args.min_loss_tokens)
    summary = export_rows(source.iter_batches(config), args.format, args.out, options)
    print(f"{config}: wrote {summary.written} records to {summary.path} ({args.format})")
    for reason, count in sorted(summary.counts.items()):
        rows = f"{count} row{'s' if count != 1 else ''}"
        print(f"  {rows} {reason}" if reason in KEPT else f"  left out {rows} that {reason}")
    return 0
