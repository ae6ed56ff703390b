"""Fixtures of the real-SGLang tests: one real server per module, the transformers reference rows."""

from __future__ import annotations

import pytest

from ...support.real_sglang import RealServer, sglang_python


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One real `launch_server` on the tiny model (bf16, CPU) for the module's tests."""
    sglang_python()  # skip (or fail under EAGLE3_SYNTH_REQUIRE_SGLANG=1) before anything starts
    log = tmp_path_factory.mktemp("sglang-server") / "server.log"
    with RealServer(log) as running:
        yield running
