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
        script = "import sys\nfor i in range(5): print(f'line {i}', file=sys.stderr)\nsys.stderr.write('no newline')"
        subprocess.run([sys.executable, "-c", script], check=True)  # inherits fd 2: the pipe
        lines = tail.lines()
        tail.close()
        os.write(2, b"after close\n")
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        capture.close()
    assert lines == ["line 2", "line 3", "line 4", "no newline"]  # the last 3 whole lines, and the unfinished one
    assert (tmp_path / "stderr.txt").read_bytes() == b"".join(f"line {i}\n".encode() for i in range(5)) + b"no newlineafter close\n"


def test_a_progress_bars_redrawn_line_is_kept_as_a_terminal_shows_it():
    tail = StderrTail()
    tail._keep(b"loading: 0%\rloading: 50%\rloading: 100%\nnext\n")
    assert tail.lines() == ["loading: 100%", "next"]
