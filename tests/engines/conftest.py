"""Fixtures of the engine tests: the in-process adapter over the fake `sglang.Engine`, loopback servers."""

from __future__ import annotations

import pytest

from eagle3_synth.engines import EngineOptions
from eagle3_synth.engines.sglang.protocol import RetryPolicy
from eagle3_synth.engines.sglang import engine as sglang_engine

from stand_ins.sglang_server import SGLangLoopbackServer, ServerThread
from ..support.fake_sglang import FIELD_NAMES, FIELDS, Engine as FakeEngine

FAST_RETRY = RetryPolicy(max_retries=2, base_delay_s=0.001, max_delay_s=0.002)


@pytest.fixture
def launch():
    """launch(plan, **options) -> SGLangEngine over a fake engine class; closed after the test."""
    engines = []

    def start(plan, capacity: int = 8, retry: RetryPolicy = FAST_RETRY, **options):
        cls = FakeEngine.configure(plan, FIELD_NAMES, capacity=capacity)
        engine = sglang_engine.launch(cls, FIELDS, EngineOptions(model="/models/fake", **options))
        engine.retry = retry
        engines.append(engine)
        return engine

    yield start
    for engine in engines:
        engine.close()
        engine.engine.loop.close()


@pytest.fixture
def serve():
    """serve(server) -> a running ServerThread; all stopped after the test."""
    threads = []

    def start(server: SGLangLoopbackServer) -> ServerThread:
        thread = ServerThread(server).__enter__()
        threads.append(thread)
        return thread

    yield start
    for thread in threads:
        thread.__exit__(None, None, None)
