"""The registry of dataset configs B1-B8: one place for each config's source and defaults.

Names `B1_glaive`, `B4_mixturethoughts` and `B5_openthoughts` are fixed by the published dataset.
Source adapters (how a record of the source becomes a conversation) are registered separately, by
`adapter` name, in `eagle3_synth.sources`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from .errors import ConfigError

DEFAULT_MAX_NEW_TOKENS = 10_240


@dataclass(frozen=True)
class ConfigSpec:
    name: str
    # Hub dataset id and the arguments `load_dataset` needs for it.
    source: str
    split: str
    # The token pattern this config exists to teach the drafter.
    pattern: str
    # Adapter turning one source record into a Conversation (see eagle3_synth.sources).
    adapter: str
    # Prompts per config when no --limit is given.
    default_limit: int
    license: str
    source_config: str | None = None
    data_files: tuple[str, ...] = ()
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    # Extra chat-template kwargs for this config (merged under the user's --template-kwarg).
    template_kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.default_limit < 1 or self.max_new_tokens < 1:
            raise ConfigError(f"config {self.name!r}: default_limit and max_new_tokens must be >= 1")


CONFIGS: dict[str, ConfigSpec] = {
    spec.name: spec
    for spec in (
        ConfigSpec("B1_glaive", "glaiveai/glaive-function-calling-v2", "train",
                   "short single-tool function calling", "glaive", 12_000, "apache-2.0"),
        ConfigSpec("B2_hermes_fc", "NousResearch/hermes-function-calling-v1", "train",
                   "multi-step and parallel tool calls, JSON mode", "hermes", 8_000, "apache-2.0",
                   source_config="func_calling"),
        ConfigSpec("B3_ultrachat", "HuggingFaceH4/ultrachat_200k", "train_sft",
                   "general multi-turn chat", "messages", 12_000, "mit"),
        ConfigSpec("B4_mixturethoughts", "open-r1/Mixture-of-Thoughts", "train",
                   "math / code / science reasoning", "messages", 12_000, "unspecified (mixed upstream sources)",
                   source_config="all"),
        ConfigSpec("B5_openthoughts", "open-thoughts/OpenThoughts-114k", "train",
                   "long reasoning chains", "openthoughts", 12_000, "apache-2.0"),
        ConfigSpec("B6_sharegpt", "Aeala/ShareGPT_Vicuna_unfiltered", "train",
                   "real user conversations", "sharegpt", 12_000, "apache-2.0",
                   data_files=("ShareGPT_V4.3_unfiltered_cleaned_split.json",)),
        ConfigSpec("B7_magpie", "Magpie-Align/Magpie-Qwen2.5-Pro-1M-v0.1", "train",
                   "diverse single-turn instructions", "sharegpt", 10_000, "unspecified (Qwen2.5-72B-Instruct outputs)"),
        ConfigSpec("B8_opencodereasoning", "nvidia/OpenCodeReasoning", "split_0",
                   "competitive programming", "opencodereasoning", 10_000, "cc-by-4.0",
                   source_config="split_0"),
    )
}


def get_config(name: str) -> ConfigSpec:
    try:
        return CONFIGS[name]
    except KeyError:
        raise ConfigError(f"unknown config {name!r}; known configs: {', '.join(CONFIGS)}") from None


def sample_prompts_path(name: str) -> str:
    """The bundled sample prompts of a config (a handful, for the demo and quick checks)."""
    path = resources.files("eagle3_synth") / "samples" / f"{name}.jsonl"
    if not path.is_file():
        raise ConfigError(f"config {name!r} has no bundled sample prompts; pass --prompts FILE")
    return str(path)
