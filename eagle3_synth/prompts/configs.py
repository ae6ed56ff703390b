"""The registry of dataset configs: B1-B8, plus the user's own from a YAML file (`--config-file`).

Each config names its source dataset (Hub id and how to load it), the adapter that turns one of
its records into a conversation (`eagle3_synth.sources`), its cap, `max_new_tokens` and chat
template kwargs. Names `B1_glaive`, `B4_mixturethoughts` and `B5_openthoughts` are fixed by the
published dataset. The builder's BuilderConfigs and the dataset card's configs table (with each
source's license) are derived from here; nothing else keeps a list of configs.

A config file maps names to fields (only `adapter` is required):

    MY_support_chats:
      source: my-org/support-chats      # Hub id or local dataset folder (read with --from-source)
      split: train
      adapter: sharegpt                 # glaive, hermes, messages, openthoughts, sharegpt, opencodereasoning
      cap: 2000
      pattern: customer-support chat
      license: cc-by-4.0
      max_new_tokens: 4096
      template_kwargs: {thinking: true}
      turns: all                        # last (default): the final answer; all: every assistant turn
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any

from eagle3_synth.contract.profiles import load_yaml_mapping
from eagle3_synth.errors import ConfigError
from eagle3_synth.prompts.adapters import get_adapter
from eagle3_synth.prompts.held_out import check_validation

DEFAULT_MAX_NEW_TOKENS = 10_240
# `turns`: "last" generates a conversation's final answer only; "all" every assistant turn.
TURN_MODES = ("last", "all")
DEFAULT_CAP = 12_000
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


@dataclass(frozen=True)
class ConfigSpec:
    name: str
    # Hub dataset id (or a local dataset folder) and the arguments `load_dataset` needs for it;
    # "" for a config that is only ever built from --source-file or --prompts.
    source: str
    split: str
    # The token pattern this config exists to teach the drafter.
    pattern: str
    # Adapter turning one source record into a Conversation (see eagle3_synth.sources).
    adapter: str
    # Prompts kept per config from a source when no --limit is given.
    cap: int
    # The source's license, for the README and the dataset card.
    license: str
    # Dataset configs read one after the other (none: the dataset's default config).
    source_configs: tuple[str, ...] = ()
    data_files: tuple[str, ...] = ()
    # Columns to read (Parquet sources): skips large columns the adapter never looks at.
    columns: tuple[str, ...] = ()
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    # Extra chat-template kwargs for this config (merged under the user's --template-kwarg).
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    # Which assistant turns the target writes (`prompts/turns.py`): "last" (the final answer, after
    # the source's own earlier turns) or "all" (every turn, each on the target's own history).
    turns: str = "last"
    # Whole conversations held out as the `validation` split (`prompts/held_out.py`): a count N,
    # a fraction, or None (train only); `--validation` overrides it.
    validation: float | int | None = None

    def __post_init__(self) -> None:
        where = f"config {self.name!r}"
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise ConfigError(f"{where}: a name is letters, digits, '_', '.', '-' (it names a folder)")
        for name in ("source", "split", "pattern", "adapter", "license"):
            if not isinstance(getattr(self, name), str):
                raise ConfigError(f"{where}: {name} must be a string")
        for name in ("source_configs", "data_files", "columns"):
            value = getattr(self, name)
            if isinstance(value, str):
                value = (value,)
            if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"{where}: {name} must be a list of strings")
            object.__setattr__(self, name, tuple(value))
        for name in ("cap", "max_new_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{where}: {name} must be an integer >= 1, got {value!r}")
        if not isinstance(self.template_kwargs, dict):
            raise ConfigError(f"{where}: template_kwargs must be a mapping")
        if self.turns not in TURN_MODES:
            raise ConfigError(f"{where}: turns must be one of {', '.join(TURN_MODES)}, got {self.turns!r}")
        object.__setattr__(self, "validation", check_validation(self.validation, f"{where}: validation"))
        try:
            get_adapter(self.adapter)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None


HERMES_CONFIGS = ("func_calling_singleturn", "func_calling", "glaive_func_calling",
                  "json_mode_agentic", "json_mode_singleturn")

BUILTIN_CONFIGS: dict[str, ConfigSpec] = {
    spec.name: spec
    for spec in (
        ConfigSpec("B1_glaive", "glaiveai/glaive-function-calling-v2", "train",
                   "short single-tool function calling", "glaive", 12_000, "apache-2.0"),
        ConfigSpec("B2_hermes_fc", "NousResearch/hermes-function-calling-v1", "train",
                   "multi-step and parallel tool calls, JSON mode", "hermes", 8_000, "apache-2.0",
                   source_configs=HERMES_CONFIGS, turns="all"),
        ConfigSpec("B3_ultrachat", "HuggingFaceH4/ultrachat_200k", "train_sft",
                   "general multi-turn chat", "messages", 12_000, "mit", turns="all"),
        ConfigSpec("B4_mixturethoughts", "open-r1/Mixture-of-Thoughts", "train",
                   "math / code / science reasoning", "messages", 12_000, "unspecified (mixed upstream sources)",
                   source_configs=("all",)),
        ConfigSpec("B5_openthoughts", "open-thoughts/OpenThoughts-114k", "train",
                   "long reasoning chains", "openthoughts", 12_000, "apache-2.0"),
        ConfigSpec("B6_sharegpt", "Aeala/ShareGPT_Vicuna_unfiltered", "train",
                   "real user conversations", "sharegpt", 12_000, "apache-2.0",
                   data_files=("ShareGPT_V4.3_unfiltered_cleaned_split.json",), turns="all"),
        ConfigSpec("B7_magpie", "Magpie-Align/Magpie-Qwen2.5-Pro-1M-v0.1", "train",
                   "diverse single-turn instructions", "sharegpt", 10_000,
                   "unspecified (Qwen2.5-72B-Instruct outputs)", columns=("uuid", "conversations")),
        ConfigSpec("B8_opencodereasoning", "nvidia/OpenCodeReasoning", "split_0",
                   "competitive programming", "opencodereasoning", 10_000, "cc-by-4.0",
                   source_configs=("split_0",), columns=("id", "input")),
    )
}

# The live registry: the built-in configs plus any loaded from a config file in this process.
CONFIGS: dict[str, ConfigSpec] = dict(BUILTIN_CONFIGS)


def get_config(name: str) -> ConfigSpec:
    try:
        return CONFIGS[name]
    except KeyError:
        raise ConfigError(f"unknown config {name!r}; known configs: {', '.join(CONFIGS)} "
                          "(define your own with --config-file)") from None


def register_config(spec: ConfigSpec) -> None:
    """Add (or redefine) a user config; the built-in names cannot be redefined."""
    if spec.name in BUILTIN_CONFIGS:
        raise ConfigError(f"config {spec.name!r} is built in; give your config another name")
    CONFIGS[spec.name] = spec


_FIELDS = {f.name for f in fields(ConfigSpec)} - {"name"}
_DEFAULTS: dict[str, Any] = {"source": "", "split": "train", "pattern": "", "license": "unspecified",
                             "cap": DEFAULT_CAP}


def load_config_file(path: str | Path) -> list[str]:
    """Register every config of a YAML file (see the module doc); return their names."""
    data = load_yaml_mapping(path, "--config-file", "config names to their fields")
    specs = []
    for name, values in data.items():
        where = f"--config-file {path}: config {name!r}"
        if not isinstance(values, dict):
            raise ConfigError(f"{where}: expected a mapping of fields")
        unknown = sorted(set(values) - _FIELDS)
        if unknown:
            raise ConfigError(f"{where}: unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(_FIELDS))}")
        if "adapter" not in values:
            raise ConfigError(f"{where}: 'adapter' is required")
        if name in BUILTIN_CONFIGS:
            raise ConfigError(f"{where}: the name is built in; give your config another name")
        try:
            specs.append(ConfigSpec(name=str(name), **{**_DEFAULTS, **values}))
        except ConfigError as exc:
            raise ConfigError(f"--config-file {path}: {exc}") from None
    for spec in specs:
        register_config(spec)
    return [spec.name for spec in specs]


def sample_prompts_path(name: str) -> str:
    """The bundled sample prompts of a config (a handful, for the demo and quick checks)."""
    path = resources.files("eagle3_synth.prompts") / "samples" / f"{name}.jsonl"
    if not path.is_file():
        raise ConfigError(f"config {name!r} has no bundled sample prompts; pass --source-file FILE, "
                          "--from-source or --prompts FILE")
    return str(path)
