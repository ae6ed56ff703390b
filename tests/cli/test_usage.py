"""Errors a person can act on at the command line: a mistyped option names the command and the
option meant; `eagle3-synth` alone lists the commands."""

from __future__ import annotations

import pytest

from eagle3_synth.cli import COMMANDS, main

CONFIG = "B1_glaive"


def refused(argv: list[str], capsys) -> str:
    """The one stderr line of a command argparse refuses (exit 2, through SystemExit)."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    captured = capsys.readouterr()
    assert exited.value.code == 2 and captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    return lines[0]


def test_a_mistyped_option_names_the_command_and_the_option_meant(tmp_path, capsys):
    line = refused(["build", CONFIG, "--temprature", "0.5", "--out", str(tmp_path)], capsys)
    assert line == ("eagle3-synth build: error: unrecognized arguments: --temprature 0.5 (did you mean --temperature?) "
                    "(see eagle3-synth build --help)")
    line = refused(["inspect", str(tmp_path), CONFIG, "--sampel=3", "--no-mesages"], capsys)
    assert line == ("eagle3-synth inspect: error: unrecognized arguments: --sampel=3 --no-mesages (did you mean "
                    "--sample for --sampel, --no-messages for --no-mesages?) (see eagle3-synth inspect --help)")
    line = refused(["stats", str(tmp_path), "--zzz"], capsys)
    assert line == "eagle3-synth stats: error: unrecognized arguments: --zzz (see eagle3-synth stats --help)"


@pytest.mark.parametrize("argv", [[], ["-v"], ["--debug"]], ids=["bare", "-v", "--debug"])
def test_no_command_lists_the_commands_and_exits_2(argv, capsys):
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "required" not in captured.err
    assert captured.err.startswith("usage: eagle3-synth ")
    # argparse's list: each command at an indent of 4, its help beside it (wrapped lines further in).
    listed = [line.split()[0] for line in captured.err.splitlines() if line.startswith("    ") and line[4] != " "]
    assert listed == list(COMMANDS)
    assert "generate a config (resuming any earlier run)" in captured.err  # build's one line of help
