"""`eagle3-synth vocab DIR [CONFIG...] --draft-vocab-size N --out OUTDIR`: EAGLE-3's draft vocabulary.

Counts the token ids under the loss mask (--train-on output: every generated token, the default;
response: from response_start on) over the chosen configs together (the final mix), keeps the N
most frequent (a tie goes to the lower token id; fewer distinct tokens than N: padded with the
lowest unused ids, with a warning) and writes the mapping in each trainer's layout, named by
target and draft vocabulary size T and N:

  specforge-vocab-T-N.pt          SpecForge: torch {"d2t", "t2d"} (--vocab-mapping / model.vocab_mapping_path)
  speculators-T-N/d2t-N.npy       speculators: the d2t/t2d pair (--d2t-path/--t2d-path) and
  speculators-T-N/t2d-N.npy         token_freq.pt ({token id: count}, --token-freq-path)
  speculators-T-N/token_freq.pt
  modelopt-T-N/d2t.pt             ModelOpt: a bare d2t tensor in frequency order (data.draft_vocab_cache)

d2t[i] is the offset of draft id i: target id = i + d2t[i]; t2d is a bool mask over the target
vocabulary. T is the model config's vocab_size (embedding rows, not the tokenizer's length): from
--model's config.json, else the model folder recorded with the data, else --target-vocab-size.
Prints the share of loss-masked positions whose token is in the draft vocabulary, per config
and overall (--json FILE writes it).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from eagle3_synth.dataset.stores import resolve_configs
from eagle3_synth.train.export import TRAIN_ON
from eagle3_synth.train.draft_vocab import draft_vocab, mapping_paths, target_vocab_size
from eagle3_synth.cli.options import add_source_argument, open_from_args, add_overwrite_argument, check_outputs


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("vocab", help="EAGLE-3 draft vocabulary (d2t/t2d) for SpecForge, speculators, ModelOpt",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_source_argument(parser)
    parser.add_argument("configs", metavar="CONFIG", nargs="*", help="configs counted together (default: all)")
    parser.add_argument("--draft-vocab-size", type=int, required=True, metavar="N",
                        help="tokens in the draft vocabulary (e.g. 32000)")
    parser.add_argument("--out", required=True, metavar="OUTDIR", help="folder the mapping files are written to")
    parser.add_argument("--train-on", choices=TRAIN_ON, default="output",
                        help="positions counted: every output token (default) or the response only, "
                        "as the loss mask of `export --train-on`")
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--target-vocab-size", type=int, metavar="N",
                        help="the target model config's vocab_size (default: read from config.json)")
    target.add_argument("--model", metavar="PATH",
                        help="target model folder whose config.json gives vocab_size (default: the recorded one)")
    parser.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    add_overwrite_argument(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    source = open_from_args(args)
    configs = resolve_configs(source, args.configs)
    size, origin = target_vocab_size(source, configs, given=args.target_vocab_size, model=args.model)
    files = [path for paths in mapping_paths(Path(args.out), size, args.draft_vocab_size).values() for path in paths]
    check_outputs(files, "--out", args.overwrite)
    if args.json:
        check_outputs([args.json], "--json", args.overwrite)
    report = draft_vocab(source, configs, draft_vocab_size=args.draft_vocab_size, target_vocab_size=size,
                         target_origin=origin, train_on=args.train_on, out=args.out)
    for line in report.lines():
        print(line)
    if args.json:
        Path(args.json).write_text(json.dumps(report.as_dict(), indent=2) + "\n", encoding="utf-8")
    return 0
