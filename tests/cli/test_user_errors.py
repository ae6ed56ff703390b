"""Every documented bad input of the generating commands, table-driven: the exit status, one line of
stderr naming the option, file or folder, no traceback, and nothing built or journaled before lost.

Each case runs against a copy of one finished build (its dataset folder and its run directory under
`.runs/`), snapshotted byte for byte before the command and compared after it. Cases whose --out
does not exist yet also check that the failed command left no folder behind.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from eagle3_synth.cli import main
from eagle3_synth.prompts.configs import sample_prompts_path
from eagle3_synth.run.directory import RunDirectory

from ..conftest import KIMI_TOKENIZER, TINY_MODEL
from ..support.cli_runs import write_replay

CONFIG = "B1_glaive"
PROMPTS = str(sample_prompts_path(CONFIG))  # given explicitly: no "bundled sample prompts" warning


def replay_args(w: Path) -> list[str]:
    return ["--model", str(KIMI_TOKENIZER), "--engine", "replay", "--replay", str(w / "replay.jsonl")]


def build(w: Path, *extra: str, out: str = "ds") -> list[str]:
    return ["build", CONFIG, *replay_args(w), "--prompts", PROMPTS, "--out", str(w / out), *extra]


def run_dir(w: Path) -> Path:
    return w / "ds" / ".runs" / CONFIG


@pytest.fixture(scope="module")
def built(tmp_path_factory, kimi_tokenizer) -> Path:
    """A finished build: ds/ (the dataset) and ds/.runs/B1_glaive (its run)."""
    root = tmp_path_factory.mktemp("built")
    write_replay(root / "replay.jsonl", kimi_tokenizer, 6)
    assert main(build(root)) == 0
    return root


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def damaged_copy(source: Path, w: Path, name: str, damage: Callable[[Path], None]) -> Path:
    target = w / name
    shutil.copytree(source, target)
    damage(target)
    return target


def truncate_weights(folder: Path) -> None:
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:5000])


def break_template(folder: Path) -> None:
    template = folder / "chat_template.jinja"
    text = template.read_text(encoding="utf-8")
    assert "{%- for" in text
    template.write_text(text.replace("{%- for", "{%- fr", 1), encoding="utf-8")


@dataclass(frozen=True)
class Case:
    name: str
    argv: Callable[[Path], list[str]]
    message: Callable[[Path], str]  # a part of the one stderr line
    code: int = 2
    prepare: Callable[[Path], None] | None = None  # damage made before the snapshot
    new_out: str | None = None  # an --out that did not exist: it must not exist after


def number(option: str, value: str, message: str, command: str = "build") -> Case:
    def argv(w: Path) -> list[str]:
        if command == "build":
            return build(w, option, value)
        return ["generate", CONFIG, *replay_args(w), "--prompts", PROMPTS, "--run-dir", str(run_dir(w)), option, value]
    return Case(f"{command} {option} {value}", argv, lambda w: f"eagle3-synth {command}: error: {message}")


CASES = [
    # -- numbers: NaN, inf and out of range, before anything loads --
    number("--temperature", "nan", "--temperature must be a finite number >= 0, got nan"),
    number("--temperature", "inf", "--temperature must be a finite number >= 0, got inf"),
    number("--temperature", "nan", "--temperature must be a finite number >= 0, got nan", command="generate"),
    number("--temperature", "-1", "--temperature must be >= 0, got -1.0"),
    number("--top-p", "0", "--top-p must be > 0 and <= 1, got 0.0"),
    number("--top-p", "1.5", "--top-p must be > 0 and <= 1, got 1.5"),
    number("--top-k", "0", "--top-k must be >= 1 (or -1), got 0"),
    number("--top-k", "-2", "--top-k must be >= 1 (or -1), got -2"),
    number("--max-new-tokens", "0", "--max-new-tokens must be >= 1, got 0"),
    number("--limit", "0", "--limit must be >= 1, got 0"),
    number("--scan-limit", "0", "--scan-limit must be >= 1, got 0"),
    number("--max-context", "0", "--max-context must be >= 1, got 0"),
    number("--samples-per-prompt", "0", "--samples-per-prompt must be >= 1, got 0"),
    number("--max-hours", "0", "--max-hours must be > 0, got 0.0"),
    number("--max-hours", "nan", "--max-hours must be a finite number > 0, got nan"),
    number("--batch-size", "0", "--batch-size must be >= 1, got 0"),
    number("--max-in-flight", "0", "--max-in-flight must be >= 1, got 0"),
    number("--request-timeout", "0", "--request-timeout must be > 0, got 0.0"),
    number("--request-timeout", "nan", "--request-timeout must be a finite number > 0, got nan"),
    number("--max-retries", "-1", "--max-retries must be >= 0, got -1"),
    number("--num-shards", "0", "--num-shards must be >= 1, got 0", command="generate"),
    number("--shard-index", "-1", "--shard-index must be >= 0, got -1", command="generate"),
    # -- usage --
    Case("unknown option", lambda w: build(w, "--temprature", "0"),
         lambda w: "eagle3-synth build: error: unrecognized arguments: --temprature 0 (did you mean --temperature?) "
                   "(see eagle3-synth build --help)"),
    Case("no --out", lambda w: ["build", CONFIG, *replay_args(w)],
         lambda w: "eagle3-synth build: error: the following arguments are required: --out"),
    Case("generate without --run-dir", lambda w: ["generate", CONFIG, *replay_args(w)],
         lambda w: "eagle3-synth generate: error: the following arguments are required: --run-dir"),
    # -- devices --
    Case("--device on another engine", lambda w: build(w, "--device", "cpu"),
         lambda w: "--device is not used by --engine replay, only by --engine transformers: give --engine "
                   "transformers, or drop --device"),
    Case("--device nonsense", lambda w: ["build", CONFIG, "--model", str(TINY_MODEL), "--prompts", PROMPTS,
                                         "--device", "gpu0", "--out", str(w / "new")],
         lambda w: "--device gpu0: not a torch device", new_out="new"),
    # -- assembling only (no --model): a generating option would be ignored --
    Case("assemble-only with --engine", lambda w: ["build", CONFIG, "--run-dir", str(run_dir(w)), "--out",
                                                   str(w / "new"), "--engine", "sglang-http", "--url", "http://a:1"],
         lambda w: "eagle3-synth build: error: --engine applies to generating, and nothing is generated without "
                   "--model (or --tokenizer, --replay): give one to generate, or drop --engine to assemble --run-dir",
         new_out="new"),
    Case("assemble-only with --temperature", lambda w: ["build", CONFIG, "--run-dir", str(run_dir(w)),
                                                        "--temperature", "0.7", "--out", str(w / "new")],
         lambda w: "eagle3-synth build: error: --temperature applies to generating", new_out="new"),
    # -- output paths --
    Case("--out is a file", lambda w: build(w, out="afile"), lambda w: f"--out {w / 'afile'}: is a file, not a folder",
         prepare=lambda w: (w / "afile").write_text("mine")),
    Case("--out under a file", lambda w: build(w, out="afile/ds"),
         lambda w: f"--out {w / 'afile' / 'ds'}: cannot be made: {w / 'afile'} is a file, not a folder",
         prepare=lambda w: (w / "afile").write_text("mine")),
    # -- input files and folders --
    Case("missing --replay", lambda w: ["build", CONFIG, "--model", str(KIMI_TOKENIZER), "--engine", "replay",
                                        "--replay", str(w / "missing.jsonl"), "--prompts", PROMPTS,
                                        "--out", str(w / "new")],
         lambda w: f"--replay {w / 'missing.jsonl'}: no such file", new_out="new"),
    Case("missing --prompts", lambda w: ["build", CONFIG, *replay_args(w), "--prompts", str(w / "missing.jsonl"),
                                         "--out", str(w / "new")],
         lambda w: f"--prompts {w / 'missing.jsonl'}: no such file", new_out="new"),
    Case("missing --source-file", lambda w: ["build", CONFIG, *replay_args(w), "--source-file", str(w / "gone.json"),
                                             "--out", str(w / "new")],
         lambda w: f"--source-file {w / 'gone.json'}: no such file", new_out="new"),
    Case("--source-file is a folder", lambda w: ["build", CONFIG, *replay_args(w), "--source-file", str(w / "ds"),
                                                 "--out", str(w / "new")],
         lambda w: f"--source-file {w / 'ds'}: is a directory, not a file", new_out="new"),
    Case("missing --model", lambda w: ["build", CONFIG, "--model", str(w / "no-model"), "--out", str(w / "new")],
         lambda w: f"--model {w / 'no-model'}: no such folder", new_out="new"),
    Case("corrupt run.json", lambda w: build(w),
         lambda w: f"{run_dir(w) / 'run.json'}: not a valid run.json (",
         prepare=lambda w: (run_dir(w) / "run.json").write_text('{"fingerprint": ')),
    Case("truncated weights", lambda w: ["build", CONFIG, "--model", str(w / "model"), "--prompts", PROMPTS,
                                         "--out", str(w / "new")],
         lambda w: f"--model {w / 'model'}: weights file model.safetensors is damaged (truncated: ",
         prepare=lambda w: damaged_copy(TINY_MODEL, w, "model", truncate_weights), new_out="new"),
    Case("corrupt config.json", lambda w: ["build", CONFIG, "--model", str(w / "model"), "--prompts", PROMPTS,
                                           "--max-context", "4096", "--out", str(w / "new")],
         lambda w: f"--model {w / 'model'}: config.json is not valid JSON (",
         prepare=lambda w: damaged_copy(TINY_MODEL, w, "model", lambda f: (f / "config.json").write_text("{bad")),
         new_out="new"),
    Case("template syntax error", lambda w: ["build", CONFIG, "--tokenizer", str(w / "tok"), *replay_args(w)[2:],
                                             "--prompts", PROMPTS, "--out", str(w / "new")],
         lambda w: f"--tokenizer {w / 'tok'}: the chat template has a syntax error at line ",
         prepare=lambda w: damaged_copy(KIMI_TOKENIZER, w, "tok", break_template), new_out="new"),
]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_a_bad_input_is_one_line_and_loses_nothing(case, built, tmp_path, capsys):
    w = tmp_path / "w"
    shutil.copytree(built, w)
    if case.prepare is not None:
        case.prepare(w)
    before = snapshot(w)
    try:
        code = main(case.argv(w))
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert code == case.code
    assert lines[0].startswith("eagle3-synth") and case.message(w) in lines[0]
    assert snapshot(w) == before, "a refused command changed what was built or journaled"
    if case.new_out:
        assert not (w / case.new_out).exists(), "a failed build left its --out behind"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_out_is_refused_before_loading(built, tmp_path, capsys):
    w = tmp_path / "w"
    shutil.copytree(built, w)
    locked = w / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        code = main(build(w, out="locked/ds"))
    finally:
        locked.chmod(0o755)
    err = capsys.readouterr().err
    assert code == 2 and err.strip().endswith("not writable (its nearest existing folder "
                                              f"{locked} is not writable)")


def test_cuda_without_cuda_is_refused_before_loading(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    code = main(["build", CONFIG, "--model", str(TINY_MODEL), "--prompts", PROMPTS, "--device", "cuda",
                 "--out", str(tmp_path / "ds")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("eagle3-synth build: error: --device cuda: no cuda device is available")
    assert len(err.splitlines()) == 1 and not (tmp_path / "ds").exists()


class FullDisk:
    """A journal file on a disk that fills up after `room` lines: the real file, whose further
    writes fail with ENOSPC as a full disk's do (the fault is injected; the file and the journal are real)."""

    def __init__(self, handle, room: int):
        self.handle, self.room = handle, room

    def write(self, data: bytes) -> int:
        if data.endswith(b"\n"):
            if self.room <= 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            self.room -= 1
        return self.handle.write(data)

    def __getattr__(self, name):
        return getattr(self.handle, name)


def test_a_full_disk_is_one_line_naming_the_journal_and_the_run_resumes(tmp_path, kimi_tokenizer, capsys,
                                                                       monkeypatch):
    from eagle3_synth.run import journal

    write_replay(tmp_path / "replay.jsonl", kimi_tokenizer, 6)
    real_open = journal.JournalWriter._open_segment

    def open_on_a_full_disk(self):
        handle = real_open(self)
        # Two results fit; the third's second half does not (a torn line, which readers skip).
        self._handle = FullDisk(handle, room=2)
        return self._handle

    monkeypatch.setattr(journal.JournalWriter, "_open_segment", open_on_a_full_disk)
    code = main(build(tmp_path))
    err = capsys.readouterr().err
    [path] = RunDirectory(run_dir(tmp_path)).journal_files()
    assert code == 2 and "Traceback" not in err and len(err.splitlines()) == 1
    assert err.startswith(f"eagle3-synth build: error: {path}: No space left on device; everything written before "
                          "it is kept")
    index = RunDirectory(run_dir(tmp_path)).scan()
    assert (index.sample_ids.tolist(), index.torn) == ([0, 1], 1), "the results before the full disk are kept"

    monkeypatch.undo()
    assert main(build(tmp_path)) == 0
    printed = capsys.readouterr().out
    assert "2 already in" in printed and "4 generated" in printed
    assert not (tmp_path / "ds" / ".assemble-B1_glaive").exists()


def test_debug_shows_the_traceback_and_an_unexpected_error_is_one_line(tmp_path, capsys, monkeypatch, built):
    from eagle3_synth.cli import build as build_command

    def broken(args):
        raise RuntimeError("something no check foresaw\nsecond line")

    monkeypatch.setattr(build_command, "run", broken)
    assert main(build(built)) == 1
    err = capsys.readouterr().err
    assert err == ("eagle3-synth build: error: RuntimeError: something no check foresaw "
                   "(--debug for the traceback)\n")
    assert main(["--debug", *build(built)]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and 'raise RuntimeError("something no check foresaw' in err
    assert err.splitlines()[-1] == "eagle3-synth build: error: RuntimeError: something no check foresaw " \
                                   "(--debug for the traceback)"


def test_ctrl_c_outside_generation_exits_130(capsys, monkeypatch, built):
    from eagle3_synth.cli import build as build_command

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(build_command, "run", interrupted)
    assert main(build(built)) == 130
    assert capsys.readouterr().err == ("eagle3-synth build: interrupted; what was written is kept: run the same "
                                       "command again to continue\n")


def _cli(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "eagle3_synth.cli", *argv], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300)


def test_in_a_real_process_errors_are_one_line_without_a_traceback(built, tmp_path):
    """The same rules through the console entry point (logging to stderr, a real exit status)."""
    w = tmp_path / "w"
    shutil.copytree(built, w)
    before = snapshot(w)
    done = _cli(*build(w, "--temperature", "nan"))
    assert (done.returncode, done.stderr) == (2, "eagle3-synth build: error: --temperature must be a finite "
                                                 "number >= 0, got nan\n")
    done = _cli(*build(w, "--replay", str(w / "missing.jsonl")))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1] == f"eagle3-synth build: error: --replay {w / 'missing.jsonl'}: no such file"
    assert snapshot(w) == before


def test_an_unreachable_hub_for_publish_is_one_line(built, tmp_path):
    with socket.socket() as bound:  # bound, never listening: every connection is refused
        bound.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{bound.getsockname()[1]}"
        done = _cli("publish", str(built / "ds"), "org/eagle3-synth", "--tag", "v1.0.0",
                    env={"HF_ENDPOINT": url, "HF_TOKEN": "hf_test", "HF_HUB_OFFLINE": "0"})
    assert done.returncode == 2 and "Traceback" not in done.stderr
    last = done.stderr.splitlines()[-1]
    assert last.startswith(f"eagle3-synth publish: error: cannot connect to {url}/") and "Connection refused" in last


# -- --dry-run -----------------------------------------------------------------------------------------

def test_a_dry_run_prints_the_plan_and_writes_nothing(built, tmp_path, capsys):
    w = tmp_path / "w"
    w.mkdir()
    shutil.copy(built / "replay.jsonl", w / "replay.jsonl")
    prompts = w / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"messages": [{"role": "user", "content": text}]}) + "\n"
                               for text in ("Hi", "Hi", "Say <|im_end|> now", "What is 2+2?")), encoding="utf-8")
    before = snapshot(w)
    args = ["build", CONFIG, *replay_args(w), "--prompts", str(prompts), "--samples-per-prompt", "2",
            "--max-new-tokens", "64", "--out", str(w / "new"), "--dry-run"]
    assert main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{CONFIG}: dry run (no engine started, nothing written)"
    assert lines[1] == "  prompts: 2 kept, 2 rejected; rejects by reason: control_token=1, duplicate=1"
    assert lines[2] == "  rollouts: 4 (2 per prompt, 0 rejected)"
    assert lines[3] == "  samples: up to 4 to generate (one per turn), at most 64 new tokens each"
    assert lines[5] == f"  engine: replay (results from {w / 'replay.jsonl'})"
    assert lines[6] == f"  run directory: {w / 'new' / '.runs' / CONFIG} (new)"
    assert snapshot(w) == before and not (w / "new").exists()

    run = w / "run"
    assert main(["generate", *args[1:-3], "--run-dir", str(run), "--dry-run"]) == 0
    assert "  rollouts: 4 (2 per prompt, 0 rejected)" in capsys.readouterr().out and not run.exists()


def test_a_dry_run_names_the_dtype_the_engine_would_run(tmp_path, capsys):
    """The resolved dtype, never SGLang's `auto`: the checkpoint's own (tiny-kimi is float32), or --dtype."""
    args = ["build", CONFIG, "--model", str(TINY_MODEL), "--engine", "transformers", "--out", str(tmp_path / "o"),
            "--dry-run"]
    assert main(args) == 0
    engine = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("  engine: "))
    assert engine == f"  engine: transformers (model {TINY_MODEL}, dtype float32, device cpu, batch size 8)"
    assert main([*args, "--dtype", "bfloat16"]) == 0
    assert "dtype bfloat16, device cpu" in capsys.readouterr().out


def test_a_dry_run_of_a_started_run_says_where_it_stands(built, tmp_path, capsys):
    w = tmp_path / "w"
    shutil.copytree(built, w)
    before = snapshot(w)
    assert main(build(w, "--dry-run")) == 0
    out = capsys.readouterr().out
    assert f"  6 prompts kept (0 rejected) in {run_dir(w)}; 6 samples done, 0 failed, 0 to generate" in out
    assert "(started before)" in out and snapshot(w) == before
    # other settings are refused as a real run would refuse them
    assert main(build(w, "--dry-run", "--temperature", "0.9")) == 2
    assert "was started with different settings" in capsys.readouterr().err
