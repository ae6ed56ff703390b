"""The in-flight window follows what the engine runs: its parallel layout and its load (window.py)."""

from __future__ import annotations

from eagle3_synth.engines import SamplingParams
from eagle3_synth.engines.sglang.http import SGLangHTTPEngine
from eagle3_synth.engines.sglang.window import (MAX_QUEUE_PER_RANK, QUEUE_PER_RANK, START_PER_RANK, EngineLoad,
                                               LoadDrivenSize, running_capacity, start_size, window_size)

from stand_ins.sglang_server import DeterministicBackend, SGLangLoopbackServer
from .conftest import FAST_RETRY
from .test_sglang_engine import Reply, requests, stop_reply
from .test_sglang_http import random_requests

PARAMS = SamplingParams(max_new_tokens=16, temperature=0.0, stop_token_ids=(2034,))


def test_capacity_counts_every_attention_dp_rank():
    # sglang 0.5.23 rewrites dp_size=8 + enable_dp_attention into attn_dp_size=8, dp_size=1.
    info = {"dp_size": 1, "attn_dp_size": 8, "internal_states": [{"effective_max_running_requests_per_dp": 256}]}
    assert running_capacity(info) == 8 * 256
    per_scheduler = {"dp_size": 1, "internal_states": [{"effective_max_running_requests_per_dp": 64}] * 4}
    assert running_capacity(per_scheduler) == 4 * 64
    assert running_capacity({"internal_states": [{}]}) is None


def test_window_is_what_runs_plus_a_short_queue_and_grows_while_nothing_waits():
    saturated = EngineLoad(running=800, waiting=300, ranks=8, token_usage=0.97)
    assert window_size(saturated, current=1600, ceiling=4096) == 800 + 200  # a quarter of what runs
    small = EngineLoad(running=10, waiting=5, ranks=2, token_usage=0.1)
    assert window_size(small, current=100, ceiling=4096) == 10 + QUEUE_PER_RANK * 2
    huge = EngineLoad(running=100_000, waiting=10, ranks=2, token_usage=0.5)
    assert window_size(huge, current=10, ceiling=1 << 20) == 100_000 + MAX_QUEUE_PER_RANK * 2
    hungry = EngineLoad(running=40, waiting=0, ranks=1, token_usage=0.2, hungry=1)
    assert window_size(hungry, current=48, ceiling=4096) == 96 and window_size(hungry, current=48, ceiling=60) == 60
    # A hungry rank grows the window, but never past MAX_QUEUE_PER_RANK waiting per rank.
    assert window_size(EngineLoad(10, 0, 1, 0.05, hungry=1), current=512, ceiling=4096) == 10 + MAX_QUEUE_PER_RANK
    # One rank of eight starving while others queue (requests are spread over the ranks): grow.
    uneven = EngineLoad(running=400, waiting=90, ranks=8, token_usage=0.99, hungry=1)
    assert window_size(uneven, current=490, ceiling=4096) == 400 + MAX_QUEUE_PER_RANK * 8
    snapshots = [{"num_running_reqs": 50, "num_waiting_reqs": 0, "token_usage": 0.5},
                 {"num_running_reqs": 60, "num_waiting_reqs": 9, "token_usage": 0.99},
                 {"num_running_reqs": 70, "num_waiting_reqs": 0, "token_usage": 0.97}]
    assert EngineLoad.from_snapshots(snapshots) == EngineLoad(180, 9, 3, 0.99, hungry=1)


def test_a_load_driven_window_starts_at_most_64_per_rank():
    assert start_size(8 * 2048, ranks=8, ceiling=32768) == 8 * START_PER_RANK  # unset max_running_requests
    assert start_size(8 * 16, ranks=8, ceiling=1000) == 128
    assert start_size(None, ranks=2, ceiling=256) == 256  # unknown capacity (a router): the static window


def test_load_is_read_at_most_every_interval_and_unreadable_load_fixes_the_ceiling():
    now = [0.0]
    reads = []

    def read():
        reads.append(now[0])
        return None if len(reads) <= 3 else EngineLoad(8, 0, 1, 0.0)

    sizer = LoadDrivenSize(read, ceiling=100, every=2.0, clock=lambda: now[0])
    sizes = []
    for t in (0.0, 1.0, 2.0, 3.9, 4.0, 10.0):
        now[0] = t
        sizes.append(sizer(16))
    assert reads == [0.0, 2.0, 4.0]  # three failures in a row: no more reads
    assert sizes == [16, 16, 16, 16, 100, 16]  # ... and the window then stays at the ceiling it was given


def test_offline_engine_window_follows_get_loads_with_attention_dp(launch):
    engine = launch(lambda ids, sp: Reply(**{**vars(stop_reply(ids)), "delay_s": 0.01}), capacity=4,
                    engine_args={"attn_dp_size": 2})
    # It starts at what runs (4 per rank x 2 ranks); its ceiling is twice that, at least 64.
    assert engine.max_in_flight == 8 and engine._window.sizer.ceiling == 64
    engine._window.sizer.every = 0.0
    results = list(engine.generate(requests(60), PARAMS))
    assert sorted(r.sample_id for r in results) == list(range(60)) and all(r.error is None for r in results)
    manager = engine.engine.tokenizer_manager
    assert manager.load_reads > 0 and engine._window.sizer.last_load.ranks == 2
    assert engine.engine.max_running <= 64


def test_http_window_follows_v1_loads_and_falls_back_without_it(serve):
    server = SGLangLoopbackServer(DeterministicBackend(), capacity_per_rank=3, server_args={"attn_dp_size": 2})
    url = serve(server).url
    engine = SGLangHTTPEngine((url,), retry=FAST_RETRY, load_driven=True)
    try:
        engine.check_servers()
        assert engine.max_in_flight == 6 and engine._window.sizer.ceiling == 12
        engine._window.sizer.every = 0.0
        results = list(engine.generate(random_requests(40), PARAMS))
        assert len(results) == 40 and all(r.error is None for r in results)
        assert server.load_reads > 0 and engine._window.sizer.last_load.ranks == 2 and server.max_running <= 12
    finally:
        engine.close()
    # A server (or router) without /v1/loads: after FAILED_READS reads the window is fixed at its ceiling.
    plain = SGLangLoopbackServer(DeterministicBackend(), serve_loads=False)
    engine = SGLangHTTPEngine((serve(plain).url,), retry=FAST_RETRY, load_driven=True)
    try:
        engine.check_servers()
        engine._window.sizer.every = 0.0
        results: list = []

        def one_at_a_time(requests):
            """Each request once the one before it is handed back (None: nothing ready, engines/base.py),
            so the window asks its sizer once per result, however fast the results come."""
            for i, request in enumerate(requests):
                yield request
                while len(results) <= i:
                    yield None

        for result in engine.generate(one_at_a_time(random_requests(20)), PARAMS):
            results.append(result)
        assert len(results) == 20
        # (capacity 256 on one rank: a start of 64, the most per rank; without loads, the ceiling of 512)
        assert engine._window.sizer.last_load is None and engine.max_in_flight == 512
    finally:
        engine.close()


def test_an_explicit_max_in_flight_is_not_load_driven(launch):
    engine = launch(lambda ids, sp: stop_reply(ids), capacity=4, max_in_flight=32)
    assert engine.max_in_flight == 32 and engine._window.sizer is None
