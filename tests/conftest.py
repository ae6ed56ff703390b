"""Shared fixtures: the project's own tokenizers and tiny model (made by tests/fixtures/make_*.py and train_tiny_model.py, no downloads)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from eagle3_synth.engines.sglang.args import CPU_ENGINE_VARIABLE
from eagle3_synth.engines.sglang.processes import CPU_ALLREDUCE_SHM

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

FIXTURES = Path(__file__).resolve().parent / "fixtures"
KIMI_TOKENIZER = FIXTURES / "tokenizers" / "kimi_k25"
QWEN_TOKENIZER = FIXTURES / "tokenizers" / "qwen3"
TINY_MODEL = FIXTURES / "models" / "tiny-kimi"


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
