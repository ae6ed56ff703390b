"""Crash test: kill `eagle3-synth build` at many points, resume each time, get the same dataset.

Each build runs in its own process (forked from a forkserver that has the package imported, so a
run costs a fraction of a second instead of an interpreter start) and is killed with SIGKILL by the
`EAGLE3_SYNTH_KILL_AT` hook at an exact place: after the run is claimed, with prompts half
published, before / in the middle of / after writing a journal line, while assembling rows, after
the Parquet files are installed. The engine is `replay`, so outputs are deterministic and the
final dataset must equal an uninterrupted build row for row: none lost, none duplicated.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from eagle3_synth.cli import main
from eagle3_synth.cli.options import EXIT_RESUMABLE
from eagle3_synth.run.kill_points import KILL_ENV
from eagle3_synth.run.directory import RunDirectory

from .built_datasets import KIMI_CONFIG, kimi_outputs, write_prompts
from .conftest import KIMI_TOKENIZER

SAMPLES = 30
KILLED = -signal.SIGKILL

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
    ("journal.after_write:1", KILLED),  # 14
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


def _cli(argv: list[str], kill_at: str | None, output: str | None) -> None:
    """Child process body: the CLI, with the kill hook armed, printing into `output` if given
    (the forkserver's own stdout is whatever it inherited when it started)."""
    if kill_at:
        os.environ[KILL_ENV] = kill_at
    if output:
        sys.stdout = open(output, "w", encoding="utf-8")
    sys.exit(main(argv))


_CONTEXT = multiprocessing.get_context("forkserver")
# Everything a build imports, tokenizer machinery included (transformers imports it lazily).
_CONTEXT.set_forkserver_preload([
    "eagle3_synth.cli", "eagle3_synth.cli.build", "eagle3_synth.cli.generate", "eagle3_synth.dataset.folder",
    "builders", "transformers.models.auto.tokenization_auto", "transformers.tokenization_utils_tokenizers",
    "transformers.convert_slow_tokenizer", "transformers.models.auto.modeling_auto", __name__,
])


def start_cli_process(
    argv: list[str], kill_at: str | None = None, output: Path | None = None
) -> multiprocessing.process.BaseProcess:
    """Start the CLI in a separate process; what it prints goes to the file `output`."""
    process = _CONTEXT.Process(target=_cli, args=(argv, kill_at, str(output) if output else None))
    process.start()
    return process


def exit_code(process: multiprocessing.process.BaseProcess, timeout: float = 120) -> int:
    """The process's exit code (negative: killed by that signal); fails the test if it hangs."""
    process.join(timeout)
    if process.exitcode is None:
        process.kill()
        pytest.fail(f"a CLI process was still running after {timeout}s")
    return process.exitcode


def run_cli_process(argv: list[str], kill_at: str | None = None) -> int:
    return exit_code(start_cli_process(argv, kill_at))


def replay_inputs(root: Path, tokenizer, samples: int = SAMPLES) -> list[str]:
    """Prompts + replay outputs for the Kimi fixture; the CLI arguments that generate them."""
    import json

    root.mkdir(parents=True, exist_ok=True)
    write_prompts(root / "prompts.jsonl", samples)
    replay = root / "replay.jsonl"
    replay.write_text("".join(json.dumps(r) + "\n" for r in kimi_outputs(tokenizer, samples)), encoding="utf-8")
    return ["--model", str(KIMI_TOKENIZER), "--engine", "replay", "--replay", str(replay),
            "--prompts", str(root / "prompts.jsonl")]


def config_rows(out: Path, config: str = KIMI_CONFIG) -> list[dict]:
    files = sorted((out / config).glob("train-*.parquet"))
    assert files, f"no Parquet files in {out / config}"
    return [row for f in files for row in pq.read_table(f).to_pylist()]


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
