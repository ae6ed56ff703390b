"""SGLang behaviours that corrupt rows silently unless caught, against fakes that reproduce them
(sglang 0.5.23 source lines cited in tests/support): allow_auto_truncate, NaN stops, short lengths,
misconfigured servers, a starting server, and the prompt limit the engines expose.
"""

from __future__ import annotations

import logging
import math
import threading

import pytest

from eagle3_synth.cli import main

from eagle3_synth.engines import EngineOptions, GenerationRequest, SamplingParams
from eagle3_synth.engines.base import check_result, is_short_length
from eagle3_synth.engines.sglang import engine as sglang_engine, http as sglang_http
from eagle3_synth.engines.sglang.args import type_engine_args
from eagle3_synth.engines.sglang.protocol import ContextLimits
from eagle3_synth.errors import ConfigError, EngineError

from stand_ins import sglang_results as R
from ..support.fake_sglang import FIELD_NAMES, FIELDS, Engine as FakeEngine, Reply
from stand_ins.sglang_server import DeterministicBackend, Fault, SGLangLoopbackServer, ServerThread, prompt_digest
from ..conftest import TINY_MODEL
from .conftest import FAST_RETRY
from .test_sglang_engine import STOP, stop_reply
from .test_sglang_http import free_port, http_engine, random_requests

PARAMS = SamplingParams(max_new_tokens=8, temperature=0.0, stop_token_ids=STOP)
REQUEST = GenerationRequest(3, [11, 12, 13, 14])


# -- 3. allow_auto_truncate ---------------------------------------------------------------------------

def test_allow_auto_truncate_is_refused_for_both_engines():
    with pytest.raises(ConfigError, match=r"^--engine-arg allow_auto_truncate is refused: [^\n]*$"):
        type_engine_args({"allow_auto_truncate": True}, FIELDS)
    with pytest.raises(ConfigError, match="allow_auto_truncate is refused"):
        sglang_http.create(EngineOptions(urls=("http://127.0.0.1:9",), engine_args={"allow_auto_truncate": True}))


def test_the_engine_gets_copies_that_sglang_may_cut_in_place():
    """The fake truncates the list it is given in place under allow_auto_truncate (as
    sglang 0.5.23 `TokenizerManager._validate_one_request` does): our prompt and sampling dict stay whole."""
    fields = FIELD_NAMES | {"allow_auto_truncate"}
    cls = FakeEngine.configure(lambda ids, sampling: stop_reply(ids), fields, context_len=6)
    fake = cls(model_path="/models/fake", skip_tokenizer_init=True, allow_auto_truncate=True)
    engine = sglang_engine.SGLangEngine(fake, loop=fake.loop, owned_pids=set(fake.get_all_child_pids()),
                                        max_in_flight=2, retry=FAST_RETRY)
    prompt = list(range(100, 110))
    request = GenerationRequest(0, prompt)
    try:
        with pytest.raises(EngineError, match="prompt_tokens = 6 but 10 prompt ids were sent"):
            list(engine.generate([request], PARAMS))
    finally:
        engine.close()
        fake.loop.close()
    assert request.prompt_ids == list(range(100, 110)), "SGLang's in-place cut reached our prompt"
    assert fake.calls[0]["input_ids"] == list(range(100, 106))
    assert fake.calls[0]["sampling_params"]["max_new_tokens"] == 0  # lowered in SGLang's copy only
    assert PARAMS.max_new_tokens == 8


def test_a_server_with_allow_auto_truncate_or_a_tokenizer_is_refused(serve):
    for args, message in [({"allow_auto_truncate": True}, "--allow-auto-truncate"),
                          ({"skip_tokenizer_init": False}, "restart it with --skip-tokenizer-init")]:
        url = serve(SGLangLoopbackServer(DeterministicBackend(), server_args=args)).url
        engine = http_engine(url)
        try:
            with pytest.raises(ConfigError, match=message):
                engine.check_servers()
        finally:
            engine.close()


# -- 4. stops that are not stops; short lengths ----------------------------------------------------------

def test_a_nan_stop_is_the_samples_error_not_a_row():
    response = R.finished("r", 4, [1000, STOP[0]], R.nan_stop())  # EOS written in the NaN's slot
    result = check_result(REQUEST, response, "x", PARAMS)
    assert result.finish_reason == "abort" and result.output_ids == []
    assert "'NaN happened'" in result.error


def test_a_stop_on_an_id_not_requested_is_the_samples_error():
    response = R.finished("r", 4, [1000, 7], R.stop_reason(7))
    result = check_result(REQUEST, response, "x", PARAMS)
    assert result.finish_reason == "abort" and "token 7, which is not one of the requested stop ids" in result.error
    assert check_result(REQUEST, R.finished("r", 4, [1000, STOP[1]], R.stop_reason(STOP[1])), "x", PARAMS).error is None


def test_nan_stops_over_http_are_errors_and_the_rest_are_rows(serve):
    server = SGLangLoopbackServer(DeterministicBackend(), faults=(Fault("nan", every=3, attempts=99),))
    engine = http_engine(serve(server).url)
    requests = random_requests(30)
    try:
        results = {r.sample_id: r for r in engine.generate(requests, PARAMS)}
    finally:
        engine.close()
    nan = {r.sample_id for r in requests if prompt_digest(r.prompt_ids) % 3 == 0}
    assert nan and len(results) == 30
    for sample_id, result in results.items():
        assert (result.finish_reason == "abort") == (sample_id in nan)
        if sample_id in nan:
            assert "NaN happened" in result.error


def test_a_length_shorter_than_max_new_tokens_is_a_valid_row(serve):
    """The scheduler lowers max_new_tokens to max_req_len - n - 1 (sglang 0.5.23
    `Scheduler.init_req_max_new_tokens`)."""
    server = SGLangLoopbackServer(DeterministicBackend(min_len=50, max_len=50), context_length=40)
    engine = http_engine(serve(server).url)
    params = SamplingParams(max_new_tokens=30, temperature=0.0, stop_token_ids=STOP)
    request = GenerationRequest(0, list(range(1, 11)))  # n=10: 10 + 30 <= 40 passes; cut to 39 - 10 - 1 = 28
    try:
        (result,) = engine.generate([request], params)
    finally:
        engine.close()
    assert (result.finish_reason, result.completion_tokens, result.error) == ("length", 28, None)
    assert is_short_length(result, params.max_new_tokens)


# -- 5. misconfiguration stops the run; a starting server is waited for ---------------------------------

def test_a_wrong_key_stops_the_run_naming_status_and_url(serve):
    server = SGLangLoopbackServer(DeterministicBackend(), api_key="secret")
    url = serve(server).url
    engine = http_engine(url)
    try:
        with pytest.raises(ConfigError, match=rf"{url}/health answered HTTP 401 \(Unauthorized\): check --url .* "
                                              r"and the server's API key \(\$EAGLE3_SYNTH_SGLANG_API_KEY\)"):
            engine.check_servers()
        with pytest.raises(EngineError, match=rf"{url}/generate answered HTTP 401"):
            list(engine.generate(random_requests(20), PARAMS))
    finally:
        engine.close()


def test_the_api_key_is_sent_from_its_variable(serve, monkeypatch):
    """$EAGLE3_SYNTH_SGLANG_API_KEY becomes every request's `Authorization: Bearer KEY`."""
    from eagle3_synth.engines import EngineOptions, create_engine

    server = SGLangLoopbackServer(DeterministicBackend(), api_key="secret")
    url = serve(server).url
    monkeypatch.setenv("EAGLE3_SYNTH_SGLANG_API_KEY", "secret")
    engine = create_engine("sglang-http", EngineOptions(urls=(url,), max_in_flight=4))
    try:
        assert all(r.error is None for r in engine.generate(random_requests(5), PARAMS))
    finally:
        engine.close()


@pytest.mark.parametrize("status", [403, 404, 405])
def test_other_misconfigured_statuses_stop_the_run(serve, status):
    server = SGLangLoopbackServer(DeterministicBackend(), faults=(Fault("status", every=1, status=status, attempts=99),))
    url = serve(server).url
    engine = http_engine(url)
    try:
        with pytest.raises(EngineError, match=rf"{url}/generate answered HTTP {status}"):
            list(engine.generate(random_requests(20), PARAMS))
    finally:
        engine.close()
    assert server.outcomes["fault:status"] <= engine.max_in_flight, "no prompt beyond the first window was sent"


def test_a_starting_server_is_waited_for_within_a_bound(serve):
    server = SGLangLoopbackServer(DeterministicBackend(), starting_polls=3)
    url = serve(server).url
    engine = http_engine(url, health_poll_s=0.05, health_timeout_s=120)
    try:
        engine.check_servers()
    finally:
        engine.close()
    assert server.health_requests == 4  # three 503s, then ready

    slow = SGLangLoopbackServer(DeterministicBackend(), starting_polls=math.inf)  # starting for ever
    engine = http_engine(serve(slow).url, health_poll_s=0.05, health_timeout_s=0.3)
    try:
        with pytest.raises(ConfigError, match=r"no SGLang server ready there after 0.3s \(/health answers HTTP 503\)"):
            engine.check_servers()
    finally:
        engine.close()


class Announced(logging.Handler):
    """Sets `event` when the engine says it waits for a server: the moment a test acts on, not a time."""

    def __init__(self, event: threading.Event):
        super().__init__()
        self.event = event

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("waiting for the SGLang server"):
            self.event.set()


def test_a_server_that_binds_its_port_late_is_waited_for_and_said_once(caplog):
    """`launch_server` binds its port only once its model is loaded: until then every
    connection is refused. The engine waits through the refusals, then the 503s of the warm-up, and
    says once that it waits and for how long at most. The port is bound only after that line."""
    url = f"http://127.0.0.1:{free_port()}"
    server = SGLangLoopbackServer(DeterministicBackend(), starting_polls=2)
    waiting = threading.Event()
    announced = Announced(waiting)
    logger = logging.getLogger(sglang_http.__name__)
    logger.addHandler(announced)
    started: list[ServerThread] = []

    def bind_once_waited() -> None:
        if waiting.wait(timeout=120):  # a hang detector; the assertions below say what happened
            started.append(ServerThread(server, port=int(url.rsplit(":", 1)[1])).__enter__())

    binder = threading.Thread(target=bind_once_waited)
    binder.start()
    engine = http_engine(url, health_poll_s=0.05, health_timeout_s=600)
    try:
        with caplog.at_level(logging.INFO, logger=sglang_http.__name__):
            engine.check_servers()
    finally:
        engine.close()
        binder.join()
        logger.removeHandler(announced)
        for thread in started:
            thread.__exit__(None, None, None)
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("waiting for the SGLang server")]
    assert len(said) == 1, said
    assert said[0].startswith(f"waiting for the SGLang server at {url} to start (nothing listens: ")
    assert "Connect call failed" in said[0] and said[0].endswith("), at most 600s")
    assert server.health_requests == 3  # two 503s while it warms up, then ready


def test_the_start_up_deadline_ends_the_wait_with_one_line_naming_the_url(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(sglang_http, "HEALTH_TIMEOUT_S", 0.5)
    url = f"http://127.0.0.1:{free_port()}"
    code = main(["build", "B1_glaive", "--model", str(TINY_MODEL), "--engine", "sglang-http", "--url", url,
                 "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith(f"eagle3-synth build: error: --url {url}: no SGLang server ready there after 0.5s "
                          "(nothing listens: ClientConnectorError: "), err
    assert err.endswith("not started, another port, or still loading the model? Rerun when its /health answers 200\n")
    assert err.count("\n") == 1


def test_a_different_served_model_is_a_warning(serve, caplog):
    url = serve(SGLangLoopbackServer(DeterministicBackend(), model_path="/models/Other-Model")).url
    engine = http_engine(url, model="/data/Kimi-K2.5/")
    try:
        with caplog.at_level("WARNING"):
            engine.check_servers()
    finally:
        engine.close()
    assert "serves /models/Other-Model, but this run's model is /data/Kimi-K2.5/" in caplog.text


# -- 6. the engine's real prompt limit ---------------------------------------------------------------------

def test_the_boundary_prompt_is_accepted_and_one_more_id_is_rejected(serve):
    server = SGLangLoopbackServer(DeterministicBackend(), context_length=64)
    engine = http_engine(serve(server).url)
    params = SamplingParams(max_new_tokens=16, temperature=0.0, stop_token_ids=STOP)
    try:
        engine.check_servers()
        limit = engine.max_prompt_tokens(16)
        assert limit == 48  # min(64 - 16, (64 - 1 - 5) - 1)
        at, over = (GenerationRequest(i, [5 + i] * n) for i, n in enumerate((limit, limit + 1)))
        results = {r.sample_id: r for r in engine.generate([at, over], params)}
    finally:
        engine.close()
    assert results[0].error is None
    assert "HTTP 400" in results[1].error and "exceeds the model's maximum context length of 64" in results[1].error


def test_limits_follow_max_req_input_len_and_speculative_reservations():
    limits = ContextLimits.from_server_info({"context_length": 1000, "max_req_input_len": 500})
    assert limits.max_prompt_tokens(100) == 499
    eagle = ContextLimits.from_server_info({"context_length": 1000, "speculative_algorithm": "EAGLE3",
                                            "speculative_eagle_topk": 4, "speculative_num_steps": 3,
                                            "speculative_num_draft_tokens": 8})
    assert eagle.max_prompt_tokens(100) == 1000 - 12 - 100
    assert ContextLimits().max_prompt_tokens(100) is None


def test_the_in_process_engine_exposes_its_limit(monkeypatch):
    cls = FakeEngine.configure(lambda ids, sampling: stop_reply(ids), FIELD_NAMES, context_len=64)
    engine = sglang_engine.launch(cls, FIELDS, EngineOptions(model="/models/fake"))
    try:
        assert engine.max_prompt_tokens(16) == 48
        results = {r.sample_id: r for r in engine.generate(
            [GenerationRequest(0, [7] * 48), GenerationRequest(1, [7] * 49)], PARAMS.__class__(
                max_new_tokens=16, temperature=0.0, stop_token_ids=STOP))}
    finally:
        engine.close()
        engine.engine.loop.close()
    assert results[0].error is None
    assert "exceeds the model's maximum context length of 64" in results[1].error


def test_a_prompt_over_the_servers_limit_is_a_too_long_reject_not_a_sample_error(serve, tmp_path):
    """The run reads the server's limit before preparing prompts (point 6): a prompt that SGLang would
    refuse (prompt + max_new_tokens > context) is rejected as too_long and never sent; the other is a row."""
    import json

    from datasets import load_dataset

    from eagle3_synth.cli import main

    from ..conftest import KIMI_TOKENIZER

    server = SGLangLoopbackServer(DeterministicBackend(), context_length=120)
    url = serve(server).url
    prompts = tmp_path / "prompts.jsonl"
    short, long_ = "Hi", " ".join(["word"] * 60)
    prompts.write_text("".join(json.dumps({"messages": [{"role": "user", "content": text}]}) + "\n"
                               for text in (short, long_)), encoding="utf-8")
    out = tmp_path / "ds"
    code = main(["build", "B3_ultrachat", "--model", str(KIMI_TOKENIZER), "--engine", "sglang-http", "--url", url,
                 "--max-new-tokens", "16", "--temperature", "0", "--prompts", str(prompts), "--out", str(out)])
    assert code == 0
    rejects = [json.loads(line) for line in open(out / ".runs" / "B3_ultrachat" / "rejects.jsonl")]
    assert [(r["sample_id"], r["reason"]) for r in rejects] == [(1, "too_long")]
    assert "(the engine's limit for max_new_tokens)" in rejects[0]["detail"]
    rows = load_dataset(str(out), "B3_ultrachat", split="train", cache_dir=str(tmp_path / "cache"))
    assert rows["sample_id"] == [0] and rows["prompt_tokens"][0] <= 104
    assert len(server.rids) == 1  # the long prompt was never sent
