"""The real SGLang 0.5.23's `launch_server` on the CPU backend, started and stopped by pid.

Shared by the tests that hold our adapters against it (tests/support/real_sglang.py adds the venv
lookup that skips without it) and by benchmarks/bench_sglang_overhead.py. SGLang lives in a virtual
environment of its own (`make sglang-venv`); EAGLE3_SYNTH_SGLANG_PYTHON points at another
interpreter with SGLang installed. Every model runs in bfloat16: SGLang's CPU kernels have no other
dtype (eagle3_synth/engines/sglang/args.py).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from eagle3_synth.engines.sglang.processes import tree_segments, unlink_segments

ROOT = Path(__file__).resolve().parents[1]
TINY_MODEL = ROOT / "tests" / "fixtures" / "models" / "tiny-kimi"
# A hang detector for a server's start (model load and the first forward take 20-40 s here, more
# on a loaded machine); never what a test asserts.
START_TIMEOUT_S = 600
STOP_TIMEOUT_S = 120
CPU_ENV = {"SGLANG_USE_CPU_ENGINE": "1"}




class ServerFailed(RuntimeError):
    """A server exited while starting, or did not answer /health in time (its log's tail said)."""


def default_python() -> Path:
    """SGLang's interpreter: EAGLE3_SYNTH_SGLANG_PYTHON, else the venv `make sglang-venv` makes."""
    given = os.environ.get("EAGLE3_SYNTH_SGLANG_PYTHON")
    return Path(given) if given else ROOT / ".venv-sglang" / "bin" / "python"


def sglang_env() -> dict[str, str]:
    """The environment for SGLang's processes: the CPU platform switched on."""
    return {**os.environ, **CPU_ENV}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def get(url: str, timeout: float = 10.0, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def wait_for_health(process: subprocess.Popen, url: str, what: str, log_tail: Callable[[], str],
                    stop: Callable[[], None], headers: dict[str, str] | None = None) -> None:
    """Poll `url`/health until it answers 200; raise ServerFailed naming `what` with its log's tail if
    `process` exits first, or (after `stop()`) if START_TIMEOUT_S passes: a hang detector, never an
    assertion."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if process.poll() is not None:
            raise ServerFailed(f"{what} exited with {process.returncode} while starting:\n{log_tail()}")
        try:
            if get(url + "/health", timeout=5.0, headers=headers)[0] == 200:
                return
        except OSError:
            pass  # not listening yet
        if time.monotonic() > deadline:
            stop()
            raise ServerFailed(f"{what} did not answer /health within {START_TIMEOUT_S}s:\n{log_tail()}")
        time.sleep(0.5)


class RealServer:
    """`python -m sglang.launch_server` on a free loopback port, in a session of its own.

    `stop()` sends SIGTERM to the server's pid (SGLang stops its scheduler and detokenizer with it)
    and, if anything of that session is left after STOP_TIMEOUT_S, SIGKILLs its process group:
    only what this object started.
    """

    def __init__(self, log: Path, model: Path = TINY_MODEL, *args: str, port: int | None = None,
                 api_key: str | None = None):
        self.model = model
        self.args = list(args)
        self.port = port or free_port()
        self.api_key = api_key
        self.log = log
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def python(self) -> Path:
        """The interpreter with SGLang installed (tests/support/real_sglang.py: the venv, or skip)."""
        return default_python()

    def command(self) -> list[str]:
        # --mem-fraction-static 0.1: a KV cache of a few GB, not one sized to all the memory free
        # (tests/support/real_sglang.py).
        return [str(self.python()), "-m", "sglang.launch_server", "--model-path", str(self.model),
                "--device", "cpu", "--dtype", "bfloat16", "--skip-tokenizer-init", "--host", "127.0.0.1",
                "--port", str(self.port), "--mem-fraction-static", "0.1", "--log-level", "warning",
                *(["--api-key", self.api_key] if self.api_key else []), *self.args]

    def start(self) -> "RealServer":
        handle = open(self.log, "ab")
        self.process = subprocess.Popen(self.command(), stdout=handle, stderr=subprocess.STDOUT,
                                        env=sglang_env(), start_new_session=True)
        handle.close()
        self.wait_healthy()
        return self

    def wait_healthy(self) -> None:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else None
        wait_for_health(self.process, self.url, "the SGLang server", self.log_tail, self.stop, headers)

    def server_info(self) -> dict:
        status, body = get(self.url + "/server_info")
        assert status == 200, body
        return json.loads(body)

    def kill(self) -> None:
        """SIGKILL the server and every process of its session (a crash, as a node loss would be)."""
        segments = self._segments()
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self._reap_group()
        unlink_segments(segments)

    def stop(self) -> None:
        if self.process is None:
            return
        segments = self._segments()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                pass
        self._reap_group()
        unlink_segments(segments)

    def _segments(self) -> set[Path]:
        """The CPU all-reduce segments the server's processes map (AMX CPUs), which SGLang never
        unlinks (eagle3_synth/engines/sglang/processes.py): read while they live, removed once stopped."""
        if self.process is None or self.process.poll() is not None:
            return set()
        return tree_segments(self.process.pid)

    def _reap_group(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # what is left of its session, if anything
        except ProcessLookupError:
            pass
        if self.process.poll() is None:
            self.process.wait()

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> "RealServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
