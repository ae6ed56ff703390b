"""The in-process engine's stderr tail: what its child processes write passes through unchanged, and
the last lines are kept for the message when the engine dies."""

from __future__ import annotations

import os
import subprocess
import sys

from eagle3_synth.engines.sglang.processes import StderrTail


def test_a_childs_stderr_passes_through_and_its_last_lines_are_kept(tmp_path):
    saved = os.dup(2)
    capture = open(tmp_path / "stderr.txt", "wb")
    os.dup2(capture.fileno(), 2)  # the "terminal" the tail forwards to
    try:
        tail = StderrTail(lines=3).start()
        # A progress bar redraws its line after each "\r": the tail keeps what a terminal shows of it.
        script = ("import sys\nfor i in range(5): print(f'line {i}', file=sys.stderr)\n"
                  "sys.stderr.write('loading: 0%\\rloading: 100%\\nno newline')")
        subprocess.run([sys.executable, "-c", script], check=True)  # inherits fd 2: the pipe
        lines = tail.lines()
        tail.close()
        os.write(2, b"after close\n")
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        capture.close()
    assert lines == ["line 3", "line 4", "loading: 100%", "no newline"]  # the last 3 whole lines, the unfinished one
    assert (tmp_path / "stderr.txt").read_bytes() == (b"".join(f"line {i}\n".encode() for i in range(5))
                                                      + b"loading: 0%\rloading: 100%\nno newlineafter close\n")

