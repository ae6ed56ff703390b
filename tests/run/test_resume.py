"""Crash test: kill `eagle3-synth build` at many points, resume each time, get the same dataset.

Each build runs in its own process (forked from a forkserver that has the package imported, so a
run costs a fraction of a second instead of an interpreter start) and is killed with SIGKILL by the
`EAGLE3_SYNTH_KILL_AT` hook at an exact place: after the run is claimed, with prompts half
published, before / in the middle of / after writing a journal line, while assembling rows, after
the Parquet files are installed. The engine is `replay`, so outputs are deterministic and the
final dataset must equal an uninterrupted build row for row: none lost, none duplicated.
"""

from __future__ import annotations



from eagle3_synth.cli import main
from eagle3_synth.cli import EXIT_INTERRUPTED
from eagle3_synth.cli.options import EXIT_RESUMABLE
from eagle3_synth.run.directory import RunDirectory

from ..conftest import TINY_MODEL
from ..support.built_datasets import KIMI_CONFIG
from ..support.cli_processes import KILLED, SAMPLES, config_rows, replay_inputs, run_cli_process

# (kill point, exit status). Journal points count results written by *that* process, so the
# progress of each run is known: e.g. `journal.after_write:2` journals 2 samples, then dies.
# Together they use up 29 of the 30 samples, so every point is really reached.
KILLS = [
    ("run.claimed:1", KILLED),
    ("prompts.written:1", KILLED),  # prompts written aside, not yet published
    ("prompts.ready:1", KILLED),
    ("journal.mid_write:1", KILLED),  # torn line: half of the first result
    ("journal.before_write:1", KILLED),
    ("journal.after_write:1", KILLED),  # 1 done
    ("journal.mid_write:2", KILLED),  # 2
    ("journal.after_write:2", KILLED),  # 4
    ("journal.before_write:3", KILLED),  # 6
    ("journal.mid_write:3", KILLED),  # 8
    ("journal.after_write:2:TERM", EXIT_RESUMABLE),  # 10: SIGTERM stops cleanly, resumable
    ("journal.mid_write:4", KILLED),  # 13
    ("journal.after_write:1:INT", EXIT_INTERRUPTED),  # 14: Ctrl-C stops cleanly too
    ("journal.mid_write:2", KILLED),  # 15
    ("journal.before_write:2", KILLED),  # 16
    ("journal.mid_write:5", KILLED),  # 20
    ("journal.after_write:3", KILLED),  # 23
    ("journal.mid_write:3", KILLED),  # 25
    ("journal.after_write:2", KILLED),  # 27
    ("journal.mid_write:3", KILLED),  # 29
    ("journal.mid_write:1", KILLED),  # the last sample torn
    ("assemble.row:7", KILLED),  # generation completes, assembly dies mid-way
    ("assemble.row:30", KILLED),  # ... at its last row
    ("assemble.installed:1", KILLED),  # Parquet installed, README not yet rewritten
]


def test_killed_anywhere_resumes_to_the_same_dataset(tmp_path, kimi_tokenizer):
    generation = replay_inputs(tmp_path / "inputs", kimi_tokenizer)
    assert main(["build", KIMI_CONFIG, *generation, "--out", str(tmp_path / "reference")]) == 0
    reference = config_rows(tmp_path / "reference")
    assert [r["sample_id"] for r in reference] == list(range(SAMPLES))

    out = tmp_path / "crashed"
    argv = ["build", KIMI_CONFIG, *generation, "--out", str(out)]
    for kill_at, expected in KILLS:
        assert run_cli_process(argv, kill_at) == expected, f"kill point {kill_at} was not reached as planned"
    assert run_cli_process(argv) == 0

    # The crashes really happened where planned: torn lines and many sessions are in the journal.
    index = RunDirectory(out / ".runs" / KIMI_CONFIG).scan()
    assert index.torn == sum(1 for k, _ in KILLS if k.startswith("journal.mid_write"))
    assert len(index.sessions) == sum(1 for k, _ in KILLS if k.startswith("journal.")) + 1
    assert index.duplicates == 0 and len(index.sample_ids) == SAMPLES

    assert config_rows(out) == reference
    assert not list(out.glob(".*assemble*")), "a killed assembly left its staging folder behind"
    from datasets import load_dataset

    loaded = load_dataset(str(out), KIMI_CONFIG, split="train")
    assert loaded["sample_id"] == list(range(SAMPLES))
    assert loaded.to_list() == reference


def test_max_hours_stops_cleanly_and_resumes(tmp_path, kimi_tokenizer, capsys):
    generation = replay_inputs(tmp_path / "inputs", kimi_tokenizer, samples=12)
    out = tmp_path / "out"
    # A deadline already past when the first prompt is handed out: nothing is generated.
    assert main(["build", KIMI_CONFIG, *generation, "--out", str(out), "--max-hours", "1e-9"]) == EXIT_RESUMABLE
    printed = capsys.readouterr().out
    assert "reached --max-hours: 12 samples left; run the same command again to continue" in printed
    assert not (out / KIMI_CONFIG).exists()  # no dataset from an unfinished run
    assert main(["build", KIMI_CONFIG, *generation, "--out", str(out)]) == 0
    assert main(["build", KIMI_CONFIG, *generation, "--out", str(tmp_path / "reference")]) == 0
    assert config_rows(out) == config_rows(tmp_path / "reference")


def test_a_sampled_transformers_run_killed_mid_batch_resumes_to_the_rows_of_an_unbatched_run(tmp_path):
    """The transformers engine sampling (temperature 1) multi-turn conversations, two rollouts each:
    killed after 2 of its first batch of 4 were journaled, then resumed (its first batch then holds
    other samples), it writes the rows of an uninterrupted run with --batch-size 1: seeds per sample,
    since seeding per batch would change every row after the cut."""
    argv = ["build", "B2_hermes_fc", "--model", str(TINY_MODEL), "--limit", "3", "--samples-per-prompt", "2",
            "--max-new-tokens", "48", "--temperature", "1.0", "--seed", "5"]
    assert main([*argv, "--batch-size", "1", "--out", str(tmp_path / "reference")]) == 0
    reference = config_rows(tmp_path / "reference", "B2_hermes_fc")
    assert len(reference) > 6, "later turns were generated too"
    rollouts: dict[tuple, set] = {}  # the same turn of one source conversation, rollout by rollout
    for row in reference:
        rollouts.setdefault((row["source_id"], row["turn"]), set()).add(tuple(row["output_ids"]))
    assert any(len(outputs) > 1 for outputs in rollouts.values()), "the rollouts were sampled, not greedy"

    crashed = [*argv, "--batch-size", "4", "--out", str(tmp_path / "crashed")]
    assert run_cli_process(crashed, "journal.after_write:2") == KILLED
    index = RunDirectory(tmp_path / "crashed" / ".runs" / "B2_hermes_fc").scan()
    assert len(index.sample_ids) == 2  # the first batch of 4 was cut after its second result
    assert run_cli_process(crashed) == 0
    assert config_rows(tmp_path / "crashed", "B2_hermes_fc") == reference
