"""The replay file's check (`engines.replay.check_replay_file`) run in a thread beside prompt preparation.

The check reads every record of the file before anything is claimed or generated. Run first and
alone it would keep one core busy while the others idle; in a
thread it runs while this process prepares the prompts: whenever this process waits for the
templating worker (whose start-up takes a second or more), encodes (the tokenizer releases the GIL)
or writes the staged files, the check goes on.

What a run does is unchanged, as if the check ran first: its outcome is awaited before the run is
claimed or an engine starts (`result`); an error raised while it runs gives way to the check's own
error where the file is bad (`errors_after`), so a bad file is refused with the same message whatever
else went wrong after it; preparation stops as soon as the check has failed (`raise_if_refused`),
and Ctrl-C stops the check at its next line instead of waiting for it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from eagle3_synth.engines.base import SamplingParams
from eagle3_synth.engines.replay import CheckedReplay, CheckStopped, check_replay_file


class ReplayCheck:
    """`check_replay_file(path, params, keep=keep)` running in a thread from construction on;
    with no `path` (a run without a replay file) nothing runs and the result is None."""

    def __init__(self, path: str | None, params: SamplingParams, *, keep: bool):
        self.path = path
        self._stop = threading.Event()
        self._checked: CheckedReplay | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        if path is not None:
            self._thread = threading.Thread(target=self._run, args=(path, params, keep), name="replay-check",
                                            daemon=True)
            self._thread.start()

    def _run(self, path: str, params: SamplingParams, keep: bool) -> None:
        try:
            self._checked = check_replay_file(path, params, keep=keep, stop=self._stop)
        except BaseException as exc:  # handed to whoever waits for the result
            self._error = exc

    def _wait(self) -> None:
        if self._thread is not None:
            self._thread.join()

    def _refusal(self) -> BaseException | None:
        """The check's error once it has ended with one (not a stop this process asked for)."""
        return None if isinstance(self._error, CheckStopped) else self._error

    def result(self) -> CheckedReplay | None:
        """Waits for the check: the records kept for playback (None where none were), or its error."""
        self._wait()
        if self._error is not None:
            raise self._error
        return self._checked

    def raise_if_refused(self) -> None:
        """The check's error if it has failed already, without waiting (polled while prompts are
        prepared: a bad file stops the preparation as soon as the check finds it)."""
        refusal = self._refusal()
        if refusal is not None:
            raise refusal

    @contextmanager
    def errors_after(self) -> Iterator[None]:
        """Code run while the check may still run (what came after it when it ran first): an error
        there gives way to the check's error where the file is bad; Ctrl-C stops the check."""
        try:
            yield
        except Exception:
            self._wait()
            refusal = self._refusal()
            if refusal is not None:
                raise refusal from None
            raise
        except BaseException:
            self._stop.set()
            raise

    def close(self) -> None:
        """Stops the check if it still runs, and frees the records it kept (their temporary file)."""
        self._stop.set()
        self._wait()
        if self._checked is not None:
            self._checked.close()
