"""CLI runs in separate processes (a forkserver with the package imported), killable at kill points."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from eagle3_synth.cli import main
from eagle3_synth.run.kill_points import KILL_ENV

from ..conftest import KIMI_TOKENIZER
from ..support.built_datasets import KIMI_CONFIG, kimi_outputs, write_prompts

SAMPLES = 30
KILLED = -signal.SIGKILL

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
    "eagle3_synth_builders", "transformers.models.auto.tokenization_auto", "transformers.tokenization_utils_tokenizers",
    "transformers.convert_slow_tokenizer", "transformers.models.auto.modeling_auto", "tests.support.cli_processes",
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
