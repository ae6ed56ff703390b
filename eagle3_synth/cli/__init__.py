"""Command line: `eagle3-synth <command> ...`. Parsing stops here; typed options go on.

Exit status, the same for every command: the table in `eagle3_synth/exit_status.py` (rendered in
docs/reference/exit-status.md). `--debug` adds the traceback to any error.
"""

from __future__ import annotations

import argparse
import difflib
import errno
import logging
import os
import signal
import sys
import threading
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from importlib import import_module
from typing import Any, TextIO

from eagle3_synth import __version__, exit_status
from eagle3_synth.errors import Eagle3SynthError, EngineDied
from eagle3_synth.run.kill_points import kill_point

# Third-party progress bars (transformers' "Loading weights", datasets' "Generating train split",
# huggingface_hub's downloads) only on a terminal.
#
# In a batch log (Slurm, `nohup`, CI) a tqdm bar is carriage returns on one ever-growing line; our
# own progress lines (`run/progress.py`) already say where a run stands. Each library is switched
# off both ways it reads the setting: its environment variable, read when it is imported
# (huggingface_hub `HF_HUB_DISABLE_PROGRESS_BARS`, which transformers' `utils/logging.py` reads at
# import too; datasets `HF_DATASETS_DISABLE_PROGRESS_BARS`, `datasets/config.py`), and its switch
# function when it is already imported (a script that imported datasets before calling `main`).
# A user's own setting of either variable wins.

_VARIABLES = ("HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS")


def third_party_bars_off_unless_terminal(stream: TextIO | None = None) -> bool:
    """Turn the libraries' bars off when `stream` (stderr by default) is not a terminal; True if off."""
    stream = sys.stderr if stream is None else stream
    if stream.isatty() or any(name in os.environ for name in _VARIABLES):
        return False
    for name in _VARIABLES:
        os.environ[name] = "1"
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    if "transformers" in sys.modules:
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
    if "datasets" in sys.modules:
        from datasets.utils import disable_progress_bars as disable_datasets_bars

        disable_datasets_bars()
    return True


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
    "hidden-states": "hidden_states",
    "evaluate": "evaluate",
    "plan": "plan",
    "publish": "publish",
    "doctor": "doctor",
    "configs": "configs",
}


# The statuses every command returns (eagle3_synth/exit_status.py), under the names the commands use.
EXIT_PROBLEMS = exit_status.PROBLEMS
EXIT_USER_ERROR = exit_status.USER_ERROR
EXIT_RESUMABLE = exit_status.RESUMABLE
EXIT_INTERRUPTED = exit_status.INTERRUPTED
EXIT_CLOSED_PIPE = exit_status.CLOSED_PIPE
GLOBAL_FLAGS = ("-v", "--verbose", "--debug")


class OneLineParser(argparse.ArgumentParser):
    """argparse, with a usage error in one line (argparse prints the whole usage first): the same
    shape as every other error of the command line, `PROG: error: MESSAGE`. An option no command
    has is the command's error, with the nearest option it has; no command at all prints the
    commands (`--help`) and exits 2, like any other usage error."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands: dict[str, argparse.ArgumentParser] = {}  # the main parser's: name -> its parser

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USER_ERROR, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        parsed, unknown = self.parse_known_args(args, namespace)
        command = getattr(parsed, "command", None)
        if self.commands and command is None:
            self.print_help(sys.stderr)
            self.exit(EXIT_USER_ERROR)
        if unknown:
            # argparse reports a command's unknown options as the main parser's, naming neither
            # the command nor what was meant.
            parser = self.commands.get(command, self)
            parser.error(f"unrecognized arguments: {' '.join(unknown)}{_nearest_options(parser, unknown)}")
        return parsed


def _nearest_options(parser: argparse.ArgumentParser, unknown: list[str]) -> str:
    """` (did you mean --temperature?)` for the unknown options near one of the parser's."""
    # argparse's own table of the parser's option strings, its groups' included.
    known = [name for name in parser._option_string_actions if name.startswith("--")]
    meant = {}
    for arg in unknown:
        name = arg.split("=", 1)[0]
        close = difflib.get_close_matches(name, known, n=1) if name.startswith("--") else []
        if close:
            meant[name] = close[0]
    if len(meant) > 1:
        return f" (did you mean {', '.join(f'{close} for {name}' for name, close in meant.items())}?)"
    return "".join(f" (did you mean {close}?)" for close in meant.values())


def make_parser(only: str | None = None) -> OneLineParser:
    """The parser; with `only`, just that command's module is imported (the others pull in
    datasets, aiohttp, matplotlib ... and cost seconds of start-up for nothing)."""
    parser = OneLineParser(
        prog="eagle3-synth",
        description="Exact-token training data for EAGLE-3 drafters: generate, assemble, check and publish.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    parser.add_argument("--debug", action="store_true", help="print the traceback of an error, not just its one line")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    # Not required=True: without a command, parse_args prints the commands rather than
    # "the following arguments are required: COMMAND".
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module in COMMANDS.items():
        if only is None or name == only:
            import_module(f"eagle3_synth.cli.{module}").add_parser(subparsers)
    parser.commands = subparsers.choices
    return parser


def _command_in(argv: list[str]) -> str | None:
    """The subcommand named in argv, if it is a known one and comes first after global flags."""
    for arg in argv:
        if arg in GLOBAL_FLAGS:
            continue
        return arg if arg in COMMANDS else None
    return None


def user_error(exc: BaseException) -> str | None:
    """The one line for an exception that is the user's or the system's to fix, not a bug: a path
    that cannot be read or written (OSError names it), a refused connection; None for the rest."""
    if isinstance(exc, Eagle3SynthError):
        return str(exc)
    if isinstance(exc, ConnectionError) or type(exc).__name__ in ("ConnectError", "ConnectTimeout"):
        return f"cannot connect{_request_url(exc)}: {_first_line(exc)} (no network, or the Hub or server is down)"
    if isinstance(exc, OSError):
        where = " -> ".join(str(name) for name in (exc.filename, exc.filename2) if name is not None)
        what = exc.strerror or _first_line(exc)
        if exc.errno in _CANNOT_WRITE:
            what += ("; everything written before it is kept (a run's journal too): fix it and run the same "
                     "command again to continue")
        return f"{where}: {what}" if where else what
    return None


# A disk that refuses writes: full, over quota, read-only, a file over the size limit, no permission.
_CANNOT_WRITE = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG, errno.EACCES, errno.EPERM})


def _request_url(exc: BaseException) -> str:
    """` to URL` of the request an httpx/requests connection error was raised for, if it says."""
    try:
        url = exc.request.url  # type: ignore[attr-defined] - httpx raises RuntimeError when unset
    except (AttributeError, RuntimeError):
        return ""
    return f" to {url}" if url else ""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def main(argv: list[str] | None = None) -> int:
    """The `eagle3-synth` command (the console script's entry point): Ctrl-C at any moment, the
    imports of the command's modules included, ends it with one line and status 130."""
    argv = sys.argv[1:] if argv is None else argv
    with _ctrl_c_noted():
        try:
            kill_point("cli.main")
            return _main(argv)
        except KeyboardInterrupt:
            return _interrupted(_command_in(argv), debug="--debug" in argv)


def _main(argv: list[str]) -> int:
    args = make_parser(_command_in(argv)).parse_args(argv)
    third_party_bars_off_unless_terminal()
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(message)s")
    # torch sets its own loggers to WARNING when imported; an import cut short by Ctrl-C leaves them at
    # INFO, and torch's exit handler then logs its FakeTensor cache statistics.
    for noisy in ("httpx", "datasets", "huggingface_hub", "filelock", "fsspec", "torch"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    prog = f"eagle3-synth {args.command}"
    try:
        if _CTRL_C.is_set():  # during the imports above, by a library that swallowed its KeyboardInterrupt
            raise KeyboardInterrupt
        code = args.run(args)
        sys.stdout.flush()  # inside the try: a reader that left shows here, not at the interpreter's exit
        return code
    except KeyboardInterrupt:
        return _interrupted(args.command, debug=args.debug)
    except EngineDied as exc:
        # Not the user's error and not a bug of ours: the engine's; rerunning resumes (75, like --max-hours).
        if args.debug:
            traceback.print_exc()
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return EXIT_RESUMABLE
    except BrokenPipeError:
        # `eagle3-synth doctor ... | head`: the reader has what it wanted. Quiet, like any Unix tool;
        # stdout is pointed at /dev/null so the interpreter's final flush cannot raise again
        # (the recipe in Python's `signal` documentation, "Note on SIGPIPE").
        _stdout_to_devnull()
        return EXIT_CLOSED_PIPE
    except Exception as exc:  # noqa: BLE001 - the last resort: one line, the traceback only on --debug
        if args.debug:
            traceback.print_exc()
        message = user_error(exc)
        if message is not None:
            print(f"{prog}: error: {message}", file=sys.stderr)
            return EXIT_USER_ERROR
        print(f"{prog}: error: {type(exc).__name__}: {_first_line(exc)} (--debug for the traceback)", file=sys.stderr)
        return EXIT_PROBLEMS


# Commands whose work is kept when they stop (a run's journal, finished files): the same command continues.
RESUMING = frozenset({"build", "generate", "launch", "hidden-states"})


def _interrupted(command: str | None, debug: bool) -> int:
    """Ctrl-C, wherever it came: one line (the traceback only with --debug), status 130."""
    if debug:
        traceback.print_exc()
    prog = f"eagle3-synth {command}" if command else "eagle3-synth"
    resumes = "; what was written is kept: run the same command again to continue" if command in RESUMING else ""
    print(f"{prog}: interrupted{resumes}", file=sys.stderr)
    return EXIT_INTERRUPTED


# Set by the SIGINT handler, so a Ctrl-C whose KeyboardInterrupt a library swallowed is still seen.
_CTRL_C = threading.Event()


def _on_ctrl_c(signum: int, frame: object) -> None:
    _CTRL_C.set()
    raise KeyboardInterrupt


@contextmanager
def _ctrl_c_noted() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt, as Python's own handler does, and is noted: a library that
    catches everything around an import or a call can lose the exception (a Ctrl-C while a build
    imports its modules would otherwise let the build run to its end). Python's handler is put
    back after (only the main thread can set one)."""
    _CTRL_C.clear()
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield  # a caller's own SIGINT handling (or SIG_IGN, inherited by a background job) stays
        return
    signal.signal(signal.SIGINT, _on_ctrl_c)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _stdout_to_devnull() -> None:
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a real file (a test's capture): nothing to flush
        pass


if __name__ == "__main__":
    sys.exit(main())
