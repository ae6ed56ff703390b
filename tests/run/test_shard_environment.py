"""`--shard-index auto --num-shards auto`: a hand-written Slurm array (or a torchrun-style launcher)
names the shard through its environment, so the user's script needs no arithmetic."""

from __future__ import annotations

import pytest

from eagle3_synth.errors import ConfigError
from eagle3_synth.run.settings import GenerationSettings
from eagle3_synth.run.shards import Shard, resolve_auto, shard_from_environment

from ..support.built_datasets import KIMI_CONFIG
from ..support.cli_processes import replay_inputs
from ..support.cli_runs import run_cli

LAUNCHER_VARIABLES = ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MIN", "RANK", "WORLD_SIZE")


@pytest.fixture
def bare_environment(monkeypatch):
    """No launcher variables from the machine running the tests (a CI job may itself be in Slurm)."""
    for name in LAUNCHER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_a_slurm_array_task_is_its_shard(tmp_path, kimi_tokenizer, capsys, bare_environment):
    bare_environment.setenv("SLURM_ARRAY_TASK_ID", "2")
    bare_environment.setenv("SLURM_ARRAY_TASK_COUNT", "4")
    generation = replay_inputs(tmp_path / "inputs", kimi_tokenizer)
    code, printed = run_cli(["generate", KIMI_CONFIG, *generation, "--run-dir", str(tmp_path / "run"),
                             "--shard-index", "auto", "--num-shards", "auto"], capsys)
    assert code == 0, printed
    assert "B1_glaive shard 2 of 4: 7 prompts kept" in printed  # 30 prompts: ids 2, 6, ..., 26


def test_an_array_that_starts_above_zero_counts_from_its_first_task(bare_environment):
    # sbatch --array=1-16: SLURM_ARRAY_TASK_ID runs 1..16, SLURM_ARRAY_TASK_MIN is 1.
    environ = {"SLURM_ARRAY_TASK_ID": "16", "SLURM_ARRAY_TASK_COUNT": "16", "SLURM_ARRAY_TASK_MIN": "1"}
    assert shard_from_environment(environ) == (Shard(index=15, count=16), "SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT")


def test_torchrun_rank_and_world_size_when_there_is_no_array(bare_environment):
    bare_environment.setenv("RANK", "3")
    bare_environment.setenv("WORLD_SIZE", "8")
    settings = GenerationSettings(shard_index="auto", num_shards="auto")
    assert (settings.shard_index, settings.num_shards) == (3, 8)


def test_the_array_wins_over_rank_and_world_size():
    environ = {"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "2", "RANK": "0", "WORLD_SIZE": "8"}
    assert resolve_auto("auto", "auto", environ) == Shard(index=1, count=2)


def test_auto_with_no_launcher_names_the_variables(tmp_path, kimi_tokenizer, capsys, bare_environment):
    generation = replay_inputs(tmp_path / "inputs", kimi_tokenizer)
    code, printed = run_cli(["generate", KIMI_CONFIG, *generation, "--run-dir", str(tmp_path / "run"),
                             "--shard-index", "auto", "--num-shards", "auto"], capsys)
    assert code == 2
    assert ("eagle3-synth generate: error: --shard-index auto --num-shards auto read SLURM_ARRAY_TASK_ID and "
            "SLURM_ARRAY_TASK_COUNT (a Slurm job array) or RANK and WORLD_SIZE (torchrun-style launchers); "
            "none of them is set") in printed
    assert not (tmp_path / "run").exists()


def test_auto_needs_both_options():
    with pytest.raises(ConfigError, match=r"--shard-index auto and --num-shards auto go together .*"
                                          r"got --shard-index auto --num-shards 4"):
        resolve_auto("auto", 4, {"RANK": "0", "WORLD_SIZE": "4"})


def test_an_environment_out_of_range_is_named():
    with pytest.raises(ConfigError, match=r"--shard-index auto: RANK/WORLD_SIZE give --shard-index must be in 0..3 "
                                          r"for --num-shards 4, got 4"):
        resolve_auto("auto", "auto", {"RANK": "4", "WORLD_SIZE": "4"})
    with pytest.raises(ConfigError, match=r"SLURM_ARRAY_TASK_ID='x' and SLURM_ARRAY_TASK_COUNT='4' are not whole"):
        resolve_auto("auto", "auto", {"SLURM_ARRAY_TASK_ID": "x", "SLURM_ARRAY_TASK_COUNT": "4"})


def test_a_word_other_than_auto_is_refused_by_the_parser(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_cli(["generate", KIMI_CONFIG, "--run-dir", str(tmp_path / "run"), "--shard-index", "first"], capsys)
    assert exit_info.value.code == 2
    assert "--shard-index: expected a whole number or auto, got 'first'" in capsys.readouterr().err
