"""Shared fixtures: the project's own tokenizers and tiny model (made by tests/fixtures/make_*.py and train_tiny_model.py, no downloads)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

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
