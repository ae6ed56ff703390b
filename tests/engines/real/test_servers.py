"""`sglang-http` in front of the real things: the real `sglang-router` 0.3.2 (PyPI) over two real
SGLang 0.5.23 servers, a server started with an API key, and the in-flight window driven by a real
server's `/v1/loads`. Rows at temperature 0 are the transformers engine's (support/row_parity.py)."""

from __future__ import annotations

import signal
import subprocess

import pytest

from eagle3_synth.cli import main
from eagle3_synth.engines import EngineOptions, GenerationRequest, SamplingParams, create_engine

from ...support.cli_processes import config_rows
from ...support.real_sglang import (STOP_TIMEOUT_S, TINY_MODEL, RealServer, free_port, sglang_env, sglang_python,
                                   wait_for_health)
from ...support.row_parity import assert_same_rows


CONFIG = "B1_glaive"
GREEDY = ["--model", str(TINY_MODEL), "--temperature", "0", "--max-new-tokens", "256", "--dtype", "bfloat16"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("transformers")
    assert main(["build", CONFIG, *GREEDY, "--engine", "transformers", "--batch-size", "1", "--out", str(out)]) == 0
    return config_rows(out, CONFIG)


class Router:
    """`python -m sglang_router.launch_router` over `workers`, started and stopped by pid."""

    def __init__(self, workers: list[str], log):
        self.port = free_port()
        self.workers = workers
        self.log = log
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "Router":
        # As README advises behind a router: a total timeout above any request's, no retries of its
        # own (eagle3-synth retries with a new request id).
        command = [str(sglang_python()), "-m", "sglang_router.launch_router", "--host", "127.0.0.1",
                   "--port", str(self.port), "--worker-urls", *self.workers, "--policy", "round_robin",
                   "--request-timeout-secs", "86400", "--disable-retries"]
        with open(self.log, "wb") as handle:
            self.process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=sglang_env())
        wait_for_health(self.process, self.url, "the router", lambda: self.log.read_text()[-3000:], self.__exit__)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def test_the_real_router_over_two_real_servers_gives_the_transformers_rows(reference, tmp_path):
    with RealServer(tmp_path / "a.log") as a, RealServer(tmp_path / "b.log") as b, \
            Router([a.url, b.url], tmp_path / "router.log") as router:
        assert main(["build", CONFIG, *GREEDY, "--engine", "sglang-http", "--url", router.url,
                     "--out", str(tmp_path / "out")]) == 0
    assert_same_rows(config_rows(tmp_path / "out", CONFIG), reference, TINY_MODEL)


def test_a_server_with_an_api_key_is_refused_without_it_and_served_with_it(reference, tmp_path, monkeypatch, capsys):
    with RealServer(tmp_path / "server.log", api_key="s3cret") as server:
        monkeypatch.delenv("EAGLE3_SYNTH_SGLANG_API_KEY", raising=False)
        code = main(["build", CONFIG, *GREEDY, "--engine", "sglang-http", "--url", server.url,
                     "--out", str(tmp_path / "refused")])
        assert code == 2
        assert "answered HTTP 401" in capsys.readouterr().err
        monkeypatch.setenv("EAGLE3_SYNTH_SGLANG_API_KEY", "s3cret")
        assert main(["build", CONFIG, *GREEDY, "--engine", "sglang-http", "--url", server.url,
                     "--out", str(tmp_path / "out")]) == 0
    assert_same_rows(config_rows(tmp_path / "out", CONFIG), reference, TINY_MODEL)


def test_the_window_follows_the_real_servers_loads(server):
    """With no --max-in-flight the window reads the server's real /v1/loads between results
    (engines/sglang/window.py): it starts at what the server runs, and every request completes."""
    engine = create_engine("sglang-http", EngineOptions(urls=(server.url,), max_in_flight=None))
    try:
        assert engine._window.sizer is not None, "the window is not load-driven"
        load = engine.read_loads()
        assert load is not None and load.running >= 0 and load.waiting >= 0
        params = SamplingParams(max_new_tokens=16, temperature=0.0, stop_token_ids=(2033, 2034), vocab_size=2048)
        requests = [GenerationRequest(i, [2032, 100 + i, 17, 99]) for i in range(40)]
        results = list(engine.generate(requests, params))
    finally:
        engine.close()
    assert sorted(r.sample_id for r in results) == list(range(40)) and all(r.error is None for r in results)
