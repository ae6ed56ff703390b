"""`eagle3-synth validate DIR [CONFIG...]`: check every row against the data contract.

Re-templates each prompt from its messages with the tokenizer and template kwargs the data was
made with, recomputes every boundary column from output_ids, and checks stop tokens, counts, and
that the output does not repeat the prompt. Prints violations by kind with sample ids; the exit
code is 1 when there is any violation, 0 when every row is valid.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from eagle3_synth.contract.ranges import check_range
from eagle3_synth.errors import ConfigError
from eagle3_synth.prompts.templating import check_template_date
from eagle3_synth.dataset.stores import data_profile, resolve_configs
from eagle3_synth.prompts.forms import MessageForm
from eagle3_synth.checks import RowValidator, data_vocabulary, validate_batches
from eagle3_synth.cli.options import (TokenizerCache, add_source_argument, add_tokenizer_arguments, open_from_args,
                                      kwarg_overrides, template_kwargs, add_overwrite_argument, check_outputs)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("validate", help="check every row against the data contract (exit 1 on violations)",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_source_argument(parser)
    parser.add_argument("configs", metavar="CONFIG", nargs="*", help="configs (default: all)")
    add_tokenizer_arguments(parser)
    parser.add_argument("--template-kwarg", action="append", default=[], metavar="KEY=VALUE",
                        help="chat-template kwarg, overriding the recorded ones (repeatable)")
    parser.add_argument("--template-date", type=check_template_date, metavar="YYYY-MM-DD",
                        help="date a date-writing template (gpt-oss) renders, overriding the recorded one")
    parser.add_argument("--workers", dest="check_workers", type=int, default=1, metavar="N",
                        help="processes checking rows in parallel (re-templating dominates; default 1)")
    parser.add_argument("--report", metavar="FILE.json", help="also write the report as JSON")
    add_overwrite_argument(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    check_range("check_workers", args.check_workers)
    if args.report:
        check_outputs([args.report], "--report", args.overwrite)
    source = open_from_args(args)
    tokenizers = TokenizerCache(args)
    reports = []
    for config in resolve_configs(source, args.configs):
        provenance = source.provenance(config)
        tokenizer, markers = tokenizers.get(provenance)
        validator = RowValidator(tokenizer, markers, template_kwargs(args, provenance),
                                 form=MessageForm.from_json(provenance.message_form) if provenance.message_form else None,
                                 profile=data_profile(tokenizer, provenance, args.profile),
                                 template_date=args.template_date or provenance.template_date,
                                 kwarg_overrides=kwarg_overrides(args), vocab=data_vocabulary(provenance, tokenizer),
                                 max_new_tokens=provenance.max_new_tokens)
        report = validate_batches(source.iter_batches(config), validator, config, workers=args.check_workers)
        reports.append(report)
        for line in report.lines():
            print(line)
    if args.report:
        Path(args.report).write_text(json.dumps([r.as_dict() for r in reports], indent=2) + "\n", encoding="utf-8")
    return 0 if all(r.ok for r in reports) else 1
