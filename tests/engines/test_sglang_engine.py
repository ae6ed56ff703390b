"""The in-process `sglang` engine adapter, against a stand-in with sglang.Engine 0.5.23's surface.

`tests/support/fake_sglang.py` copies the real class's signatures, result dicts, errors and
shutdown habit, for what the CPU engine cannot show (several GPUs, attention DP, KV pressure at
scale); tests/engines/real/ runs the real 0.5.23 on the CPU backend.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import subprocess
import sys
import textwrap
import time
import types
from pathlib import Path
from typing import Annotated, List, Optional

import pytest
from datasets import load_dataset

from eagle3_synth.cli import main
from eagle3_synth.engines import EngineOptions, GenerationRequest, SamplingParams, create_engine
from eagle3_synth.engines.sglang import engine as sglang_engine
from eagle3_synth.engines.sglang.protocol import RetryPolicy
from eagle3_synth.engines.sglang.args import CPU_ENGINE_VARIABLE, FieldSpec, type_engine_args
from eagle3_synth.errors import ConfigError, EngineError
from eagle3_synth.contract.row import FEATURES

from ..conftest import TINY_MODEL
from stand_ins import sglang_results as R
from ..support.fake_sglang import Engine as FakeEngine, HTTPException, Reply, is_alive
from ..support.modules import root_on_path

HAS_SGLANG = importlib.util.find_spec("sglang") is not None  # never in the package's own venv (make sglang-venv)

REPO = Path(__file__).resolve().parents[2]


class Arg:
    """The shape of sglang.srt.arg_groups.arg_utils.Arg as it appears in ServerArgs annotations."""

    def __init__(self, help: str, choices: list | None = None):
        self.help = help
        self.choices = choices


# Real ServerArgs fields (0.5.23), annotations as msgspec.structs.fields reports them.
FIELDS = [
    FieldSpec("model_path", Annotated[str, Arg("The path of the model weights.")], required=True),
    FieldSpec("tokenizer_path", Annotated[Optional[str], "The path of the tokenizer."]),
    FieldSpec("skip_tokenizer_init", Annotated[bool, "If set, skip init tokenizer and pass input_ids in generate request."]),
    FieldSpec("trust_remote_code", Annotated[bool, "Whether or not to allow for custom models defined on the Hub."]),
    FieldSpec("dtype", Annotated[str, Arg("Data type for model weights and activations.", choices=[
        "auto", "half", "float16", "bfloat16", "float", "float32"])]),
    FieldSpec("log_level", Annotated[str, "The logging level of all loggers."]),
    FieldSpec("tp_size", Annotated[int, Arg("The tensor parallelism size.")]),
    FieldSpec("dp_size", Annotated[int, Arg("The data parallelism size.")]),
    FieldSpec("attn_dp_size", Annotated[int, Arg("The attention data parallelism size: the number of data-parallel "
                                                 "attention groups inside the TP group, one scheduler each, while the "
                                                 "FFN stays tensor parallel.")]),
    FieldSpec("nnodes", Annotated[int, Arg("The number of nodes.")]),
    FieldSpec("node_rank", Annotated[int, Arg("The node rank.")]),
    FieldSpec("mem_fraction_static", Annotated[Optional[float], "The fraction of the memory used for static allocation."]),
    FieldSpec("max_running_requests", Annotated[Optional[int], "The maximum number of running requests."]),
    FieldSpec("schedule_policy", Annotated[str, Arg("The scheduling policy of the requests.", choices=[
        "lpm", "random", "fcfs", "dfs-weight", "lof", "priority", "routing-key", "hrrn", "shortest-prefill-first"])]),
    FieldSpec("cuda_graph_bs_decode", Annotated[Optional[List[int]], "Explicit list of batch sizes to capture."]),
    FieldSpec("json_model_override_args", Annotated[str, "A dictionary in JSON string format."]),
    FieldSpec("enable_deterministic_inference", Annotated[bool, "Enable deterministic inference mode."]),
    FieldSpec("enable_priority_scheduling", Annotated[bool, "Enable priority scheduling. Requests with higher priority "
                                                            "integer values will be scheduled first by default."]),
]
FIELD_NAMES = {f.name for f in FIELDS}
STOP = (2034, 2033)  # <|im_end|>, [EOS] of the kimi fixture tokenizer
PARAMS = SamplingParams(max_new_tokens=64, temperature=0.6, stop_token_ids=STOP, top_p=0.95, seed=7)
FAST_RETRY = RetryPolicy(max_retries=2, base_delay_s=0.001, max_delay_s=0.002)


def body_ids(prompt: list[int], n: int = 5) -> list[int]:
    return [1000 + (sum(prompt) + i) % 900 for i in range(n)]


def stop_reply(prompt: list[int], cached: int = 0) -> Reply:
    output = body_ids(prompt) + [STOP[0]]
    return Reply(R.finished("x", len(prompt), output, R.stop_reason(STOP[0]), cached_tokens=cached))


def requests(n: int) -> list[GenerationRequest]:
    return [GenerationRequest(i, [100 + i, 7, 8, 9 + i]) for i in range(n)]


@pytest.fixture
def launch(monkeypatch):
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


# -- --engine-arg typing ----------------------------------------------------------------------------

def test_engine_args_are_typed_by_server_args_fields():
    typed = type_engine_args({
        "tp_size": 8, "mem_fraction_static": 0.85, "schedule_policy": "lpm", "cuda_graph_bs_decode": [1, 2, 4],
        "json_model_override_args": {"rope_scaling": None}, "enable_deterministic_inference": "true",
        "max_running_requests": 512.0,
    }, FIELDS)
    assert typed == {
        "tp_size": 8, "mem_fraction_static": 0.85, "schedule_policy": "lpm", "cuda_graph_bs_decode": [1, 2, 4],
        "json_model_override_args": '{"rope_scaling": null}', "enable_deterministic_inference": True,
        "max_running_requests": 512,
    }
    assert type(typed["mem_fraction_static"]) is float


@pytest.mark.parametrize("raw, message", [
    ({"tp_sise": 8}, "tp_sise: not an SGLang ServerArgs field; did you mean tp_size"),
    ({"tp_size": "eight"}, 'tp_size="eight": expected an integer'),
    ({"tp_size": 1.5}, "expected an integer"),
    ({"mem_fraction_static": True}, "expected a number"),
    ({"schedule_policy": "lifo"}, "must be one of ['lpm'"),
    ({"cuda_graph_bs_decode": 4}, "expected a JSON list"),
    ({"model_path": "/other"}, "model_path: set by --model"),
    ({"skip_tokenizer_init": False}, "skip_tokenizer_init: set by nothing (it is always true"),
    ({"trust_remote_code": True}, "set by --trust-remote-code"),
])
def test_bad_engine_args_name_the_option(raw, message):
    with pytest.raises(ConfigError) as error:
        type_engine_args(raw, FIELDS)
    assert message in str(error.value)


# -- launching ----------------------------------------------------------------------------------------

def test_launch_passes_token_id_mode_and_typed_args(launch):
    engine = launch(lambda ids, sp: stop_reply(ids), capacity=100, trust_remote_code=True,
                    engine_args={"tp_size": 2, "mem_fraction_static": 0.8})
    assert engine.engine.server_args == {
        "model_path": "/models/fake", "skip_tokenizer_init": True, "trust_remote_code": True,
        "tp_size": 2, "mem_fraction_static": 0.8, "log_level": "error",
    }
    # No --max-in-flight: the window starts at the engine's running-request capacity (its server
    # info), at most 64 per rank, and follows its load up to twice the capacity.
    assert engine.max_in_flight == 64 and engine._window.sizer.ceiling == 200


def test_launch_without_model_is_a_config_error():
    cls = FakeEngine.configure(lambda ids, sp: stop_reply(ids), FIELD_NAMES)
    with pytest.raises(ConfigError, match="needs --model"):
        sglang_engine.launch(cls, FIELDS, EngineOptions())


@pytest.mark.parametrize("node_rank", [1, 3])
def test_a_follower_node_is_refused_before_the_engine_starts(node_rank):
    cls = FakeEngine.configure(lambda ids, sp: stop_reply(ids), FIELD_NAMES)
    with pytest.raises(ConfigError, match=rf"--engine-arg node_rank={node_rank}: a follower node of a multi-node "
                                          r"SGLang engine waits inside Engine\(\) and never generates"):
        sglang_engine.launch(cls, FIELDS, EngineOptions(model="/m", engine_args={"nnodes": 4, "node_rank": node_rank}))
    engine = sglang_engine.launch(cls, FIELDS, EngineOptions(model="/m", engine_args={"nnodes": 4, "node_rank": 0}))
    engine.close()


def test_a_bad_window_is_refused_before_the_engine_starts():
    from eagle3_synth.engines.sglang.processes import child_pids

    before = child_pids()
    cls = FakeEngine.configure(lambda ids, sp: stop_reply(ids), FIELD_NAMES)
    with pytest.raises(ConfigError, match="--max-in-flight must be >= 1, got 0"):
        sglang_engine.launch(cls, FIELDS, EngineOptions(model="/m", max_in_flight=0))
    assert child_pids() == before, "no engine process was started"


def test_unguarded_script_in_a_spawned_worker_is_refused(monkeypatch):
    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__mp_main__"))
    cls = FakeEngine.configure(lambda ids, sp: stop_reply(ids), FIELD_NAMES)
    with pytest.raises(ConfigError, match='if __name__ == "__main__"'):
        sglang_engine.launch(cls, FIELDS, EngineOptions(model="/m"))


# What sglang 0.5.23's scheduler does when it raises while starting (srt/managers/scheduler.py
# run_scheduler_process): log the traceback, then SIGQUIT its parent, where the custom_sigquit_handler
# server argument answers (srt/entrypoints/engine.py). Here: weights that leave no memory for the KV cache.
NO_KV_MEMORY = ("ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=-0.049. "
                "Raise --mem-fraction-static above 0.101 (minimum viable = 1 - available/pre = 0.1003). If using "
                "speculative decoding, draft weights are now counted.")
SCHEDULER_FAILS = textwrap.dedent(f"""
    import os, signal, sys
    sys.stderr.write("[2026-12-07 20:00:00] Scheduler hit an exception: Traceback (most recent call last):\\n"
                     '  File "scheduler.py", line 6364, in run_scheduler_process\\n'
                     {NO_KV_MEMORY!r} + "\\n")
    sys.stderr.flush()
    os.kill(os.getppid(), signal.SIGQUIT)
""")
SIGQUIT_FIELDS = [*FIELDS, FieldSpec("custom_sigquit_handler", Annotated[Optional[object], "A handler for SIGQUIT."])]


class SchedulerFailsAtStart:
    """`sglang.Engine(**server_args)` whose scheduler process raises while the engine starts."""

    def __init__(self, **kwargs):
        signal.signal(signal.SIGQUIT, kwargs["custom_sigquit_handler"])  # as Engine._launch_subprocesses does
        subprocess.run([sys.executable, "-c", SCHEDULER_FAILS], check=True)
        time.sleep(60)  # the SIGQUIT came before the child ended: its handler raises here at the latest
        raise AssertionError("the scheduler's SIGQUIT never reached the handler")


class RefusesItsArguments:
    """`sglang.Engine(**server_args)` whose server-argument checks refuse a combination (arg_groups/memory_hook.py)."""

    def __init__(self, **kwargs):
        raise ValueError("--ple-offload-embedding cannot be combined with\n--cpu-offload-gb or --offload-group-size: "
                         "generic layer offload would stage the pinned PLE embedding back to the device.")


@pytest.fixture
def sigquit_kept():
    previous = signal.getsignal(signal.SIGQUIT)
    yield
    signal.signal(signal.SIGQUIT, previous)


def test_an_engine_that_cannot_start_is_the_users_to_fix_with_sglangs_reason(sigquit_kept):
    """A start-up failure repeats on every rerun: exit 2 (ConfigError), not 75, with the reason SGLang's
    scheduler logged and what to change, in one line."""
    with pytest.raises(ConfigError) as raised:
        sglang_engine.launch(SchedulerFailsAtStart, SIGQUIT_FIELDS, EngineOptions(model="/m"))
    assert str(raised.value) == (
        f"--engine sglang: SGLang could not start: {NO_KV_MEMORY} -- change what it names (SGLang's --flag-name is "
        "--engine-arg flag_name=VALUE here), or free memory for it; rerun as is and it fails the same way")

    with pytest.raises(ConfigError) as raised:
        sglang_engine.launch(RefusesItsArguments, FIELDS, EngineOptions(model="/m"))
    assert str(raised.value) == (
        "--engine sglang: SGLang could not start: ValueError: --ple-offload-embedding cannot be combined with "
        "--cpu-offload-gb or --offload-group-size: generic layer offload would stage the pinned PLE embedding back to "
        "the device. -- change what it names (SGLang's --flag-name is --engine-arg flag_name=VALUE here); rerun as "
        "is and it fails the same way")


def test_a_build_whose_engine_cannot_start_exits_2_in_one_line(tmp_path, monkeypatch, capsys, sigquit_kept):
    monkeypatch.setattr(sglang_engine, "import_sglang", lambda: (SchedulerFailsAtStart, SIGQUIT_FIELDS))
    code = main(["build", "B1_glaive", "--model", str(TINY_MODEL), "--engine", "sglang", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2, err
    last = err.splitlines()[-1]
    assert last.startswith(f"eagle3-synth build: error: --engine sglang: SGLang could not start: {NO_KV_MEMORY} -- ")
    assert [line for line in err.splitlines() if line.startswith("eagle3-synth")] == [last]


def report_sigint(queue) -> None:
    queue.put(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)


class SpawnsItsProcesses:
    """The class fields sglang.Engine 0.5.23 starts its processes with (srt/entrypoints/engine.py)."""

    run_scheduler_process_func = staticmethod(report_sigint)
    run_detokenizer_process_func = staticmethod(report_sigint)


def test_the_engines_processes_leave_ctrl_c_to_us():
    """Spawned as SGLang spawns them (the target pickled): they ignore SIGINT, so a terminal's Ctrl-C
    to the process group stops the run in this process only."""
    import multiprocessing

    from eagle3_synth.engines.sglang.processes import without_ctrl_c

    engine_cls = without_ctrl_c(SpawnsItsProcesses)
    assert issubclass(engine_cls, SpawnsItsProcesses)
    context = multiprocessing.get_context("spawn")
    for target in (engine_cls.run_scheduler_process_func, engine_cls.run_detokenizer_process_func):
        queue = context.Queue()
        process = context.Process(target=target, args=(queue,))
        process.start()
        assert queue.get(timeout=120) is True
        process.join(120)
    assert signal.getsignal(signal.SIGINT) is not signal.SIG_IGN  # this process's own stays


@pytest.mark.skipif(HAS_SGLANG, reason="sglang is installed here")
def test_without_sglang_the_engine_says_how_to_get_it():
    with pytest.raises(ConfigError, match=r"pip install 'eagle3-synth\[sglang\]'"):
        create_engine("sglang", EngineOptions(model="/models/x"))


def test_device_cpu_selects_sglangs_cpu_backend_when_the_engine_is_created_not_when_checked(monkeypatch):
    """The check before anything loads (a dry run's too) leaves this process's environment alone; creating
    the engine sets the variable before SGLang's engine modules are imported."""
    fields = [*FIELDS, FieldSpec("device", Annotated[Optional[str], "The device to use."])]
    monkeypatch.delenv(CPU_ENGINE_VARIABLE, raising=False)
    monkeypatch.setattr(sglang_engine, "import_server_args", lambda: fields)
    options = EngineOptions(model="/m", dtype="bfloat16", engine_args={"device": "cpu"})
    sglang_engine.check_options(options)
    assert CPU_ENGINE_VARIABLE not in os.environ
    seen = []

    def import_sglang():
        seen.append(os.environ.get(CPU_ENGINE_VARIABLE))
        raise ConfigError("stopped before the engine")

    monkeypatch.setattr(sglang_engine, "import_sglang", import_sglang)
    with pytest.raises(ConfigError, match="^stopped before the engine$"):
        sglang_engine.create(options)
    assert seen == ["1"]


# -- generating ---------------------------------------------------------------------------------------

def test_results_stop_length_abort_and_a_raising_request(launch):
    """Real 0.5.23 results: stop, length, a returned abort, a raised ValueError, a transient 503."""
    attempts: dict[int, int] = {}

    def plan(ids, sampling):
        sample = ids[0] - 100
        attempts[sample] = attempts.get(sample, 0) + 1
        if sample == 1:
            out = body_ids(ids, sampling["max_new_tokens"])
            return Reply(R.finished("x", len(ids), out, R.length_reason(sampling["max_new_tokens"])))
        if sample == 2:
            return Reply(R.queued_abort("x"))
        if sample == 3:
            return Reply(error=ValueError(R.context_too_long(len(ids), 4)))
        if sample == 4 and attempts[sample] == 1:
            return Reply(error=HTTPException(503, "The request queue is full."))
        if sample == 5:
            return Reply(error=HTTPException(500, "Internal server error"))
        return stop_reply(ids, cached=2)

    engine = launch(plan)
    results = {r.sample_id: r for r in engine.generate(requests(7), PARAMS)}
    assert sorted(results) == list(range(7))
    prompts = {r.sample_id: r.prompt_ids for r in requests(7)}
    for sample in (0, 4, 6):
        assert results[sample].finish_reason == "stop" and results[sample].error is None
        assert results[sample].output_ids == body_ids(prompts[sample]) + [STOP[0]]
        assert results[sample].completion_tokens == 6 and results[sample].cached_tokens == 2
    assert results[1].finish_reason == "length" and len(results[1].output_ids) == 64
    assert results[2].finish_reason == "abort" and "Abort in waiting queue" in results[2].error
    assert results[3].finish_reason == "abort" and "longer than the model's context length" in results[3].error
    assert attempts[3] == 1, "a 400-type error is not retried"
    assert attempts[4] == 2, "a 503 is retried"
    assert results[5].finish_reason == "abort" and "gave up after 3 attempts" in results[5].error
    assert "Internal server error" in results[5].error and attempts[5] == 3


def test_every_sampling_parameter_is_sent_explicitly(launch):
    engine = launch(lambda ids, sp: stop_reply(ids))
    list(engine.generate(requests(3), PARAMS))
    calls = sorted(engine.engine.calls, key=lambda c: c["input_ids"][0])
    for sample, call in enumerate(calls):
        assert call["input_ids"] == requests(3)[sample].prompt_ids
        assert call["sampling_params"] == {"max_new_tokens": 64, "temperature": 0.6, "top_p": 0.95, "top_k": -1,
                                           "min_p": 0.0, "stop_token_ids": list(STOP), "sampling_seed": 7 + sample}
        assert call["stream"] is False
    assert len({c["rid"] for c in calls}) == 3


def test_window_stays_full_and_hands_results_on_as_they_complete(launch):
    """Sample 0 finishes only after all 23 others have: the window must keep feeding the engine
    while one request is slow (a batch call would wait for it), never running more than 4."""
    def plan(ids, sampling):
        reply = stop_reply(ids)
        reply.delay_s = 0.001  # every request yields once, so all four submitted together run together
        if ids[0] == 100:
            reply.wait_until = lambda: len(engine.engine.calls) == 24 and engine.engine.running == 1  # all others done
        return reply

    engine = launch(plan, max_in_flight=4)
    order, seen_in_flight = [], []
    for result in engine.generate(requests(24), PARAMS):
        order.append(result.sample_id)
        seen_in_flight.append(engine.in_flight)
    assert sorted(order) == list(range(24)) and order[-1] == 0
    assert engine.engine.max_running == 4
    assert max(seen_in_flight) <= 4 and engine.in_flight == 0


def test_a_contract_violation_stops_the_run_naming_the_sample(launch):
    def plan(ids, sampling):
        reply = stop_reply(ids)
        if ids[0] == 103:
            reply.result["meta_info"]["completion_tokens"] += 1
        else:
            reply.delay_s = 0.2
        return reply

    engine = launch(plan, max_in_flight=8)
    with pytest.raises(EngineError, match=r"sample_id 3: .*len\(output_ids\) = 6 but completion_tokens = 7"):
        list(engine.generate(requests(8), PARAMS))
    assert engine.in_flight == 0 and engine.engine.running == 0, "the other requests were cancelled"


def test_the_callers_sigterm_handler_stays_in_charge(launch):
    """SGLang's own SIGTERM handler would drain every request (the whole run) and kill the process tree."""
    received = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))
    try:
        engine = launch(lambda ids, sp: stop_reply(ids))
        assert len(list(engine.generate(requests(3), PARAMS))) == 3
        os.kill(os.getpid(), signal.SIGTERM)
        engine.engine.loop.run_until_complete(asyncio.sleep(0.05))  # a loop-level handler would run now
        assert received == [signal.SIGTERM]
        assert not engine.engine.tokenizer_manager.gracefully_exit
        assert engine.engine.tokenizer_manager.event_loop is engine.engine.loop
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_close_kills_the_engine_processes_but_not_the_callers(launch):
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]  # outlives the test, which kills it
    mine = [subprocess.Popen(sleeper)]
    try:
        engine = launch(lambda ids, sp: stop_reply(ids))
        mine.append(subprocess.Popen(sleeper))  # started after the engine: SGLang's shutdown would kill it too
        workers = engine.engine.get_all_child_pids()
        assert all(is_alive(pid) for pid in workers)
        engine.close()
        assert not any(is_alive(pid) for pid in workers), "the engine's own worker is gone"
        assert all(process.poll() is None for process in mine), "the caller's children live on"
        engine.close()  # twice is harmless
    finally:
        for process in mine:
            process.kill()
            process.wait()


def test_exit_without_close_still_spares_the_callers_children(tmp_path):
    """SGLang registers its (kill-everything) shutdown with atexit; ours replaces it."""
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent("""
        import subprocess, sys
        from tests.support.fake_sglang import Engine
        from tests.engines.test_sglang_engine import FIELDS, FIELD_NAMES, stop_reply
        from eagle3_synth.engines import EngineOptions
        from eagle3_synth.engines.sglang.engine import launch

        if __name__ == "__main__":
            # Sleeps past the 300 s bound below: alive after the script exits however slowly it ran.
            mine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            plan = lambda ids, sampling: stop_reply(ids)
            engine = launch(Engine.configure(plan, FIELD_NAMES), FIELDS, EngineOptions(model="/m"))
            print(mine.pid, engine.engine.get_all_child_pids()[0], flush=True)
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=REPO,
                         env=root_on_path())
    assert out.returncode == 0, out.stderr
    mine, worker = (int(x) for x in out.stdout.split())
    try:
        assert is_alive(mine), "the script's own child survived its exit"
        assert not is_alive(worker), "the engine's worker was shut down at exit"
    finally:
        for pid in (mine, worker):
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass


def test_build_end_to_end_with_the_sglang_engine(tmp_path, monkeypatch, kimi_tokenizer):
    """`build --engine sglang` (fake engine class in place of sglang.Engine) -> a loadable dataset."""
    ids = kimi_tokenizer.convert_tokens_to_ids
    reasoning = kimi_tokenizer.encode("Let me think.", add_special_tokens=False)
    answer = kimi_tokenizer.encode("Done.", add_special_tokens=False)

    def plan(prompt, sampling):
        output = reasoning + [ids("</think>")] + answer + [ids("<|im_end|>")]
        assert sampling["stop_token_ids"] and sampling["max_new_tokens"] == 32
        return Reply(R.finished("x", len(prompt), output, R.stop_reason(output[-1])))

    created = []

    def fake_import():
        cls = FakeEngine.configure(plan, FIELD_NAMES)
        created.append(cls)
        return cls, FIELDS

    monkeypatch.setattr(sglang_engine, "import_sglang", fake_import)
    out = tmp_path / "ds"
    code = main(["build", "B1_glaive", "--model", str(TINY_MODEL), "--engine", "sglang", "--engine-arg", "tp_size=1",
                 "--max-new-tokens", "32", "--max-in-flight", "3", "--out", str(out)])
    assert code == 0 and created
    # A private cache: datasets 5.2 caches a README-configured folder by its name alone.
    ds = load_dataset(str(out), "B1_glaive", split="train", cache_dir=str(tmp_path / "hf-cache"))
    assert ds.features == FEATURES
    assert ds["sample_id"] == list(range(len(ds))) and len(ds) >= 3
    expected = reasoning + [ids("</think>")] + answer + [ids("<|im_end|>")]
    for row in ds:
        assert row["output_ids"] == expected
        assert row["think_end"] == len(reasoning) and row["response_start"] == len(reasoning) + 1
        assert row["stop_index"] == len(expected) - 1 and row["finish_reason"] == "stop"
        assert row["prompt_ids"][-1] == ids("<think>"), "Kimi's template opens reasoning in the prompt"
