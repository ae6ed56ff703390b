"""Engine registry: name -> adapter factory, imported lazily so optional engines cost nothing."""

from __future__ import annotations

from importlib import import_module

from eagle3_synth.errors import ConfigError
from eagle3_synth.engines.base import Engine, EngineOptions, GenerationRequest, GenerationResult, SamplingParams, abort_result

# name -> "module:factory"; the factory takes EngineOptions and returns an Engine.
ENGINES: dict[str, str] = {
    "transformers": "eagle3_synth.engines.transformers_engine:create",
    "replay": "eagle3_synth.engines.replay:create",
    "sglang": "eagle3_synth.engines.sglang.engine:create",
    "sglang-http": "eagle3_synth.engines.sglang.http:create",
}


def create_engine(name: str, options: EngineOptions) -> Engine:
    try:
        target = ENGINES[name]
    except KeyError:
        raise ConfigError(f"unknown engine {name!r}; choose one of {sorted(ENGINES)}") from None
    module_name, factory_name = target.split(":")
    factory = getattr(import_module(module_name), factory_name)
    return factory(options)


__all__ = [
    "ENGINES",
    "Engine",
    "EngineOptions",
    "GenerationRequest",
    "GenerationResult",
    "SamplingParams",
    "abort_result",
    "create_engine",
]
