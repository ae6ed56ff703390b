"""Builds side by side: eight configs into one --out at once, and two builds of one config.

README suggests running configs in parallel; they share the folder (README.md, the install of
each config), and two builds of one config share a run directory. Each concurrency case is
sequenced by kill points (a process stopped with SIGSTOP where it holds a lock) and by what the
processes write, never by timing.
"""

from __future__ import annotations

import json
import socket

import pytest
from datasets import load_dataset
from huggingface_hub import DatasetCard

from eagle3_synth.dataset.folder import built_configs

from ..conftest import KIMI_TOKENIZER
from ..support.built_datasets import KIMI_CONFIG
from ..support.cli_processes import SAMPLES, config_rows, replay_inputs
from ..support.cli_runs import write_replay
from ..support.process_control import finish, start_cli, stop_all, stopped_or_exited, wait_until

CONFIGS = ["B1_glaive", "B2_hermes_fc", "B3_ultrachat", "B4_mixturethoughts", "B5_openthoughts", "B6_sharegpt",
           "B7_magpie", "B8_opencodereasoning"]
ROUNDS = 5


def listed_configs(out) -> list[str]:
    return [c["config_name"] for c in DatasetCard.load(out / "README.md").data.to_dict()["configs"]]


def leftovers(out) -> list[str]:
    """Staging folders and temporary files a build should not leave in the folder."""
    return sorted(p.name for p in out.iterdir() if p.name.startswith(".") and p.name not in (".runs", ".eagle3-synth.lock"))


def text(path) -> str:
    return path.read_text() if path.exists() else ""


def build_argv(config: str, replay, out, *extra: str) -> list[str]:
    return ["build", config, "--model", str(KIMI_TOKENIZER), "--engine", "replay", "--replay", str(replay),
            "--out", str(out), *extra]


@pytest.mark.slow  # eight builds at once on the machine's cores
def test_eight_configs_built_into_one_folder_at_once_are_all_listed_and_load(tmp_path, kimi_tokenizer):
    write_replay(tmp_path / "replay.jsonl", kimi_tokenizer, 12)
    rows = None
    for attempt in range(ROUNDS):
        out = tmp_path / f"out-{attempt}"
        builds = [start_cli(build_argv(c, tmp_path / "replay.jsonl", out), tmp_path / f"{attempt}-{c}.txt")
                  for c in CONFIGS]
        try:
            codes = [finish(b) for b in builds]
        finally:
            stop_all(builds)
        assert codes == [0] * len(CONFIGS), [(tmp_path / f"{attempt}-{c}.txt").read_text() for c in CONFIGS]
        assert listed_configs(out) == CONFIGS, f"round {attempt}"
        assert built_configs(out) == CONFIGS
        assert leftovers(out) == []
        loaded = {c: len(load_dataset(str(out), c, split="train")) for c in CONFIGS}
        assert all(loaded.values()), loaded
        assert rows in (None, loaded)  # every round the same folder
        rows = loaded


def test_a_build_that_waits_for_the_folder_is_listed_after_it(tmp_path, kimi_tokenizer):
    """The race the folder's lock closes, forced: the first build has rendered README.md (with only
    its own config) and is stopped before writing it; the second build must wait for it, and so
    its README, written after, lists both."""
    write_replay(tmp_path / "replay.jsonl", kimi_tokenizer, 12)
    out = tmp_path / "out"
    first = start_cli(build_argv("B1_glaive", tmp_path / "replay.jsonl", out), tmp_path / "first.txt",
                      kill_at="readme.rendered:1:STOP")
    second = None
    try:
        wait_until(lambda: stopped_or_exited(first), "the first build to stop with README.md rendered")
        assert first.exitcode is None
        second = start_cli(build_argv("B3_ultrachat", tmp_path / "replay.jsonl", out), tmp_path / "second.txt")
        waiting = f"B3_ultrachat: waiting for pid {first.pid} on host {socket.gethostname()}"
        wait_until(lambda: waiting in text(tmp_path / "second.txt") or second.exitcode is not None,
                   "the second build to wait for the folder")
        assert waiting in (tmp_path / "second.txt").read_text(), (tmp_path / "second.txt").read_text()
        assert f"to finish writing into {out}" in (tmp_path / "second.txt").read_text()
        assert finish(first) == 0
        assert finish(second) == 0
    finally:
        stop_all([p for p in (first, second) if p is not None])
    assert listed_configs(out) == ["B1_glaive", "B3_ultrachat"]
    assert len(load_dataset(str(out), "B1_glaive", split="train")) == 6
    assert len(load_dataset(str(out), "B3_ultrachat", split="train")) == 3


def test_two_builds_of_one_config_at_once_one_generates_the_other_is_refused(tmp_path, kimi_tokenizer):
    """Started together, both race for the run directory's lock; the winner stops at a kill point
    while holding it, so the other must be refused, naming it; then the winner finishes intact."""
    generation = replay_inputs(tmp_path / "inputs", kimi_tokenizer)
    for attempt in range(4):
        out = tmp_path / f"out-{attempt}"
        argv = ["build", KIMI_CONFIG, *generation, "--out", str(out)]
        outputs = [tmp_path / f"{attempt}-{i}.txt" for i in range(2)]
        builds = [start_cli(argv, output, kill_at="run.claimed:1:STOP") for output in outputs]
        try:
            wait_until(lambda: all(stopped_or_exited(b) for b in builds), "one build stopped, the other refused")
            refused = [i for i, b in enumerate(builds) if b.exitcode is not None]
            assert len(refused) == 1, [o.read_text() for o in outputs]
            loser, winner = builds[refused[0]], builds[1 - refused[0]]
            assert loser.exitcode == 2
            error = outputs[refused[0]].read_text()
            assert (f"eagle3-synth build: error: run directory {out / '.runs' / KIMI_CONFIG} (all samples) is being "
                    f"generated by pid {winner.pid} on host {socket.gethostname()} since ") in error, error
            assert finish(winner) == 0
        finally:
            stop_all(builds)
        printed = outputs[1 - refused[0]].read_text()
        assert f"{KIMI_CONFIG}: {SAMPLES} prompts kept (0 rejected), 0 already in" in printed
        assert f"{SAMPLES} generated" in printed
        assert [r["sample_id"] for r in config_rows(out)] == list(range(SAMPLES))
        assert len(load_dataset(str(out), KIMI_CONFIG, split="train")) == SAMPLES
        assert leftovers(out) == []


def test_a_second_build_with_other_settings_leaves_the_first_intact(tmp_path, kimi_tokenizer):
    """The first build holds the run (stopped while generating, its staging folder in use); a second
    with other settings is refused and must not touch the first's files on its way out."""
    generation = replay_inputs(tmp_path / "inputs", kimi_tokenizer)
    out = tmp_path / "out"
    first = start_cli(["build", KIMI_CONFIG, *generation, "--out", str(out)], tmp_path / "first.txt",
                      kill_at="journal.after_write:3:STOP")
    second = None
    try:
        wait_until(lambda: stopped_or_exited(first), "the first build to stop mid-generation")
        assert first.exitcode is None
        staging = sorted(p.name for p in out.glob(".assemble-*"))
        assert len(staging) == 1
        owner = json.loads((out / staging[0] / ".owner.json").read_text())
        assert owner["pid"] == first.pid
        second = start_cli(["build", KIMI_CONFIG, *generation, "--out", str(out), "--temperature", "0.7"],
                           tmp_path / "second.txt")
        assert finish(second) == 2
        assert f"(all samples) is being generated by pid {first.pid}" in (tmp_path / "second.txt").read_text()
        assert sorted(p.name for p in out.glob(".assemble-*")) == staging
        assert finish(first) == 0
    finally:
        stop_all([p for p in (first, second) if p is not None])
    assert [r["sample_id"] for r in config_rows(out)] == list(range(SAMPLES))
    assert leftovers(out) == []
