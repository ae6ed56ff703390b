"""The `sglang-http` engine against a real loopback server speaking SGLang's /generate, with faults.

Also the pieces both SGLang adapters share: result checks and retries.
"""

from __future__ import annotations

import asyncio
import random
import socket

import pytest
from datasets import load_dataset

from eagle3_synth.cli import main
from eagle3_synth.engines import EngineOptions, GenerationRequest, SamplingParams, create_engine
from eagle3_synth.engines.base import check_result
from eagle3_synth.engines.sglang.protocol import RetryPolicy, retry_async
from eagle3_synth.engines.sglang import http as sglang_http
from eagle3_synth.engines.sglang.http import SGLangHTTPEngine, normalize_urls
from eagle3_synth.errors import ConfigError, EngineDied, EngineError, TransientEngineError
from eagle3_synth.contract.row import FEATURES

from ..conftest import KIMI_TOKENIZER, TINY_MODEL
from stand_ins import sglang_results as R
from stand_ins.sglang_server import DeterministicBackend, Fault, SGLangLoopbackServer, TinyModelBackend

STOP = (2034, 2033)  # <|im_end|>, [EOS] of the kimi fixture tokenizer
PARAMS = SamplingParams(max_new_tokens=64, temperature=0.0, stop_token_ids=STOP)
FAST_RETRY = RetryPolicy(max_retries=4, base_delay_s=0.01, max_delay_s=0.05)
FAULTS = (
    Fault("status", every=3, status=500),
    Fault("status", every=11, offset=1, status=503, attempts=2),
    Fault("drop", every=5, offset=2),
    Fault("truncate", every=7, offset=3),
    Fault("hang", every=4, offset=1),  # held until the 1 s request timeout fired: retried
    Fault("slow", every=9, offset=5, delay_s=0.2),  # slow but in time
)


def random_requests(n: int, seed: int = 0) -> list[GenerationRequest]:
    rng = random.Random(seed)
    return [GenerationRequest(i, [rng.randrange(1, 900) for _ in range(rng.randrange(5, 40))]) for i in range(n)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_engine(*urls: str, **kwargs) -> SGLangHTTPEngine:
    kwargs.setdefault("retry", FAST_RETRY)
    kwargs.setdefault("max_in_flight", 8)
    return SGLangHTTPEngine(urls, **kwargs)


# -- result checks (both SGLang engines) -------------------------------------------------------------

REQUEST = GenerationRequest(5, [11, 12, 13, 14])


def test_a_good_result_is_taken_as_is():
    response = R.finished("r", 4, [1000, 1001, STOP[0]], R.stop_reason(STOP[0]), cached_tokens=3)
    result = check_result(REQUEST, response, "http://h:1", PARAMS)
    assert (result.sample_id, result.output_ids, result.finish_reason) == (5, [1000, 1001, STOP[0]], "stop")
    assert (result.prompt_tokens, result.completion_tokens, result.cached_tokens, result.error) == (4, 3, 3, None)
    length = check_result(REQUEST, R.finished("r", 4, [1000, 1001], R.length_reason(2)), "x", PARAMS)
    assert length.finish_reason == "length" and length.output_ids == [1000, 1001]


def test_an_engine_abort_is_the_samples_error():
    result = check_result(REQUEST, R.queued_abort("r"), "x", PARAMS)
    assert result.finish_reason == "abort" and result.output_ids == []
    assert result.error == "aborted by SGLang: Abort in waiting queue"


def _broken(change) -> dict:
    response = R.finished("r", 4, [1000, 1001, STOP[0]], R.stop_reason(STOP[0]))
    change(response)
    return response


@pytest.mark.parametrize("response, message", [
    (_broken(lambda r: r["meta_info"].update(completion_tokens=4)), "len(output_ids) = 3 but completion_tokens = 4"),
    (_broken(lambda r: r.update(output_ids=[11, 12, 13, 14, 1000, STOP[0]]) or r["meta_info"].update(completion_tokens=6)),
     "start with the prompt ids"),
    (_broken(lambda r: r["meta_info"].update(prompt_tokens=3)), "prompt_tokens = 3 but 4 prompt ids were sent"),
    (_broken(lambda r: r["meta_info"].update(finish_reason=R.stop_reason(STOP[1]))), "stopped on token 2033"),
    (_broken(lambda r: r["meta_info"].update(finish_reason=None)), "finish_reason None"),
    (_broken(lambda r: r["meta_info"].update(finish_reason={"type": "eos"})), "is not one of"),
    (_broken(lambda r: r.pop("output_ids")), "output_ids is not a list of integers"),
    (_broken(lambda r: r.pop("meta_info")), "no meta_info"),
    ([R.finished("r", 4, [STOP[0]], R.stop_reason(STOP[0]))], "expected one result object, got list"),
])
def test_a_contract_violation_is_an_error_naming_the_sample(response, message):
    with pytest.raises(EngineError) as error:
        check_result(REQUEST, response, "http://h:1", PARAMS)
    assert str(error.value).startswith("sample_id 5: http://h:1 returned a result that breaks the contract")
    assert message in str(error.value)


# -- retries ------------------------------------------------------------------------------------------

def test_retries_back_off_with_jitter_and_stop_at_the_limit():
    waits: list[float] = []
    calls: list[int] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    async def always_fails(attempt: int) -> None:
        calls.append(attempt)
        raise TransientEngineError("HTTP 503")

    policy = RetryPolicy(max_retries=5, base_delay_s=1.0, max_delay_s=4.0)
    with pytest.raises(TransientEngineError, match="x: gave up after 6 attempts; last error: HTTP 503"):
        asyncio.run(retry_async(always_fails, policy, describe="x", sleep=sleep, rng=random.Random(1)))
    assert calls == [0, 1, 2, 3, 4, 5]
    caps = [1.0, 2.0, 4.0, 4.0, 4.0]
    assert all(0 <= w <= cap for w, cap in zip(waits, caps)) and len(waits) == 5
    assert len(set(waits)) == 5, "jittered, not fixed"


def test_only_transient_errors_are_retried():
    calls: list[int] = []

    async def flaky_then_ok(attempt: int) -> str:
        calls.append(attempt)
        if attempt < 2:
            raise TransientEngineError("reset")
        return "ok"

    async def invalid(attempt: int) -> None:
        calls.append(attempt)
        raise EngineError("broken result")

    async def no_sleep(seconds: float) -> None:
        pass

    assert asyncio.run(retry_async(flaky_then_ok, RetryPolicy(), describe="x", sleep=no_sleep)) == "ok"
    assert calls == [0, 1, 2]
    calls.clear()
    with pytest.raises(EngineError, match="broken result"):
        asyncio.run(retry_async(invalid, RetryPolicy(), describe="x", sleep=no_sleep))
    assert calls == [0]


# -- URLs ---------------------------------------------------------------------------------------------

def test_urls_are_checked():
    assert normalize_urls(["http://router:30000/", "https://h:1"]) == ("http://router:30000", "https://h:1")
    for bad, message in [("router:30000", "expected http://HOST:PORT"), ("http://h:1/generate", "without '/generate'")]:
        with pytest.raises(ConfigError, match=message):
            normalize_urls([bad])
    with pytest.raises(ConfigError, match="needs --url"):
        normalize_urls([])


def test_engine_options_are_checked(capsys, tmp_path):
    assert main(["build", "B1_glaive", "--model", str(KIMI_TOKENIZER), "--engine", "sglang-http", "--out", str(tmp_path)]) == 2
    assert "needs --url http://HOST:PORT" in capsys.readouterr().err
    for options, message in [(dict(max_in_flight=0), "--max-in-flight must be >= 1"),
                             (dict(request_timeout_s=0), "--request-timeout must be > 0"),
                             (dict(max_retries=-1), "--max-retries must be >= 0")]:
        with pytest.raises(ConfigError, match=message):
            create_engine("sglang-http", EngineOptions(urls=("http://127.0.0.1:1",), **options))


def test_no_server_at_the_url_fails_before_any_prompt_is_sent(monkeypatch):
    monkeypatch.setattr(sglang_http, "HEALTH_TIMEOUT_S", 0.1)  # what it waits for a server to start listening
    with pytest.raises(ConfigError, match=r"--url http://127.0.0.1:\d+: no SGLang server ready there after 0.1s"):
        create_engine("sglang-http", EngineOptions(urls=(f"http://127.0.0.1:{free_port()}",), max_retries=1))


# -- against the loopback server ----------------------------------------------------------------------

def test_faults_lose_and_duplicate_nothing(serve):
    """500s, 503s, dropped connections, cut-off bodies, timeouts: every sample once, with the right ids."""
    backend = DeterministicBackend()
    server = SGLangLoopbackServer(backend, faults=FAULTS)
    url = serve(server).url
    engine = http_engine(url, request_timeout_s=1.0)
    requests = random_requests(80)
    try:
        results = list(engine.generate(requests, PARAMS))
    finally:
        engine.close()
    assert sorted(r.sample_id for r in results) == list(range(80))
    for result in results:
        expected = backend.expected(requests[result.sample_id].prompt_ids, list(STOP), 64)
        assert result.error is None, result.error
        assert result.output_ids == expected.output_ids and result.finish_reason == "stop"
        assert result.completion_tokens == len(expected.output_ids)
    for kind in ("fault:status", "fault:drop", "fault:truncate", "fault:slow", "fault:hang"):
        assert server.outcomes[kind] > 0, f"{kind} was exercised"
    assert len(set(server.rids)) == len(server.rids), "a fresh request id per attempt"


def test_a_4xx_is_the_samples_error_and_is_not_retried(serve):
    # context 30, max_new_tokens 4: SGLang rejects n >= 30, n + 4 > 30, and n >= max_req_input_len
    # (= 30 - 1 - 5 = 24); the engine's max_prompt_tokens names that boundary (23).
    server = SGLangLoopbackServer(DeterministicBackend(), context_length=30)
    engine = http_engine(serve(server).url)
    params = SamplingParams(max_new_tokens=4, temperature=0.0, stop_token_ids=STOP)
    requests = random_requests(40)
    try:
        engine.check_servers()
        assert engine.max_prompt_tokens(4) == 23
        results = {r.sample_id: r for r in engine.generate(requests, params)}
    finally:
        engine.close()
    too_long = {r.sample_id for r in requests if len(r.prompt_ids) > 23}
    assert too_long and len(too_long) < 40
    for sample_id, result in results.items():
        if sample_id in too_long:
            assert result.finish_reason == "abort" and result.output_ids == []
            assert "HTTP 400" in result.error and ("context length" in result.error or "maximum allowed length" in result.error)
        else:
            assert result.error is None
    assert server.outcomes["400"] == len(too_long), "each too-long prompt was sent once"


def test_a_5xx_that_never_stops_becomes_the_samples_error(serve):
    server = SGLangLoopbackServer(DeterministicBackend(), faults=(Fault("status", every=4, status=500, attempts=99),))
    engine = http_engine(serve(server).url, retry=RetryPolicy(max_retries=2, base_delay_s=0.001, max_delay_s=0.001))
    try:
        results = list(engine.generate(random_requests(20), PARAMS))
    finally:
        engine.close()
    failed = [r for r in results if r.error]
    assert failed and len(results) == 20
    for result in failed:
        assert result.finish_reason == "abort"
        assert "gave up after 3 attempts" in result.error and "HTTP 500: Internal server error" in result.error
    assert server.outcomes["fault:status"] == 3 * len(failed)


def test_a_server_that_goes_away_stops_the_run(serve):
    """Connection refused after the retries: stop (the journal resumes), don't mark every prompt failed."""
    thread = serve(SGLangLoopbackServer(DeterministicBackend()))
    engine = http_engine(thread.url, retry=RetryPolicy(max_retries=2, base_delay_s=0.001, max_delay_s=0.001))
    engine.check_servers()
    thread.__exit__(None, None, None)
    try:
        with pytest.raises(EngineDied, match="no SGLang server could be reached .* rerun the same command"):
            list(engine.generate(random_requests(5), PARAMS))
    finally:
        engine.close()


def test_several_urls_share_the_work_and_a_dead_one_is_skipped(serve):
    first, second = SGLangLoopbackServer(DeterministicBackend()), SGLangLoopbackServer(DeterministicBackend())
    urls = (serve(first).url, serve(second).url, f"http://127.0.0.1:{free_port()}")
    engine = http_engine(*urls)
    try:
        results = list(engine.generate(random_requests(40), PARAMS))
    finally:
        engine.close()
    assert sorted(r.sample_id for r in results) == list(range(40)) and not any(r.error for r in results)
    assert first.outcomes["ok"] >= 10 and second.outcomes["ok"] >= 10
    assert first.outcomes["ok"] + second.outcomes["ok"] == 40


class HeldUntil:
    """A backend that answers nothing until `ready()` (polled: a state, not a time), then as `backend`."""

    def __init__(self, backend: DeterministicBackend, ready):
        self.backend, self.ready = backend, ready

    async def generate(self, input_ids, sampling):
        for _ in range(24_000):  # bounded (>= 2 min): a window that never fills fails below instead of hanging
            if self.ready():
                break
            await asyncio.sleep(0.005)
        return await self.backend.generate(input_ids, sampling)


def test_in_flight_never_exceeds_the_window(serve):
    """The server holds every answer until five requests run at once: the window filled it (a
    timed delay would depend on how fast a loaded machine sends them)."""
    server = SGLangLoopbackServer(HeldUntil(DeterministicBackend(), lambda: server.max_running >= 5))
    engine = http_engine(serve(server).url, max_in_flight=5)
    seen = []
    try:
        for _ in engine.generate(random_requests(30), PARAMS):
            seen.append(engine.in_flight)
    finally:
        engine.close()
    assert server.max_running == 5, "the window was kept full"
    assert max(seen) <= 5 and engine.in_flight == 0


# -- end to end ---------------------------------------------------------------------------------------

def build(tmp_path, url: str, model: str, *extra: str) -> int:
    return main(["build", "B1_glaive", "--model", model, "--engine", "sglang-http", "--url", url,
                 "--max-new-tokens", "64", "--temperature", "0", "--max-in-flight", "4",
                 "--out", str(tmp_path / "ds"), *extra])


def load(tmp_path):
    # A private cache: datasets 5.2 caches a README-configured folder by its name alone.
    return load_dataset(str(tmp_path / "ds"), "B1_glaive", split="train", cache_dir=str(tmp_path / "hf-cache"))


def test_build_through_faults_into_a_loadable_dataset(serve, tmp_path, kimi_markers):
    backend = DeterministicBackend()
    server = SGLangLoopbackServer(backend, faults=FAULTS[:4])
    assert build(tmp_path, serve(server).url, str(KIMI_TOKENIZER)) == 0
    ds = load(tmp_path)
    assert ds.features == FEATURES
    assert ds["sample_id"] == list(range(len(ds))) and len(ds) == 6
    for row in ds:
        assert row["output_ids"] == backend.expected(row["prompt_ids"], list(kimi_markers.stop_ids), 64).output_ids
        assert row["finish_reason"] == "stop" and row["stop_index"] == len(row["output_ids"]) - 1
    assert sum(server.outcomes[k] for k in ("fault:status", "fault:drop", "fault:truncate")) > 0
    requests_before = len(server.rids)
    assert build(tmp_path, serve(server).url, str(KIMI_TOKENIZER)) == 0  # a rerun sends nothing
    assert len(server.rids) == requests_before


@pytest.mark.skipif(not (TINY_MODEL / "config.json").exists(), reason="tiny model fixture missing: run python -m tests.fixtures.train_tiny_model")
def test_build_with_the_tiny_model_behind_the_server(serve, tmp_path, kimi_markers):
    """The server generates with the tiny model; the dataset holds exactly what it generated."""
    backend = TinyModelBackend(str(TINY_MODEL))
    server = SGLangLoopbackServer(backend, faults=(Fault("status", every=2), Fault("drop", every=3, offset=1)))
    assert build(tmp_path, serve(server).url, str(TINY_MODEL)) == 0
    ds = load(tmp_path)
    assert ds.features == FEATURES and ds["sample_id"] == list(range(6))
    assert server.outcomes["fault:status"] + server.outcomes["fault:drop"] > 0
    reference = create_engine("transformers", EngineOptions(model=str(TINY_MODEL), batch_size=1))
    for row in ds:
        (expected,) = reference.generate([GenerationRequest(row["sample_id"], row["prompt_ids"])],
                                         SamplingParams(max_new_tokens=64, temperature=0.0,
                                                                        stop_token_ids=kimi_markers.stop_ids))
        assert row["output_ids"] == expected.output_ids
        assert row["finish_reason"] == expected.finish_reason
