"""Command line: `eagle3-synth <command> ...`. Parsing stops here; typed options go on."""

from __future__ import annotations

import argparse
import logging
import sys
from importlib import import_module

from .errors import Eagle3SynthError

# Subcommand name -> module under eagle3_synth.commands (imported only when used).
COMMANDS = {
    "build": "build",
    "generate": "generate",
    "inspect": "inspect",
    "stats": "stats",
    "validate": "validate",
    "export": "export",
    "publish": "publish",
}


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="eagle3-synth", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module in COMMANDS.items():
        import_module(f"eagle3_synth.commands.{module}").add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(message)s")
    for noisy in ("httpx", "datasets", "huggingface_hub", "filelock", "fsspec"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        return args.run(args)
    except Eagle3SynthError as exc:
        print(f"eagle3-synth {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
