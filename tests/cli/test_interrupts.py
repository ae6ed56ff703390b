"""Ctrl-C is one status whatever the moment: 130, one line on stderr, never a traceback; where a run
was under way the line says the same command continues, and it does.

Each run is the real `eagle3-synth` console script in a process of its own, stopped (SIGSTOP) by the
`EAGLE3_SYNTH_KILL_AT` hook at an exact place; the test then sends it a real SIGINT and lets it go on,
as a terminal's Ctrl-C would reach it there. No timer decides where it lands.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from eagle3_synth import cli
from eagle3_synth.cli import EXIT_INTERRUPTED, main

from ..support.built_datasets import KIMI_CONFIG
from ..support.cli_processes import config_rows, replay_inputs
from ..support.process_control import HANG, stopped_at

CONSOLE_SCRIPT = Path(sys.executable).parent / "eagle3-synth"
SAMPLES = 12
CONTINUES = "run the same command again to continue"


def ctrl_c_at(argv: list[str], kill_at: str, log: Path) -> tuple[int, str]:
    """`eagle3-synth ARGV`, stopped at `kill_at`, then sent SIGINT and continued: (status, what it printed)."""
    code = stopped_at([str(CONSOLE_SCRIPT), *argv], kill_at, log, lambda process: os.kill(process.pid, signal.SIGINT))
    return code, log.read_text()


@pytest.mark.slow  # over 3.5 s of CPU: near the fast tier's 5 s on a slower machine
def test_ctrl_c_mid_generation_exits_130_and_the_same_command_continues(tmp_path, kimi_tokenizer):
    argv = ["build", KIMI_CONFIG, *replay_inputs(tmp_path / "inputs", kimi_tokenizer, SAMPLES), "--out",
            str(tmp_path / "out")]
    code, printed = ctrl_c_at(argv, "journal.before_write:3", tmp_path / "log")  # two results journaled
    assert code == EXIT_INTERRUPTED, printed
    assert f"  interrupted: {SAMPLES - 2} samples left; {CONTINUES}" in printed.splitlines()
    assert "Traceback" not in printed and "KeyboardInterrupt" not in printed
    done = subprocess.run([str(CONSOLE_SCRIPT), *argv], capture_output=True, text=True, timeout=HANG)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"2 already in {tmp_path / 'out' / '.runs' / KIMI_CONFIG}, {SAMPLES - 2} generated" in done.stdout
    assert [row["sample_id"] for row in config_rows(tmp_path / "out")] == list(range(SAMPLES))


def test_ctrl_c_as_the_command_starts_is_one_line(tmp_path, kimi_tokenizer):
    """Stopped before the command's modules are imported: Python's own handler would print the
    traceback of whichever import it interrupted."""
    argv = ["build", KIMI_CONFIG, *replay_inputs(tmp_path / "inputs", kimi_tokenizer, SAMPLES), "--out",
            str(tmp_path / "out")]
    code, printed = ctrl_c_at(argv, "cli.main:1", tmp_path / "log")
    assert code == EXIT_INTERRUPTED, printed
    assert printed == f"eagle3-synth build: interrupted; what was written is kept: {CONTINUES}\n"
    assert not (tmp_path / "out").exists()


def test_ctrl_c_before_generation_is_one_line(tmp_path, kimi_tokenizer):
    """Stopped with the prompts prepared and the engine about to start (where a model loads)."""
    argv = ["build", KIMI_CONFIG, *replay_inputs(tmp_path / "inputs", kimi_tokenizer, SAMPLES), "--out",
            str(tmp_path / "out")]
    code, printed = ctrl_c_at(argv, "prompts.ready:1", tmp_path / "log")
    assert code == EXIT_INTERRUPTED, printed
    assert printed.splitlines()[-1] == f"eagle3-synth build: interrupted; what was written is kept: {CONTINUES}"
    assert "Traceback" not in printed


def test_a_ctrl_c_a_library_swallowed_while_importing_still_stops_the_command(monkeypatch, capsys, tmp_path):
    """Some import caught the KeyboardInterrupt and went on: the handler noted the Ctrl-C all the same."""
    make_parser = cli.make_parser

    def swallowing(only: str | None = None):
        try:
            os.kill(os.getpid(), signal.SIGINT)
        except BaseException:  # noqa: BLE001 - what the library did
            pass
        return make_parser(only)

    monkeypatch.setattr(cli, "make_parser", swallowing)
    assert main(["stats", str(tmp_path)]) == EXIT_INTERRUPTED
    assert capsys.readouterr().err == "eagle3-synth stats: interrupted\n"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
