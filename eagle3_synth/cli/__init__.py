"""Command line: `eagle3-synth <command> ...`. Parsing stops here; typed options go on."""

from __future__ import annotations

import argparse
import logging
import sys
from importlib import import_module

from eagle3_synth import __version__
from eagle3_synth.cli.progress_bars import third_party_bars_off_unless_terminal
from eagle3_synth.errors import Eagle3SynthError

# Subcommand name -> module under eagle3_synth.cli (imported only when used).
COMMANDS = {
    "build": "build",
    "generate": "generate",
    "launch": "launch",
    "status": "status",
    "inspect": "inspect",
    "stats": "stats",
    "validate": "validate",
    "export": "export",
    "vocab": "vocab",
    "plan": "plan",
    "publish": "publish",
    "doctor": "doctor",
    "configs": "configs",
}


def make_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser; with `only`, just that command's module is imported (the others pull in
    datasets, aiohttp, matplotlib ... and cost seconds of start-up for nothing)."""
    parser = argparse.ArgumentParser(
        prog="eagle3-synth",
        description="Exact-token training data for EAGLE-3 drafters: generate, assemble, check and publish.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module in COMMANDS.items():
        if only is None or name == only:
            import_module(f"eagle3_synth.cli.{module}").add_parser(subparsers)
    return parser


def _command_in(argv: list[str]) -> str | None:
    """The subcommand named in argv, if it is a known one and comes first after global flags."""
    for arg in argv:
        if arg in ("-v", "--verbose"):
            continue
        return arg if arg in COMMANDS else None
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = make_parser(_command_in(argv)).parse_args(argv)
    third_party_bars_off_unless_terminal()
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
