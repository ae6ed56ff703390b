"""Our typing of engine arguments and the in-process stand-in, held to the SGLang 0.5.23 installed
in its venv (`make sglang-venv`): `ServerArgs` itself types what `--engine-arg` gives, and the
stand-in's `async_generate` takes the real one's parameters (tests/support/fake_sglang.py)."""

from __future__ import annotations

import inspect
import json
import subprocess

from ...support.fake_sglang import Engine as FakeEngine
from ...support.real_sglang import sglang_env, sglang_python

# Runs in the SGLang venv: our typing over the real ServerArgs' fields, then ServerArgs built from it.
TYPED_BY_SERVER_ARGS = r"""
import json
from sglang.srt.server_args import ServerArgs
from eagle3_synth.engines.sglang.args import server_args_fields, type_engine_args

# The values as `--engine-arg KEY=VALUE` hands them on (VALUE read as JSON where it parses).
typed = type_engine_args({"tp_size": 2, "mem_fraction_static": 0.8, "schedule_policy": "lpm",
                          "cuda_graph_bs_decode": [1, 2]}, server_args_fields(ServerArgs))
args = ServerArgs(model_path="/models/x", **typed)
print(json.dumps([typed, [args.tp_size, args.mem_fraction_static, args.schedule_policy, args.cuda_graph_bs_decode]]))
"""

# Runs in the SGLang venv: the real async_generate's parameters, each with its kind.
ASYNC_GENERATE_PARAMETERS = r"""
import inspect, json
from sglang.srt.entrypoints.engine import Engine
print(json.dumps([[p.name, p.kind.name] for p in inspect.signature(Engine.async_generate).parameters.values()]))
"""


def in_sglang_venv(script: str) -> str:
    done = subprocess.run([str(sglang_python()), "-c", script], capture_output=True, text=True, env=sglang_env(),
                          timeout=300)  # a hang detector only
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def test_engine_args_typed_from_strings_are_what_the_real_server_args_take():
    typed, built = json.loads(in_sglang_venv(TYPED_BY_SERVER_ARGS))
    assert typed == {"tp_size": 2, "mem_fraction_static": 0.8, "schedule_policy": "lpm", "cuda_graph_bs_decode": [1, 2]}
    assert built == [2, 0.8, "lpm", [1, 2]]


def test_the_stand_in_takes_the_real_engines_parameters():
    """What the shutdown of both does to the caller's other children is tests/engines/real/test_engine_processes.py."""
    real = json.loads(in_sglang_venv(ASYNC_GENERATE_PARAMETERS))
    fake = [[p.name, p.kind.name] for p in inspect.signature(FakeEngine.async_generate).parameters.values()]
    assert fake == real
