"""Our typing of engine arguments and the in-process stand-in, held to the SGLang 0.5.23 installed
in its venv (`make sglang-venv`): `ServerArgs` itself types what `--engine-arg` gives, and the
stand-in's `async_generate` and shutdown are the real ones' (tests/support/fake_sglang.py)."""

from __future__ import annotations

import ast
import inspect
import json
import subprocess
from pathlib import Path

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


def in_sglang_venv(script: str) -> str:
    done = subprocess.run([str(sglang_python()), "-c", script], capture_output=True, text=True, env=sglang_env(),
                          timeout=300)  # a hang detector only
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def test_engine_args_typed_from_strings_are_what_the_real_server_args_take():
    typed, built = json.loads(in_sglang_venv(TYPED_BY_SERVER_ARGS))
    assert typed == {"tp_size": 2, "mem_fraction_static": 0.8, "schedule_policy": "lpm", "cuda_graph_bs_decode": [1, 2]}
    assert built == [2, 0.8, "lpm", [1, 2]]


def test_the_stand_in_has_the_real_engines_parameters_and_shutdown():
    """Read from the installed source: the stand-in's async_generate takes the real parameter list,
    and the real shutdown kills the caller's process tree the way our guard expects."""
    origin = Path(in_sglang_venv("import importlib.util; print(importlib.util.find_spec('sglang').origin)"))
    source = (origin.parent / "srt" / "entrypoints" / "engine.py").read_text()
    engine_class = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == "Engine")
    methods = {n.name: n for n in engine_class.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    real = methods["async_generate"].args
    fake = inspect.signature(FakeEngine.async_generate).parameters.values()
    assert [a.arg for a in real.args[1:]] == [p.name for p in fake if p.kind == p.POSITIONAL_OR_KEYWORD and p.name != "self"]
    assert [a.arg for a in real.kwonlyargs] == [p.name for p in fake if p.kind == p.KEYWORD_ONLY]
    calls = [ast.unparse(c) for c in ast.walk(methods["shutdown"]) if isinstance(c, ast.Call)]
    assert "kill_process_tree(os.getpid(), include_parent=False, wait_timeout=60)" in calls
