"""The real SGLang 0.5.23 on the CPU backend, for the tests that hold our adapters against it.

SGLang lives in a virtual environment of its own (`make sglang-venv`: torch 2.14.1, SGLang's CPU
kernels built from its source), so tests reach it through processes: `launch_server` servers
(`RealServer`, started and stopped by pid) and `eagle3-synth` run with that venv's interpreter
for the in-process `--engine sglang`. Without the venv these tests skip, naming why, except where
EAGLE3_SYNTH_REQUIRE_SGLANG=1 (CI): there a missing venv fails. EAGLE3_SYNTH_SGLANG_PYTHON
points at another interpreter with SGLang (and this package) installed.

Every model here runs in bfloat16: SGLang's CPU kernels have no other dtype (engines/sglang/args.py).
Every engine and server runs with mem_fraction_static 0.1: none needs it to start, but without it
SGLang sizes its KV cache from the memory free when it starts and fills it (20-22 GB resident for
the tiny model on a 24 GB machine, docs/guides/engines.md), and these tests run engines beside each
other and beside the rest of the suite.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from stand_ins import real_sglang
from stand_ins.real_sglang import (CPU_ENV, START_TIMEOUT_S, STOP_TIMEOUT_S, TINY_MODEL, ServerFailed,  # noqa: F401
                                   free_port, get, sglang_env)

from .trainer_venvs import SGLANG, trainer_python


def sglang_python() -> Path:
    """The SGLang venv's interpreter, or skip (fail under EAGLE3_SYNTH_REQUIRE_SGLANG=1) naming why."""
    return trainer_python(SGLANG)


def wait_for_health(*args, **kwargs) -> None:
    """`stand_ins.real_sglang.wait_for_health`, a server that did not start failing the test."""
    try:
        real_sglang.wait_for_health(*args, **kwargs)
    except ServerFailed as exc:
        pytest.fail(str(exc))


class RealServer(real_sglang.RealServer):
    """`stand_ins.real_sglang.RealServer` with the SGLang venv's interpreter (or a skip), a server
    that did not start failing the test."""

    def python(self) -> Path:
        return sglang_python()

    def wait_healthy(self) -> None:
        try:
            super().wait_healthy()
        except ServerFailed as exc:
            pytest.fail(str(exc))
