"""Flat generation settings: the one place that turns options into a run spec and its plumbing.

`GenerationSettings` has one field per generating option, named like the option (`--max-new-tokens`
is `max_new_tokens`, a repeatable `--source-file` is `source_files`, `--url` is `urls`,
`--template-kwarg`/`--engine-arg` are mappings). The command line (`cli/options.py`) fills it from
its arguments; the datasets builder's config inherits it, so the same fields are its config kwargs.
Defaults are read from the spec dataclasses, so each default is written once.

`__post_init__` checks what needs nothing but the values; `run_spec(config)` and `run_options()`
check what needs the config registry or the filesystem, then build the typed `RunSpec` (what
determines the output) and `RunOptions` (how this process runs it). Messages name the command-line
options, which are the builder's kwargs with dashes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from eagle3_synth.engines import ENGINES, EngineOptions, check_options_used, options_given
from eagle3_synth.engines.base import check_sampling
from eagle3_synth.engines.dtypes import checkpoint_dtype, resolve_dtype
from eagle3_synth.contract.ranges import check_range
from eagle3_synth.errors import ConfigError
from eagle3_synth.prompts.configs import get_config, load_config_file, sample_prompts_path
from eagle3_synth.prompts.prepare import model_context_length
from eagle3_synth.prompts.readers import readable_file
from eagle3_synth.prompts.selection import PromptPlan, PromptSelection
from eagle3_synth.prompts.templating import check_template_date, check_tokenizer_folder
from eagle3_synth.prompts.turns import ConversationPlan, check_kwarg_mix, check_sampling_mix
from eagle3_synth.prompts.held_out import check_validation
from eagle3_synth.run.shards import Shard, resolve_auto
from eagle3_synth.run.spec import ModelSpec, RunOptions, RunSpec, SamplingSpec, output_engine_args

log = logging.getLogger(__name__)


def _strings(value: Any, name: str) -> tuple[str, ...]:
    """A repeatable option's values as a tuple (one string is one value)."""
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{name} must be a list of strings, got {value!r}")
    return tuple(value)


PRIORITIES = ("none", "turns-left")

@dataclass
class GenerationSettings:
    """Every setting of a generating command, flat; see the module doc for names and checks."""

    # -- model --
    # Local model folder (for the replay engine: a folder holding the tokenizer).
    model: str | None = None
    # Tokenizer folder, if not the model's.
    tokenizer: str | None = None
    # Marker profile: auto, a built-in name, or one defined in `profile_file`.
    profile: str = ModelSpec.profile
    # YAML of the user's own model families (the schema of contract/profiles.yaml).
    profile_file: str | None = None
    # Date a date-writing template (gpt-oss) renders; None = the run's recorded date, else today.
    template_date: str | None = ModelSpec.template_date
    # Chat-template kwargs, e.g. {"thinking": True} (over the config's own).
    template_kwargs: Mapping[str, Any] = field(default_factory=dict)
    # Take template kwargs the chat template does not visibly read (it reads them indirectly).
    template_kwarg_unchecked: bool = RunOptions.template_kwarg_unchecked
    # Whether the tokenizer's/model's own code may run (Kimi needs it); never a default.
    trust_remote_code: bool = ModelSpec.trust_remote_code
    # -- prompts (default: the config's bundled sample prompts) --
    # YAML defining configs of the user's own; the config name may then name one.
    config_file: str | None = None
    # Prepared prompts JSONL ({messages, tools?, id?} per line).
    prompts: str | None = None
    # Records in the source's own schema, converted by the config's adapter, read in this order.
    source_files: tuple[str, ...] = PromptSelection.source_files
    # Read the config's source dataset with datasets streaming (needs network).
    from_source: bool = PromptSelection.from_source
    # Dataset tag, branch or commit for `from_source`.
    source_revision: str | None = PromptSelection.revision
    # Keep at most this many prompts (default: a whole prompts file; the config's cap for a source).
    limit: int | None = PromptPlan.limit
    # Seed of the order source records are taken in (not the sampling seed).
    selection_seed: int = PromptSelection.seed
    # Read only the first N source records (quick trials).
    scan_limit: int | None = PromptSelection.scan_limit
    # Model context in tokens (default: max_position_embeddings of the model's config.json).
    max_context: int | None = ModelSpec.context_length
    # Stop at the first rejected prompt instead of skipping it.
    strict: bool = RunOptions.strict
    # -- conversations (prompts/turns.py) --
    # "last" or "all" assistant turns written by the target; None = the config's own `turns`.
    turns: str | None = None
    # Rollouts per source conversation (each its own sampling seeds).
    samples_per_prompt: int = ConversationPlan.samples_per_prompt
    # Template kwargs drawn per rollout: "thinking=true:0.7,thinking=false:0.3", or ((kwargs, weight), ...).
    template_kwarg_mix: str | tuple = ConversationPlan.template_kwarg_mix
    # Sampling values drawn per rollout: "temperature=0.0:0.2,temperature=0.6+top_p=0.95:0.8", or ((values, weight), ...).
    sampling_mix: str | tuple = ConversationPlan.sampling_mix
    # Whole conversations held out as the `validation` split: a count N, a fraction (0 < F < 1) or
    # its text ("200", "0.05"); None = the config's own (none for the built-in configs).
    validation: str | float | int | None = None
    # -- sampling --
    # Cap on output tokens; None = the config's own (SGLang's default, 128, is never used).
    max_new_tokens: int | None = None
    temperature: float = SamplingSpec.temperature
    top_p: float = SamplingSpec.top_p
    top_k: int = SamplingSpec.top_k
    min_p: float = SamplingSpec.min_p
    # Sampling seed, per sample where the engine allows; None = unseeded.
    seed: int | None = SamplingSpec.seed
    # -- engine (plumbing, except the engine args that change what the model computes) --
    engine: str = RunOptions.engine
    # Recorded results for the replay engine.
    replay: str | None = None
    # transformers engine: prompts per generate call, and the torch device (default cpu).
    batch_size: int = EngineOptions.batch_size
    device: str | None = EngineOptions.device
    # The dtype the model runs in (bfloat16, float16, float32); None = the checkpoint's own
    # (engines/dtypes.py: never an engine's `auto`). A cast is fingerprinted.
    dtype: str | None = None
    # Engine-specific arguments, e.g. {"tp_size": 8} for sglang; those that change what the model
    # computes (run/spec.py OUTPUT_ENGINE_ARGS: quantization, kv_cache_dtype ...) are fingerprinted.
    engine_args: Mapping[str, Any] = field(default_factory=dict)
    # sglang-http: server or router URLs.
    urls: tuple[str, ...] = EngineOptions.urls
    # sglang engines: requests in flight (None = the engine's default), per-request limit, retries.
    max_in_flight: int | None = EngineOptions.max_in_flight
    request_timeout: float = EngineOptions.request_timeout_s
    max_retries: int = EngineOptions.max_retries
    # sglang engines: "turns-left" sends each request the turns its conversation may still have as
    # its priority (SGLang's priority scheduling: long conversations' turns first); "none".
    priority: str = "none"
    # -- run --
    # Where results are journaled: a local path or any fsspec URL; None = the caller's default.
    run_dir: str | None = None
    # This process's share: the samples with sample_id % num_shards == shard_index; both "auto":
    # read from a Slurm array's or torchrun's environment (`shards.shard_from_environment`).
    num_shards: int | str = Shard.count
    shard_index: int | str = Shard.index
    # Stop handing out prompts after this many hours, leaving a resumable run.
    max_hours: float | None = RunOptions.max_hours
    # Generate again the samples that failed before.
    retry_errors: bool = RunOptions.retry_errors
    # Processes that template prompts: 1, N, or None (automatic).
    workers: int | None = RunOptions.workers

    def __post_init__(self) -> None:
        self.source_files = _strings(self.source_files, "--source-file")
        self.urls = _strings(self.urls, "--url")
        for name in ("template_kwargs", "engine_args"):
            value = getattr(self, name)
            if not isinstance(value, Mapping):
                raise ConfigError(f"{name} must be a mapping of names to values, got {value!r}")
            setattr(self, name, dict(value))
        if self.priority not in PRIORITIES:
            raise ConfigError(f"--priority must be one of {', '.join(PRIORITIES)}, got {self.priority!r}")
        if self.engine not in ENGINES:
            raise ConfigError(f"unknown engine {self.engine!r}; choose one of {sorted(ENGINES)}")
        check_options_used(self.engine, options_given(self))
        given = [name for name, on in (("--prompts", self.prompts), ("--source-file", self.source_files),
                                        ("--from-source", self.from_source)) if on]
        if len(given) > 1:
            raise ConfigError(f"{' and '.join(given)} exclude each other: give one place the prompts come from")
        if self.template_date is not None:
            check_template_date(self.template_date)
        check_range("scan_limit", self.scan_limit)
        if self.source_revision and not self.from_source:
            raise ConfigError("--source-revision applies to --from-source only")
        check_range("max_context", self.max_context)
        check_range("max_hours", self.max_hours)
        check_sampling(1 if self.max_new_tokens is None else self.max_new_tokens, self.temperature, self.top_p,
                       self.top_k, self.min_p)
        self.template_kwarg_mix = check_kwarg_mix(self.template_kwarg_mix, "--template-kwarg-mix")
        self.sampling_mix = check_sampling_mix(self.sampling_mix, "--sampling-mix")
        self.validation = check_validation(self.validation)
        ConversationPlan(turns=self.turns or "last", samples_per_prompt=self.samples_per_prompt)
        shard = resolve_auto(self.shard_index, self.num_shards)
        self.shard_index, self.num_shards = shard.index, shard.count

    @property
    def generates(self) -> bool:
        """Whether these settings generate (a model, tokenizer or replay file is given) or only assemble."""
        return bool(self.model or self.tokenizer or self.replay)

    def to_kwargs(self) -> dict[str, Any]:
        """The settings as keyword arguments (of this class, or of the builder config inheriting it)."""
        return {f.name: getattr(self, f.name) for f in fields(GenerationSettings)}

    def model_dtype(self) -> str | None:
        """The dtype the engine runs the model in (None: no model runs, the replay engine)."""
        return resolve_dtype(self.model if self.engine != "replay" else None, self.dtype, self.engine_args)

    def run_spec(self, config_name: str) -> RunSpec:
        """The spec of what these settings ask for (everything that determines the output)."""
        if self.config_file:
            load_config_file(self.config_file)
        config = get_config(config_name)
        if self.engine != "replay" and not self.model:
            raise ConfigError(f"--engine {self.engine} needs --model PATH")
        tokenizer = self.tokenizer or self.model
        if not tokenizer:
            raise ConfigError("give --model (or --tokenizer) so prompts can be templated")
        for option, folder in (("--model", self.model), ("--tokenizer", self.tokenizer)):
            if folder and not Path(folder).is_dir():
                raise ConfigError(f"{option} {folder}: no such folder (eagle3-synth reads local model and tokenizer "
                                  "folders only, nothing is downloaded)")
        check_tokenizer_folder(tokenizer, "--tokenizer" if self.tokenizer else "--model")
        selection = PromptSelection(source_files=self.source_files, from_source=self.from_source,
                                    revision=self.source_revision, seed=self.selection_seed,
                                    scan_limit=self.scan_limit)
        prompts_file = None if selection.reads_source else self.prompts or sample_prompts_path(config.name)
        if not selection.reads_source and not self.prompts:
            # Loud on purpose: forgetting --from-source on a GPU node would otherwise look like success.
            log.warning("%s: no --from-source, --source-file or --prompts given: using the config's few bundled "
                        "sample prompts (%s), which is a demo, not a real run", config.name, prompts_file)
        if prompts_file is not None:
            readable_file(prompts_file, "--prompts")
        return RunSpec(
            prompts=PromptPlan(config=config, prompts_file=prompts_file, selection=selection, limit=self.limit),
            model=ModelSpec(
                tokenizer=tokenizer,
                model=self.model if self.engine != "replay" else None,
                replay_file=self.replay if self.engine == "replay" else None,
                trust_remote_code=self.trust_remote_code,
                profile=self.profile,
                profile_file=self.profile_file,
                template_kwargs=dict(self.template_kwargs),
                template_date=self.template_date,
                context_length=self.max_context or model_context_length(self.model, self.tokenizer),
                engine_args=output_engine_args(self.engine_args),
                dtype=self._cast_dtype(),
            ),
            sampling=SamplingSpec(
                max_new_tokens=config.max_new_tokens if self.max_new_tokens is None else self.max_new_tokens,
                temperature=self.temperature, top_p=self.top_p, top_k=self.top_k, min_p=self.min_p,
                seed=self.seed),
            conversations=ConversationPlan(turns=self.turns or config.turns, samples_per_prompt=self.samples_per_prompt,
                                           template_kwarg_mix=self.template_kwarg_mix, mix_seed=self.selection_seed,
                                           sampling_mix=self.sampling_mix),
            validation=config.validation if self.validation is None else self.validation,
        )

    def _cast_dtype(self) -> str | None:
        """The model's dtype where it is not the checkpoint's own (what ModelSpec.dtype records)."""
        dtype = self.model_dtype()
        return dtype if self.dtype is not None and dtype != checkpoint_dtype(self.model) else None

    def run_options(self, run_dir: str | None = None) -> RunOptions:
        """How this process runs the spec (plumbing, never fingerprinted); `run_dir` over the field."""
        run_dir = run_dir or self.run_dir
        if not run_dir:
            raise ConfigError("give --run-dir: where the results are journaled")
        if self.engine == "replay" and not self.replay:
            raise ConfigError("--engine replay needs --replay FILE (recorded results)")
        return RunOptions(
            run_dir=str(run_dir),
            engine=self.engine,
            engine_options=EngineOptions(
                model=self.model,
                device=self.device,
                dtype=self.model_dtype(),
                batch_size=self.batch_size,
                urls=self.urls,
                max_in_flight=self.max_in_flight,
                request_timeout_s=self.request_timeout,
                max_retries=self.max_retries,
                engine_args=dict(self.engine_args),
                priority=self.priority == "turns-left",
            ),
            shard=Shard(index=self.shard_index, count=self.num_shards),
            max_hours=self.max_hours,
            retry_errors=self.retry_errors,
            strict=self.strict,
            workers=self.workers,
            template_kwarg_unchecked=self.template_kwarg_unchecked,
        )

    def resolve(self, config_name: str, run_dir: str | None = None) -> tuple[RunSpec, RunOptions]:
        """`(run_spec(config_name), run_options(run_dir))`: what `run.generate.generate` takes."""
        return self.run_spec(config_name), self.run_options(run_dir)
