"""Shared fixtures: the project's own tokenizers and tiny model (made by tests/fixtures/make_*.py and train_tiny_model.py, no downloads)."""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path

import pytest

# Before torch loads OpenMP: its idle threads sleep instead of spinning, which on a busy machine burns
# CPU time that the 5 s limit below counts and that every other process needs.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from eagle3_synth.engines.sglang.args import CPU_ENGINE_VARIABLE  # noqa: E402
from eagle3_synth.engines.sglang.processes import CPU_ALLREDUCE_SHM
from eagle3_synth.run.kill_points import KILL_ENV, kill_point

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

FIXTURES = Path(__file__).resolve().parent / "fixtures"
KIMI_TOKENIZER = FIXTURES / "tokenizers" / "kimi_k25"
QWEN_TOKENIZER = FIXTURES / "tokenizers" / "qwen3"
TINY_MODEL = FIXTURES / "models" / "tiny-kimi"

# Two tiers: `make test` runs what is not marked slow, `make test-all` runs everything. Slow is what needs
# the real SGLang, a trainer's venv, Slurm or Ray, or runs a demo: the folders and fixtures below mark
# their tests, a single slow test elsewhere says so itself (`@pytest.mark.slow`).
SLOW_FOLDERS = ("engines/real", "examples")
SLOW_FIXTURES = {"slurm", "ray_cluster", "speculators_python", "specforge_python"}
# A fast-tier test over this many seconds fails. The measure is the smaller of the call's wall time and
# the CPU time of the test process and of the children it waited for: on a shared machine the wall
# clock grows with others' load and CPU time does not, while torch's threads make CPU time exceed the
# wall clock; a test is too slow only when both say so. Processes the test does not wait for (a
# forkserver's, a pool's) are not counted: CI's --durations=15 shows what that leaves out.
FAST_LIMIT_S = 5.0


def pytest_collection_modifyitems(items):
    tests = Path(__file__).resolve().parent
    for item in items:
        folder = item.path.parent.relative_to(tests).as_posix()
        if folder.startswith(SLOW_FOLDERS) or SLOW_FIXTURES.intersection(item.fixturenames):
            item.add_marker(pytest.mark.slow)


def cpu_seconds() -> float:
    usages = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return sum(usage.ru_utime + usage.ru_stime for usage in usages)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    wall, cpu = time.perf_counter(), cpu_seconds()
    result = yield
    taken = min(time.perf_counter() - wall, cpu_seconds() - cpu)
    if taken > FAST_LIMIT_S and item.get_closest_marker("slow") is None:
        pytest.fail(f"{item.nodeid} took {taken:.1f} s (over {FAST_LIMIT_S:.0f} s of both wall and CPU time) "
                    "in the fast tier: mark it @pytest.mark.slow or make it faster", pytrace=False)
    return result


@pytest.fixture(autouse=True, scope="session")
def this_process_never_killed():
    """Kill points read EAGLE3_SYNTH_KILL_AT once per process: reading it now, unset, keeps the test
    process itself unarmed when a test sets it for the processes it starts (sbatch passes it on)."""
    assert KILL_ENV not in os.environ, f"{KILL_ENV} is set for the whole test run"
    kill_point("tests.session")


@pytest.fixture(autouse=True)
def fresh_datasets_cache(tmp_path_factory, monkeypatch):
    """A datasets cache per test.

    datasets 5.2 caches a local folder with a README `configs:` block by folder name and config,
    not by file contents: a rebuilt folder called `ds` would load another test's old rows.
    """
    import datasets.config

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path_factory.mktemp("hf_datasets_cache"))


@pytest.fixture(autouse=True)
def sglang_cpu_variable_kept():
    """`--engine-arg device=cpu` sets SGLANG_USE_CPU_ENGINE in the process that will start SGLang
    (engines/sglang/engine.py use_cpu_backend); in the test process it would reach every later test's
    fake or real engine (a bfloat16-only CPU check where none was asked for)."""
    before = os.environ.get(CPU_ENGINE_VARIABLE)
    yield
    if before is None:
        os.environ.pop(CPU_ENGINE_VARIABLE, None)
    else:
        os.environ[CPU_ENGINE_VARIABLE] = before


# SGLang's CPU kernels create one shared-memory segment per engine on an AMX CPU (sglang-kernel's
# csrc/cpu/shm.cpp:157-176, `deepspeed_allreduce_buffer_<uid>_<addr>_<port>_<rank>`, up to 258 MiB,
# started by srt/distributed/bootstrap.py `_init_cpu_threads_env`) and never unlink it: every engine a test starts
# would stay in /dev/shm, in memory, until the machine filled (seen: 19 GB after a suite and two
# benchmarks, and a real server too slow to start). `SGLangEngine.close()` and `RealServer.stop()`
# remove the ones their processes mapped (engines/sglang/processes.py); each test also removes what
# else appeared while it ran (an engine killed before it could be read). An engine that outlives its
# test (a module-scoped one) keeps its mapping: it is single-rank, so no peer opens the name later.
SHM = Path(CPU_ALLREDUCE_SHM).parent
SGLANG_SHM_PREFIX = f"{Path(CPU_ALLREDUCE_SHM).name}{os.getuid()}_"


def sglang_shm_segments() -> set[Path]:
    return set(SHM.glob(SGLANG_SHM_PREFIX + "*")) if SHM.is_dir() else set()


@pytest.fixture(autouse=True)
def no_sglang_shm_left():
    before = sglang_shm_segments()
    yield
    for segment in sglang_shm_segments() - before:
        segment.unlink(missing_ok=True)


@pytest.fixture(scope="session")
def kimi_tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(KIMI_TOKENIZER)


@pytest.fixture(scope="session")
def qwen_tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(QWEN_TOKENIZER)


@pytest.fixture(scope="session")
def kimi_markers(kimi_tokenizer):
    from eagle3_synth.contract.profiles import PROFILES, resolve_markers

    return resolve_markers(PROFILES["kimi_k2"], kimi_tokenizer)


@pytest.fixture(scope="session")
def qwen_markers(qwen_tokenizer):
    from eagle3_synth.contract.profiles import PROFILES, resolve_markers

    return resolve_markers(PROFILES["qwen3"], qwen_tokenizer)
