"""`eagle3-synth doctor --model PATH [--template-kwarg K=V ...]`: check a model before a long run.

Reads only the model's tokenizer and chat template (no engine, no GPU) and prints the family chosen
and why, every marker with its ids, the kwargs the template reads (a --template-kwarg it does not
read, a reserved one or a value the profile does not take is a problem), what the generation prompt
ends with (and which kwargs switch thinking), whether tools are rendered, the message form the template takes, the context length,
and one bundled sample prompt per config templated and decoded. Exit status 1 when a run would
produce lossy or wrong data, with each problem named.
"""

from __future__ import annotations

import argparse

from eagle3_synth.prompts.templating import check_template_date, load_tokenizer
from eagle3_synth.prompts.configs import get_config, load_config_file
from eagle3_synth.checks import diagnose
from eagle3_synth.contract.profiles import PROFILES
from eagle3_synth.cli.options import parse_key_value


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("doctor", help="check a model's tokenizer and chat template before a run",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="local model folder (or a folder holding the tokenizer)")
    parser.add_argument("--tokenizer", help="tokenizer folder, if not the model's")
    parser.add_argument("--profile", default="auto", metavar="NAME",
                        help=f"marker profile: auto (default), {', '.join(PROFILES)}, or one from --profile-file")
    parser.add_argument("--profile-file", metavar="YAML", help="model families of your own (profiles.yaml schema)")
    parser.add_argument("--template-kwarg", action="append", default=[], metavar="KEY=VALUE",
                        help="chat-template kwarg the run will pass, e.g. thinking=true (repeatable): a name the "
                        "template does not read, a reserved one or a value the profile does not take is a problem")
    parser.add_argument("--template-kwarg-unchecked", action="store_true",
                        help="as for build: do not check that the template reads each --template-kwarg name")
    parser.add_argument("--template-date", type=check_template_date, metavar="YYYY-MM-DD",
                        help="date a date-writing template (gpt-oss) renders (default: today)")
    parser.add_argument("--trust-remote-code", action="store_true", help="allow the tokenizer's own code (Kimi)")
    parser.add_argument("--config", action="append", default=[], metavar="CONFIG",
                        help="show this config's sample prompt (repeatable; default: every built-in config)")
    parser.add_argument("--config-file", metavar="YAML", help="your own configs, so --config may name one")
    parser.add_argument("--full", action="store_true", help="print the sample prompts whole")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.config_file:
        load_config_file(args.config_file)
    configs = [get_config(name).name for name in args.config] or None
    path = args.tokenizer or args.model
    tokenizer = load_tokenizer(path, trust_remote_code=args.trust_remote_code,
                               option="--tokenizer" if args.tokenizer else "--model")
    report = diagnose(tokenizer, model_path=args.model, profile_name=args.profile, profile_file=args.profile_file,
                      template_kwargs=dict(parse_key_value(item, "--template-kwarg") for item in args.template_kwarg),
                      template_date=args.template_date, configs=configs, full=args.full,
                      template_kwarg_unchecked=args.template_kwarg_unchecked)
    for line in report.lines():
        print(line)
    return 1 if report.problems else 0
