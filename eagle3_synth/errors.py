"""Error types shared across modules.

Transient vs. invalid is a type, not a flag: callers retry `TransientEngineError` and never retry
the others.
"""


class Eagle3SynthError(Exception):
    """Base class: every error this package raises on purpose."""


class ConfigError(Eagle3SynthError, ValueError):
    """A user-supplied option, config name or config file is wrong."""


class PromptError(Eagle3SynthError, ValueError):
    """One prompt record is malformed; the message names the record."""


class MarkerError(Eagle3SynthError, ValueError):
    """A model profile's marker is missing from the tokenizer or is not a single token."""


class EngineError(Eagle3SynthError, RuntimeError):
    """An engine failed or returned a result that violates the contract."""


class TransientEngineError(EngineError):
    """A failure worth retrying (connection dropped, timeout, 5xx)."""


class EngineDied(EngineError):
    """The engine itself died mid-run (SGLang's scheduler crashed, its process was killed): every
    result handed on is journaled, and the same command resumes once the engine runs again. The
    commands exit with the resumable status (`exit_status.RESUMABLE`) on it, not with a failure."""


class RunIncomplete(Eagle3SynthError):
    """Generation stopped with samples left (--max-hours, SIGTERM, Ctrl-C): everything so far is
    journaled and the same call resumes. `summary` is the run's `RunSummary`."""

    def __init__(self, message: str, summary: object = None):
        super().__init__(message)
        self.summary = summary


class Terminated(KeyboardInterrupt):
    """SIGTERM during generation (a scheduler's preemption notice): unwinds as Ctrl-C does, journal
    closed, but the run ends with the resumable status (75, what schedulers requeue on), not 130."""
