"""`eagle3-synth doctor ... | head`: a reader that leaves early ends the command quietly (exit 141, as
a shell reports SIGPIPE), with no traceback and no "Exception ignored" at the interpreter's exit."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ..conftest import TINY_MODEL


@pytest.mark.slow  # over 3.5 s of CPU: near the fast tier's 5 s on a slower machine
def test_a_closed_stdout_ends_the_command_quietly():
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the command writes a byte: every write fails
    try:
        result = subprocess.run([sys.executable, "-m", "eagle3_synth.cli", "doctor", "--model", str(TINY_MODEL)],
                                stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=300, check=False)
    finally:
        os.close(write_end)
    assert result.returncode == 141, result.stderr
    assert result.stderr == ""
