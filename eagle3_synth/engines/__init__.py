"""Engine registry: name -> adapter factory, imported lazily so optional engines cost nothing; and
which engine uses which option (`ENGINE_OPTIONS`), so an option no engine in use reads is an error."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, Field, fields
from importlib import import_module
from pathlib import Path
from typing import Any

from eagle3_synth.errors import ConfigError
from eagle3_synth.engines.base import (Engine, EngineOptions, GenerationRequest, GenerationResult, SamplingParams,
                                       abort_result)

# The dtype a model engine computes in: the checkpoint's own, or `--dtype`; never an engine's `auto`.
#
# Why explicit: SGLang's `dtype="auto"` turns a float32 checkpoint into float16 (sglang 0.5.23
# srt/configs/model_config.py `_get_and_verify_dtype`, "Following the common practice, we use float16
# for float32 models"), so the same model folder would give other ids through SGLang than through
# transformers, which loads a checkpoint in its own dtype. Every engine that runs a model is given the
# one dtype resolved here (`resolve_dtype`), and the run records it.

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


# name -> "module:factory"; the factory takes EngineOptions and returns an Engine.
ENGINES: dict[str, str] = {
    "transformers": "eagle3_synth.engines.transformers_engine:create",
    "replay": "eagle3_synth.engines.replay:create",
    "sglang": "eagle3_synth.engines.sglang.engine:create",
    "sglang-http": "eagle3_synth.engines.sglang.http:create",
}

# name -> "module:function" taking EngineOptions: what an engine can check of its options before
# anything loads (`run/preflight.py`, `hidden-states`, `evaluate`), beyond what its factory checks.
ENGINE_CHECKS: dict[str, str] = {
    "sglang": "eagle3_synth.engines.sglang.engine:check_options",
}

# The engines that load `--model` in this process, so the folder must hold a model (config.json
# with a model_type, weights): replay plays recorded ids (its --model is the tokenizer's folder),
# and an sglang-http server loaded its own (here the folder gives the tokenizer, context, dtype).
LOADS_MODEL = ("transformers", "sglang")

# Each engine-specific option of the commands that run an engine (`build`, `generate`, `launch`
# and the builder's kwargs; `hidden-states`; `evaluate`), by its command-line name -> the engines
# that use it. Given to any other engine (a value other than its default) it is refused, not
# ignored: a forgotten `--engine sglang-http` would otherwise be a run on this machine's CPU.
ENGINE_OPTIONS: dict[str, tuple[str, ...]] = {
    "--replay": ("replay",),  # the recorded results it plays
    "--batch-size": ("transformers",),  # prompts per generate() call; SGLang batches by itself
    "--device": ("transformers",),  # a torch device; SGLang places the model itself
    # No model runs under replay. sglang-http: recorded with the run (its server must run it).
    "--dtype": ("transformers", "sglang", "sglang-http"),
    "--engine-arg": ("sglang",),  # SGLang's ServerArgs for the engine this process starts
    "--url": ("sglang-http",),
    "--max-in-flight": ("sglang", "sglang-http"),
    "--priority": ("sglang", "sglang-http"),  # SGLang's priority scheduling
    "--request-timeout": ("sglang-http",),  # an HTTP request's idle timeout
    "--max-retries": ("sglang", "sglang-http"),
    # hidden-states
    "--device-map": ("transformers",),
    "--batch-tokens": ("transformers",),
    "--states-via": ("sglang", "sglang-http"),
    "--states-dir": ("sglang", "sglang-http"),
    # evaluate
    "--baseline-url": ("sglang-http",),
}

# What to do instead, where an option's meaning has a home in the engine chosen.
_INSTEAD: dict[tuple[str, str], str] = {
    ("--engine-arg", "sglang-http"): "an SGLang server takes its arguments as its own launch flags "
                                     "(python -m sglang.launch_server --tp-size 8 ...)",
    ("--device", "sglang"): "SGLang places the model itself (--engine-arg tp_size=8, or device=cpu)",
    ("--device", "sglang-http"): "the server places the model (its --tp-size, --device)",
    ("--dtype", "replay"): "no model runs: the replay file holds the outputs",
}


def create_engine(name: str, options: EngineOptions) -> Engine:
    try:
        target = ENGINES[name]
    except KeyError:
        raise ConfigError(f"unknown engine {name!r}; choose one of {sorted(ENGINES)}") from None
    module_name, factory_name = target.split(":")
    factory = getattr(import_module(module_name), factory_name)
    return factory(options)


def check_engine(name: str, options: EngineOptions) -> None:
    """The engine's own checks of its options before anything loads (`ENGINE_CHECKS`); none for most."""
    target = ENGINE_CHECKS.get(name)
    if target is not None:
        module_name, function_name = target.split(":")
        getattr(import_module(module_name), function_name)(options)


def option_name(setting: Field) -> str:
    """A settings field's command-line name: its metadata's `option` `name` (`--url` for `urls`), else
    the field's name with dashes (`--batch-size` for `batch_size`)."""
    return setting.metadata.get("option", {}).get("name", f"--{setting.name.replace('_', '-')}")


def options_given(settings: object, among: Iterable[str] = ENGINE_OPTIONS) -> list[str]:
    """The options `among` (command-line names) that a dataclass of settings (a field per option, named
    by `option_name`) holds at a value other than the field's default, in the order of `among`."""
    given = {option_name(f) for f in fields(settings)
             if (f.default is not MISSING or f.default_factory is not MISSING)
             and getattr(settings, f.name) != (f.default if f.default is not MISSING else f.default_factory())}
    return [option for option in among if option in given]


def check_options_used(engine: str, given: Iterable[str], uses: Mapping[str, tuple[str, ...]] = ENGINE_OPTIONS) -> None:
    """Refuse the first option of `given` (command-line names, each given a value other than its
    default) that `engine` does not use, naming the engines that do (`ENGINE_OPTIONS`)."""
    for option in given:
        users = uses[option]
        if engine in users:
            continue
        names = users[0] if len(users) == 1 else f"{', '.join(users[:-1])} and {users[-1]}"
        instead = _INSTEAD.get((option, engine))
        advice = f"; {instead}" if instead else ""
        if not instead and len(users) == 1:
            advice = f": give --engine {users[0]}, or drop {option}"
        raise ConfigError(f"{option} is not used by --engine {engine}, only by --engine {names}{advice}")


__all__ = [
    "ENGINES",
    "ENGINE_OPTIONS",
    "LOADS_MODEL",
    "Engine",
    "EngineOptions",
    "GenerationRequest",
    "GenerationResult",
    "SamplingParams",
    "abort_result",
    "check_engine",
    "check_options_used",
    "create_engine",
    "option_name",
    "options_given",
]
