"""Real failures of the real SGLang 0.5.23 (CPU backend): an engine that dies, a server killed and
restarted, one that never comes back. Each run is stopped at an exact place by a kill point
(`EAGLE3_SYNTH_KILL_AT=journal.after_write:N:STOP`: the CLI stops itself after its N-th journal
line), so what happens to the engine happens between two known results, never on a timer.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from eagle3_synth.cli import EXIT_INTERRUPTED, EXIT_RESUMABLE, main
from eagle3_synth.engines.sglang.processes import descendants
from eagle3_synth.run.kill_points import KILL_ENV

from ...support.cli_processes import config_rows
from ...support.process_control import stopped_at, wait_until
from ...support.real_sglang import TINY_MODEL, RealServer, sglang_env, sglang_python
from ...support.row_parity import assert_same_rows


CONFIG = "B1_glaive"  # six bundled prompts
GREEDY = ["--model", str(TINY_MODEL), "--temperature", "0", "--max-new-tokens", "256", "--dtype", "bfloat16"]
AFTER_TWO = "journal.after_write:2"  # the run stops itself after its second result
HANG = 600  # a hang detector for a whole CLI run, never what a test asserts


def named(pids: set[int], prefix: str) -> list[int]:
    out = []
    for pid in pids:
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(prefix.encode()):
                out.append(pid)
        except OSError:
            pass
    return out


def journal_lines(out: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in (out / ".runs" / CONFIG).rglob("journal/*.jsonl"))


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("transformers")
    assert main(["build", CONFIG, *GREEDY, "--engine", "transformers", "--batch-size", "1", "--out", str(out)]) == 0
    return config_rows(out, CONFIG)


def in_process_build(out: Path) -> list[str]:
    return [str(Path(sglang_python()).parent / "eagle3-synth"), "build", CONFIG, *GREEDY, "--engine", "sglang",
            "--engine-arg", "device=cpu", "--engine-arg", "mem_fraction_static=0.1", "--max-in-flight", "1",
            "--out", str(out)]


def test_an_engine_whose_scheduler_dies_ends_the_run_with_75_naming_it_and_the_rerun_completes(reference, tmp_path):
    """SGLang's watchdog sees its scheduler gone and SIGQUITs eagle3-synth, where SGLang's own handler
    would tree-kill it (exit 137, no word): the run ends with one line naming the process and the
    engine's last log lines, exit 75, its journal intact; the same command then completes."""
    log, out = tmp_path / "first.log", tmp_path / "ds"
    engine_processes: set[int] = set()
    schedulers: list[int] = []

    def kill_the_scheduler(run: subprocess.Popen) -> None:
        engine_processes.update(descendants(run.pid))
        schedulers.extend(named(engine_processes, "sglang::scheduler"))
        assert len(schedulers) == 1, f"scheduler processes: {schedulers}"
        os.kill(schedulers[0], signal.SIGKILL)

    code = stopped_at(in_process_build(out), AFTER_TWO, log, kill_the_scheduler, sglang_env(), HANG)
    text = log.read_text()
    assert code == EXIT_RESUMABLE, text[-3000:]
    last = [line for line in text.split("\n") if line.startswith("eagle3-synth build: error:")]
    assert len(last) == 1 and "the engine died mid-run: sglang::scheduler" in last[0], text[-3000:]
    assert f"(pid {schedulers[0]}) was killed by signal 9" in last[0]
    assert "rerun the same command to continue; its last log lines:" in last[0]
    after = text[text.index(last[0]) + len(last[0]):].split("\n")[1:]
    tail = after[:next((i for i, line in enumerate(after) if not line.startswith("    ")), len(after))]
    assert tail, "the engine's last log lines"
    assert any(f"pid={schedulers[0]}" in line for line in tail), f"SGLang's own line on the dead process: {tail}"
    assert journal_lines(out) >= 2 + 1  # the two results (and the segment's header) stay
    assert not [pid for pid in engine_processes if Path(f"/proc/{pid}").exists()], "engine processes left behind"

    done = subprocess.run(in_process_build(out), capture_output=True, text=True, env=sglang_env(), timeout=HANG)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert_same_rows(config_rows(out, CONFIG), reference, TINY_MODEL)


def test_a_terminals_ctrl_c_mid_run_ends_it_with_130_in_one_line_and_the_rerun_completes(reference, tmp_path):
    """A terminal's Ctrl-C is SIGINT to the whole foreground process group, SGLang's scheduler and
    detokenizer included: they leave it to eagle3-synth (no traceback of theirs, no engine death
    reported), which stops once, with 130, its journal intact."""
    log, out = tmp_path / "first.log", tmp_path / "ds"
    engine_processes: set[int] = set()

    def ctrl_c(run: subprocess.Popen) -> None:
        engine_processes.update(descendants(run.pid))
        assert named(engine_processes, "sglang::scheduler"), engine_processes
        os.killpg(run.pid, signal.SIGINT)  # the run leads a session of its own: its group is the terminal's

    code = stopped_at(in_process_build(out), AFTER_TWO, log, ctrl_c, sglang_env(), HANG, start_new_session=True)
    text = log.read_text()
    assert code == EXIT_INTERRUPTED, text[-3000:]
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text[-3000:]
    last = text.rstrip("\n").split("\n")[-1]
    assert last.startswith("  interrupted: ") and last.endswith(" samples left; run the same command again to continue")
    # Killed on the way out; orphans once the run has exited, so they end (and are reaped) a moment later.
    wait_until(lambda: not [pid for pid in engine_processes if running(pid)], "the engine's processes to end")
    done = subprocess.run(in_process_build(out), capture_output=True, text=True, env=sglang_env(), timeout=HANG)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert_same_rows(config_rows(out, CONFIG), reference, TINY_MODEL)


def running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def test_an_engine_that_cannot_start_exits_2_with_sglangs_reason_in_one_line(tmp_path):
    """Chunked prefill off and a million-token prefill: SGLang 0.5.23 reserves 1.5 MB a token for
    activations (srt/arg_groups/memory_hook.py), its mem_fraction_static comes out negative on any
    machine, and its scheduler raises while starting. A rerun would fail the same way: exit 2 (not
    75), one line with SGLang's reason."""
    command = [str(Path(sglang_python()).parent / "eagle3-synth"), "build", CONFIG, *GREEDY, "--engine", "sglang",
               "--engine-arg", "device=cpu", "--engine-arg", "chunked_prefill_size=-1",
               "--engine-arg", "max_prefill_tokens=1000000", "--out", str(tmp_path / "out")]
    with open(tmp_path / "log", "wb") as handle:
        run = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=sglang_env())
    try:
        code = run.wait(HANG)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    text = (tmp_path / "log").read_text()
    assert code == 2, text[-3000:]
    last = [line for line in text.split("\n") if line.startswith("eagle3-synth build: error:")]
    assert len(last) == 1 and text.rstrip("\n").endswith(last[0]), text[-3000:]
    assert last[0].startswith("eagle3-synth build: error: --engine sglang: SGLang could not start: ValueError: Loaded "
                              "weights leave no GPU memory for the KV cache under --mem-fraction-static="), last[0]
    assert last[0].endswith("-- change what it names (SGLang's --flag-name is --engine-arg flag_name=VALUE here), "
                            "or free memory for it; rerun as is and it fails the same way")


def http_build(url: str, out: Path, *extra: str) -> list[str]:
    """An sglang-http build of CONFIG with this interpreter's eagle3-synth."""
    return [sys.executable, "-c", "import sys; from eagle3_synth.cli import main; sys.exit(main(sys.argv[1:]))",
            "build", CONFIG, *GREEDY, "--engine", "sglang-http", "--url", url, "--max-in-flight", "1",
            "--out", str(out), *extra]


def test_a_server_killed_and_restarted_mid_run_is_waited_for_and_nothing_is_lost_or_doubled(reference, tmp_path):
    port_log = tmp_path / "server.log"
    server = RealServer(port_log).start()

    def lose_and_restart(_run: subprocess.Popen) -> None:
        server.kill()  # a node lost: the server and its scheduler SIGKILLed
        server.start()  # the same port, a new process

    try:
        code = stopped_at(http_build(server.url, tmp_path / "ds"), AFTER_TWO, tmp_path / "run.log", lose_and_restart,
                          timeout=HANG)
    finally:
        server.stop()
    assert code == 0, (tmp_path / "run.log").read_text()[-3000:]
    assert_same_rows(config_rows(tmp_path / "ds", CONFIG), reference, TINY_MODEL)


def test_a_server_that_does_not_come_back_ends_the_run_with_75_and_the_rerun_completes(server, reference, tmp_path):
    lost = RealServer(tmp_path / "lost.log").start()
    try:
        code = stopped_at(http_build(lost.url, tmp_path / "ds", "--max-retries", "1"), AFTER_TWO,
                          tmp_path / "run.log", lambda _run: lost.kill(), timeout=HANG)
    finally:
        lost.stop()
    text = (tmp_path / "run.log").read_text()
    assert code == EXIT_RESUMABLE, text[-3000:]
    assert "no SGLang server could be reached" in text and "rerun the same command to continue" in text
    # The same run, pointed at a server that runs: it continues where the journal ends.
    assert main(["build", CONFIG, *GREEDY, "--engine", "sglang-http", "--url", server.url,
                 "--out", str(tmp_path / "ds")]) == 0
    assert_same_rows(config_rows(tmp_path / "ds", CONFIG), reference, TINY_MODEL)


def test_a_sampled_run_killed_and_split_in_two_shards_loses_and_doubles_nothing(server, tmp_path):
    """Sampled (temperature 0.8, a seed). SGLang 0.5.23 draws with a request's `sampling_seed` only
    under deterministic inference, whose CPU kernel this build lacks (README), so a sampled row is
    not reproducible across runs; what resume guarantees still holds: a journaled sample is kept,
    one that was in flight is generated once more, none is lost or doubled, every row is valid."""
    run_dir = tmp_path / "run"
    sampled = [CONFIG, "--model", str(TINY_MODEL), "--temperature", "0.8", "--seed", "0", "--max-new-tokens", "256",
               "--dtype", "bfloat16", "--engine", "sglang-http", "--url", server.url, "--run-dir", str(run_dir),
               "--num-shards", "2", "--max-in-flight", "1"]
    command = [sys.executable, "-c", "import sys; from eagle3_synth.cli import main; sys.exit(main(sys.argv[1:]))",
               "generate", *sampled, "--shard-index", "0"]
    killed = subprocess.run(command, capture_output=True, text=True, timeout=HANG,
                            env={**os.environ, KILL_ENV: "journal.after_write:2"})  # SIGKILL after two results
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    for shard in ("0", "1"):
        assert main(["generate", *sampled, "--shard-index", shard]) == 0
    out = tmp_path / "out"
    assert main(["build", *sampled[:-4], "--out", str(out)]) == 0  # assembles the journal, generates nothing
    rows = config_rows(out, CONFIG)
    assert sorted(r["sample_id"] for r in rows) == list(range(6)), "a sample lost or doubled"
    assert main(["validate", str(out), CONFIG]) == 0
