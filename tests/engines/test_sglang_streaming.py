"""`sglang-http` streams: an idle timeout instead of a total one, chunks reassembled exactly, and a
router's retry that reuses our request id ("Duplicate request ID") recovered instead of failing."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from unittest.mock import patch

import pytest

from eagle3_synth.engines.sglang import http as sglang_http
from eagle3_synth.engines.sglang.protocol import is_duplicate_rid, merge_chunk

from stand_ins.sglang_server import ClientClock, DeterministicBackend, Fault, RouterLoopback, SGLangLoopbackServer
from .test_sglang_http import PARAMS, STOP, http_engine, random_requests


def non_stream_ids(url: str, prompt: list[int]) -> list[int]:
    """What a plain (non-stream) /generate returns for this prompt."""
    body = {"input_ids": prompt, "rid": f"plain-{hash(tuple(prompt))}",
            "sampling_params": {"max_new_tokens": PARAMS.max_new_tokens, "temperature": 0.0,
                                "top_p": 1.0, "top_k": -1, "stop_token_ids": list(STOP)}}
    request = urllib.request.Request(url + "/generate", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:  # a hang detector only
        return json.loads(response.read())["output_ids"]


def run(engine, requests):
    try:
        return sorted(engine.generate(requests, PARAMS), key=lambda r: r.sample_id)
    finally:
        engine.close()


def assert_rows_as_non_stream(url, requests, results):
    assert [r.sample_id for r in results] == [q.sample_id for q in requests]  # each exactly once
    for request, result in zip(requests, results):
        assert result.error is None, result.error
        assert result.output_ids == non_stream_ids(url, request.prompt_ids)
        assert result.completion_tokens == len(result.output_ids)


def test_chunks_merge_cumulative_and_incremental():
    merge = merge_chunk
    assert merge([], {"output_ids": [5], "meta_info": {"completion_tokens": 1}}) == [5]
    assert merge([5], {"output_ids": [5, 6, 7], "meta_info": {"completion_tokens": 3}}) == [5, 6, 7]  # cumulative
    assert merge([5], {"output_ids": [6, 7], "meta_info": {"completion_tokens": 3}}) == [5, 6, 7]  # a delta
    assert is_duplicate_rid(400, "Duplicate request ID detected: eagle3-synth-x-1-0")
    assert not is_duplicate_rid(400, "Duplicate request IDs detected within the request: [..]")
    assert not is_duplicate_rid(503, "Duplicate request ID detected: x")


class HeldClientClock(ClientClock):
    """A client loop whose thread is held after each `select`, before it checks its timers -- what a
    loaded machine does at random: the window in which a server thread that advanced the clock
    for several chunks before the client read the first made their gaps add up (the flake this
    test once had: 5 request ids for 4 requests)."""

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        loop = super().new_event_loop()
        process_events = loop._process_events  # type: ignore[attr-defined]

        def held(event_list):
            time.sleep(0.01)  # releases the GIL: the server's thread runs here
            process_events(event_list)

        loop._process_events = held  # type: ignore[attr-defined]
        return loop


@pytest.mark.parametrize("held", [False, True], ids=["client", "held-client"])
@pytest.mark.parametrize("incremental", [False, True])
def test_a_request_queued_then_running_past_a_total_timeout_completes_once(serve, monkeypatch, incremental, held):
    """Queued 360 s, then a chunk every 180 s: over 1,000 s in all, past the 600 s timeout, yet
    never 600 s without data; a total timeout would restart every one of them. The gaps are made
    on the client's clock (`ClientClock`), not slept, each once the client read the chunk before
    it: however loaded the machine, no two gaps add up, and the test takes no time. Real time only
    counts where it is what is left of the timeout after a gap (240 s between two reads). One
    request at a time, as one clock ages every request."""
    monkeypatch.setattr(sglang_http, "STREAM_INTERVAL", 4)
    backend = DeterministicBackend(min_len=16, max_len=20)
    clock = HeldClientClock() if held else ClientClock()
    server = SGLangLoopbackServer(backend, queue_s=360.0, chunk_s=180.0, clock=clock,
                                  server_args={"incremental_streaming_output": incremental})
    url = serve(server).url
    requests = random_requests(4, seed=3)
    with patch.object(asyncio, "new_event_loop", clock.new_event_loop):
        engine = http_engine(url, request_timeout_s=600.0, max_in_flight=1)
    results = run(engine, requests)
    assert clock.skew > 4 * 600.0, "each request took longer than the timeout on the client's clock"
    assert len(server.rids) == len(requests)  # not one restarted
    assert server.outcomes["ok"] == len(requests) and server.aborted == 0
    assert_rows_as_non_stream(url, requests, results)


def test_a_server_that_stops_sending_is_retried_after_the_idle_timeout(serve):
    """A stalled stream sends nothing more until the client gave up on it (its idle timeout)."""
    server = SGLangLoopbackServer(DeterministicBackend(), faults=(Fault("stall", every=2),
                                                                  Fault("truncate", every=5, offset=1),
                                                                  Fault("abort", every=7, offset=3, status=503)))
    url = serve(server).url
    requests = random_requests(16, seed=4)
    results = run(http_engine(url, request_timeout_s=0.5), requests)
    assert server.outcomes["fault:stall"] > 0 and server.outcomes["fault:abort"] > 0
    assert_rows_as_non_stream(url, requests, results)


def test_a_router_retry_that_reuses_our_id_recovers(serve):
    """The router times out the first try (the worker holds it until the router gives up) and
    retries it with the same rid while the worker still holds it: 400 "Duplicate request ID" comes
    back, and our retry (a new rid) succeeds."""
    worker = SGLangLoopbackServer(DeterministicBackend(), faults=(Fault("hang", every=1),), keep_aborted=True)
    worker_url = serve(worker).url
    router = RouterLoopback(worker_url, request_timeout_s=0.3, max_retries=2)
    router_url = serve(router).url
    requests = random_requests(3, seed=5)
    results = run(http_engine(router_url, request_timeout_s=5.0), requests)
    assert worker.outcomes["duplicate"] >= len(requests)
    assert_rows_as_non_stream(worker_url, requests, results)


def test_a_router_over_two_workers_retrying_with_our_id_gives_each_sample_once(serve):
    """One worker times out at the router (which retries with the same rid on the next worker, or
    on the slow one that still holds the id): every sample comes back once, as the worker generates it."""
    slow = SGLangLoopbackServer(DeterministicBackend(), faults=(Fault("hang", every=1),), keep_aborted=True)
    fast = SGLangLoopbackServer(DeterministicBackend())
    slow_url, fast_url = serve(slow).url, serve(fast).url
    router = RouterLoopback([slow_url, fast_url], request_timeout_s=0.3, max_retries=3)
    requests = random_requests(8, seed=6)
    results = run(http_engine(serve(router).url, request_timeout_s=5.0), requests)
    assert sorted(r.sample_id for r in results) == list(range(8)) and all(r.error is None for r in results)
    assert router.tries > len(requests) and fast.outcomes["ok"] > 0  # retries happened, the fast worker answered
    assert_rows_as_non_stream(fast_url, requests, results)
