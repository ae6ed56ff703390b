"""The dtype a model engine computes in: the checkpoint's own, or `--dtype`; never an engine's `auto`.

Why explicit: SGLang's `dtype="auto"` turns a float32 checkpoint into float16 (sglang 0.5.23
srt/configs/model_config.py `_get_and_verify_dtype`, "Following the common practice, we use float16
for float32 models"), so the same model folder would give other ids through SGLang than through
transformers, which loads a checkpoint in its own dtype. Every engine that runs a model is given the
one dtype resolved here (`resolve_dtype`), and the run records it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from eagle3_synth.errors import ConfigError

DTYPES = ("bfloat16", "float16", "float32")
# How config.json may spell them (transformers writes "bfloat16"; older files "torch.bfloat16").
_SPELLINGS = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16", "half": "float16",
              "float32": "float32", "fp32": "float32", "float": "float32"}


def checkpoint_dtype(model: str | Path) -> str | None:
    """The dtype a model folder's config.json declares, read as SGLang reads it: its language
    model's config first (`text_config`, `language_config`: SGLang's `hf_text_config`), `dtype`
    or else `torch_dtype`, and float32 where none is given (the same `_get_and_verify_dtype`). None for a
    folder without config.json: no engine can load it, and the engine's own error says so."""
    path = Path(model) / "config.json"
    if not path.is_file():
        return None
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # the same words as the pre-load check (run/preflight.py)
        raise ConfigError(f"--model {model}: config.json is not valid JSON ({exc})") from None
    if not isinstance(config, dict):
        raise ConfigError(f"--model {model}: config.json is not a JSON object")
    sections = [config.get(key) for key in ("text_config", "language_config")] + [config]
    for section in sections:
        if not isinstance(section, dict):
            continue
        value = section.get("dtype") or section.get("torch_dtype")
        if value is None:
            continue
        name = _SPELLINGS.get(str(value).removeprefix("torch."))
        if name is None:
            raise ConfigError(f"{path}: dtype {value!r} is none of {', '.join(DTYPES)}; give --dtype")
        return name
    return "float32"


def check_dtype(dtype: str, option: str = "--dtype") -> str:
    if dtype not in DTYPES:
        hint = (" (SGLang's auto would turn a float32 checkpoint into float16; name the dtype)"
                if dtype == "auto" else "")
        raise ConfigError(f"{option} must be one of {', '.join(DTYPES)}, got {dtype!r}{hint}")
    return dtype


def resolve_dtype(model: str | None, dtype: str | None, engine_args: dict[str, Any]) -> str | None:
    """The dtype the engine runs `model` in: `--dtype`, else the checkpoint's own; None without a
    model (the replay engine). `--engine-arg dtype` is refused: `--dtype` is its one home, and it
    reaches every engine (transformers too), the fingerprint and the run's record."""
    if "dtype" in engine_args:
        raise ConfigError(f"--engine-arg dtype={engine_args['dtype']}: give --dtype instead (it sets the dtype of "
                          "every engine and is recorded with the run)")
    if model is None:
        return None
    return check_dtype(dtype) if dtype is not None else checkpoint_dtype(model)
