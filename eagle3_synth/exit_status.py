"""Exit statuses of `eagle3-synth`: the one table the commands return from and the docs render.

Every command uses the same statuses; `docs/reference/exit-status.md` is generated from `STATUSES`
(`python docs/generate.py`), and a command's `--help` names the ones it returns (`help_line`).
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

DONE = 0
PROBLEMS = 1  # problems found (or an unexpected error)
# A build or shard that finished but holds failed samples (their errors are journaled; the same
# command with --retry-errors generates them again): not a clean success for a script.
FAILED_SAMPLES = PROBLEMS
USER_ERROR = 2  # one line names the option, file or path at fault; argparse's own status too
STILL_RUNNING = 3  # `status`: shards still running or pending
# A generating command that stopped early with work left (--max-hours, SIGTERM, an engine that died
# mid-run): the run is resumable; schedulers can requeue on it (75 is EX_TEMPFAIL, "try again later").
# Only where the same command can succeed: an engine that cannot start as configured is USER_ERROR.
RESUMABLE = 75
# Ctrl-C, at whatever moment (128 + SIGINT, what a shell reports for it): one line, never a traceback;
# what a generating command wrote is kept, and the same command continues.
INTERRUPTED = 130
CLOSED_PIPE = 141  # 128 + SIGPIPE, what a shell reports for `... | head` when the reader left early


@dataclass(frozen=True)
class ExitStatus:
    code: int
    name: str  # the constant above
    short: str  # a few words, for a command's --help
    meaning: str  # the whole of it, for the docs (Markdown)


STATUSES = (
    ExitStatus(DONE, "DONE", "done", "done (`status`: every shard done)"),
    ExitStatus(PROBLEMS, "PROBLEMS", "problems found (violations, a failed or stopped shard, failed samples left out)",
               "problems found (`validate`'s violations, `doctor`'s problems; `status` and `launch --wait`: a "
               "shard failed or stopped), a build or shard that finished with failed samples (the dataset is "
               "written without them; `--retry-errors` generates them again), or an unexpected error"),
    ExitStatus(USER_ERROR, "USER_ERROR", "a user error, nothing built",
               "a user error -- a bad option, input, path, a path the system refuses (full or read-only "
               "disk: what was journaled is kept), or an engine that cannot start as configured (SGLang's "
               "own reason, e.g. no memory left for its KV cache, and what to change) -- said in one line "
               "naming it, with nothing built"),
    ExitStatus(STILL_RUNNING, "STILL_RUNNING", "shards still running or pending",
               "`status` only: shards are still running or pending"),
    ExitStatus(RESUMABLE, "RESUMABLE", "stopped early with work left (the same command resumes)",
               "stopped early with work left (`--max-hours`, SIGTERM, an engine that died mid-run, a server "
               "that went away): the same command resumes"),
    ExitStatus(INTERRUPTED, "INTERRUPTED", "interrupted by Ctrl-C (the same command resumes)",
               "interrupted by Ctrl-C, at whatever moment (one line, no traceback): what a generating "
               "command wrote is kept, and the same command continues"),
    ExitStatus(CLOSED_PIPE, "CLOSED_PIPE", "the reader of the output left",
               "the reader of the output left early (`eagle3-synth doctor ... | head`); nothing is printed"),
)


def help_line(*codes: int) -> str:
    """`Exit status: 0 done; 1 ...` for a command's --help, over the statuses it returns."""
    by_code = {status.code: status for status in STATUSES}
    return textwrap.fill("Exit status: " + "; ".join(f"{code} {by_code[code].short}" for code in codes) + ".",
                         width=100)
