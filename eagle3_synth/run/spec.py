"""The run spec: every setting that determines a run's output, as typed dataclasses.

`RunSpec` holds what decides the ids a run produces: the prompt plan, the model and tokenizer, the
chat template's kwargs and date, the marker profile, the model's context, the engine args that change
what the model computes, sampling. Its fingerprint
is derived from it field by field (`spec_identity`): each field enters as its value, or through the
`identity` function in its metadata (a folder -> the digests of its files). A new field therefore
reaches the fingerprint without a line to remember; `tests/run/test_spec.py` fails for one that
does not. How one process runs it (run directory, engine and its connection settings, shard,
budget, strictness: the run configuration's fields that are not fingerprinted, `run/settings.py`)
changes nothing that is sampled from (the engine, device, batch size and parallelism change at most
float rounding, see `OUTPUT_ENGINE_ARGS`), so a run can be resumed on other hardware.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eagle3_synth.files import file_digest
from eagle3_synth.engines.base import check_sampling
from eagle3_synth.prompts.configs import DEFAULT_MAX_NEW_TOKENS
from eagle3_synth.prompts.hygiene import HYGIENE_VERSION
from eagle3_synth.prompts.prepare import max_prompt_tokens
from eagle3_synth.prompts.selection import PromptPlan
from eagle3_synth.prompts.turns import ConversationPlan

# The run fingerprint: a digest of everything that determines a run's output, and its differences.
#
# A run directory is keyed by it; a command whose settings give another fingerprint is refused,
# naming each differing field by its dotted path (`sampling.temperature: run has 0.6, ...`).


def fingerprint(fields: dict[str, Any]) -> str:
    canonical = json.dumps(fields, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def _differences(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[str]:
    """Each differing field by its dotted path (`sampling.temperature`), nested dicts opened."""
    lines = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            lines += _differences(a, b, f"{prefix}{key}.")
        elif key not in old:  # a field left out when unset (`omit_none`)
            lines.append(f"{prefix}{key}: not set for the run, this command has {b!r}")
        elif key not in new:
            lines.append(f"{prefix}{key}: run has {a!r}, not set for this command")
        elif a != b:
            lines.append(f"{prefix}{key}: run has {a!r}, this command has {b!r}")
    return lines


_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "chat_template.json",
                    "special_tokens_map.json", "tokenizer.model", "tiktoken.model")


def tokenizer_identity(path: str) -> dict[str, str]:
    """Digests of the files that define tokenization, so a changed template changes the run."""
    folder = Path(path)
    if not folder.is_dir():
        return {"name": path}
    return {name: file_digest(folder / name) for name in _TOKENIZER_FILES if (folder / name).is_file()}


def model_identity(path: str | None) -> dict[str, Any]:
    """A model folder by name, config.json digest and weight file sizes (hashing weights would take minutes)."""
    if path is None:
        return {}
    folder = Path(path)
    if not folder.is_dir():
        return {"name": path}
    identity: dict[str, Any] = {"name": folder.name}
    if (folder / "config.json").is_file():
        identity["config.json"] = file_digest(folder / "config.json")
    identity["weights"] = sorted(
        (p.name, p.stat().st_size) for p in folder.iterdir() if p.suffix in (".safetensors", ".bin")
    )
    return identity


def optional_file_identity(path: str | None) -> str | None:
    return file_digest(Path(path)) if path is not None else None


# `--engine-arg`s (SGLang `ServerArgs` names) that change what the model computes -- its weights'
# quantization, the KV cache's, the weights loaded -- so a run mixing them would mix two models'
# outputs. The others (tp_size, dp_size, mem_fraction_static, attention backends, scheduling,
# speculative decoding, which keeps the target's distribution) change at most float rounding and
# which sample is drawn, like the engine, the device and the batch size: never fingerprinted, so a
# run can be resumed on other hardware.
OUTPUT_ENGINE_ARGS = ("quantization", "quantization_param_path", "kv_cache_dtype", "load_format",
                      "revision", "json_model_override_args")


def output_engine_args(engine_args: Mapping[str, Any]) -> dict[str, Any]:
    """The engine args that enter the fingerprint (`OUTPUT_ENGINE_ARGS`), sorted by name."""
    return {name: engine_args[name] for name in sorted(engine_args) if name in OUTPUT_ENGINE_ARGS}


def identity(function: Callable[[Any], Any]) -> dict[str, Any]:
    """Field metadata: the field enters the fingerprint as `function(value)`."""
    return {"identity": function}


@dataclass(frozen=True)
class SamplingSpec:
    """Sampling parameters, always passed to the engine explicitly (SGLang's own defaults bite)."""

    # Cap on output tokens (SGLang's default is 128).
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    # 0 = greedy (SGLang's default is 1.0).
    temperature: float = 0.6
    # Nucleus cut; 1.0 = off.
    top_p: float = 1.0
    # Top-k cut; -1 = off.
    top_k: int = -1
    # Sampling seed, per sample where the engine allows; None = unseeded (not reproducible).
    seed: int | None = 0
    # Min-p cut (tokens below min_p x the top token's probability are dropped); 0.0 = off.
    min_p: float = 0.0

    def __post_init__(self) -> None:
        check_sampling(self.max_new_tokens, self.temperature, self.top_p, self.top_k, self.min_p)

    def rollout(self) -> dict[str, Any]:
        """The run's sampling as a rollout carries it (`PreparedPrompt.sampling`) before its draw."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ModelSpec:
    """The model, its tokenizer and chat template, and how prompts are templated for it."""

    # Folder of the tokenizer and chat template; enters as the digests of its files.
    tokenizer: str = field(metadata=identity(tokenizer_identity))
    # Model folder the engine loads; None when no model runs (the replay engine).
    model: str | None = field(default=None, metadata=identity(model_identity))
    # Recorded results the replay engine plays back (they are the outputs); enters as its digest.
    replay_file: str | None = field(default=None, metadata=identity(optional_file_identity))
    # Whether the tokenizer's own code may run (Kimi); it can change how text is tokenized.
    trust_remote_code: bool = False
    # Marker profile: `auto` or a name; the profile chosen is fingerprinted by its definition too.
    profile: str = "auto"
    # YAML of the user's own profiles; enters as its digest.
    profile_file: str | None = field(default=None, metadata=identity(optional_file_identity))
    # Chat-template kwargs given for this run (over the config's own `template_kwargs`).
    template_kwargs: Mapping[str, Any] = field(default_factory=dict)
    # Date a date-writing template (gpt-oss) renders; None = the run directory's recorded one, else today.
    template_date: str | None = None
    # The model's context in tokens: prompts longer than it minus max_new_tokens are skipped.
    context_length: int | None = None
    # The `--engine-arg`s that change what the model computes (`OUTPUT_ENGINE_ARGS`: dtype,
    # quantization, kv_cache_dtype ...); the others are plumbing.
    engine_args: Mapping[str, Any] = field(default_factory=dict, metadata=identity(output_engine_args))
    # The dtype the model runs in where it is not the checkpoint's own (`--dtype bfloat16` on a
    # float32 checkpoint); None: the checkpoint's (engines/__init__.py). A cast changes the ids, so it
    # is fingerprinted; the checkpoint's own enters no field (`--dtype` naming it is the same run).
    dtype: str | None = field(default=None, metadata={"omit_none": True})


@dataclass(frozen=True)
class RunSpec:
    """What determines a run's output: the fingerprint is derived from these fields."""

    # Which prompts, in which order; enters through `PromptPlan.identity` (file digests, cap, seed...).
    prompts: PromptPlan = field(metadata=identity(PromptPlan.identity))
    model: ModelSpec
    sampling: SamplingSpec = SamplingSpec()
    # Which turns the target writes, rollouts per conversation, template-kwarg mixture.
    conversations: ConversationPlan = ConversationPlan()
    # Whole conversations held out as the `validation` split (`prompts/held_out.py`): a count N, a
    # fraction, or None (train only). It decides no id, only the split a row is in; None enters no
    # field, so a run without it has the fingerprint of a run whose settings never named it.
    validation: float | int | None = field(default=None, metadata={"omit_none": True})

    @property
    def config(self):  # noqa: ANN201 - ConfigSpec
        return self.prompts.config

    @property
    def template_kwargs(self) -> dict[str, Any]:
        """The kwargs the template is rendered with: the config's, overridden by the run's."""
        return {**self.prompts.config.template_kwargs, **self.model.template_kwargs}

    @property
    def max_prompt_tokens(self) -> int | None:
        return max_prompt_tokens(self.model.context_length, self.sampling.max_new_tokens)


def spec_identity(value: Any) -> Any:
    """A dataclass as a JSON-able dict of its fields' identities (recursively); other values as they are."""
    if not dataclasses.is_dataclass(value):
        return dict(value) if isinstance(value, Mapping) else value
    out = {}
    for spec_field in dataclasses.fields(value):
        item = getattr(value, spec_field.name)
        if item is None and spec_field.metadata.get("omit_none"):
            continue
        function = spec_field.metadata.get("identity")
        out[spec_field.name] = function(item) if function is not None else spec_identity(item)
    return out


def spec_fields(spec: RunSpec) -> dict[str, Any]:
    """The fingerprint's fields that follow from the spec alone: its identity field by field, and
    what is computed from it (the effective template kwargs, the longest prompt kept, the hygiene
    rules' version). `generate` adds what it resolves from the tokenizer (profile, message form)."""
    return {
        "config": spec.config.name,
        **spec_identity(spec),
        "template_kwargs": spec.template_kwargs,
        "max_prompt_tokens": spec.max_prompt_tokens,
        "hygiene": HYGIENE_VERSION,
    }
