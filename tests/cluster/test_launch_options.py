"""launch's and status's bad input: one line naming the option, nothing submitted."""

from __future__ import annotations

import pytest

from ..support.built_datasets import KIMI_CONFIG
from ..support.cli_processes import replay_inputs
from ..support.cli_runs import run_cli


@pytest.mark.parametrize("extra, message", [
    (["--executor", "slurm"], "--executor slurm needs --partition NAME (the partition of your GPU nodes)"),
    (["--executor", "ray", "--nodes-per-task", "2"],
     "--nodes-per-task > 1 is not wired to SGLang's multi-node engine yet: serve the model over several nodes"),
    (["--executor", "slurm", "--partition", "gpu", "--mem-per-cpu-gb", "0.5"],
     "--mem-per-cpu-gb must be whole gigabytes for Slurm, got 0.5"),
    (["--executor", "local", "--out", "ds"], "--out assembles once every shard is done, which only --wait sees"),
    (["--executor", "local", "--venv", "nowhere/bin/activate"], "--venv nowhere/bin/activate: no such file"),
])
def test_bad_launch_options_are_named_before_anything_runs(tmp_path, kimi_tokenizer, capsys, extra, message):
    generation = replay_inputs(tmp_path / "inputs", kimi_tokenizer)
    code, printed = run_cli(["launch", KIMI_CONFIG, *generation, "--run-dir", str(tmp_path / "run"), "--tasks", "4",
                             *extra], capsys)
    assert code == 2
    assert f"eagle3-synth launch: error: {message}" in printed
    assert not (tmp_path / "run").exists()


def test_launch_needs_a_run_directory(tmp_path, kimi_tokenizer, capsys):
    generation = replay_inputs(tmp_path / "inputs", kimi_tokenizer)
    code, printed = run_cli(["launch", KIMI_CONFIG, *generation, "--executor", "local", "--tasks", "2"], capsys)
    assert code == 2
    assert "eagle3-synth launch: error: launch needs --run-dir URL: the run directory every task journals into" in printed
