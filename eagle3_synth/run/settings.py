"""The run configuration: every option of the generating commands, declared once.

One dataclass per concern (model, prompts, conversations, sampling, engine, run); each field is one
option, named like it (`--max-new-tokens` is `max_new_tokens`), and carries in its metadata (`option`)
its help text, how argparse reads it, and whether it enters the run's fingerprint. `cli/options.py`
makes every generating command's arguments from these fields, one argument group per concern;
`GenerationSettings` is all of them, flat, and the datasets builder's config is `GenerationSettings`
(plus the builder's own fields), so the same names are the builder's config kwargs. Numbers are
checked against their range in the one table (`contract/ranges.py`), by field name. Defaults are read
from the spec dataclasses, so each default is written once.

`__post_init__` checks what needs nothing but the values; `resolve(config)` checks what needs the
config registry or the filesystem, then builds the typed `RunSpec` (what determines the output);
the settings themselves say how this process runs it (`engine_options(spec)` is the engine's part).
Messages name the command-line options, which are the builder's kwargs with dashes.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from eagle3_synth import exit_status
from eagle3_synth.contract.profiles import PROFILES
from eagle3_synth.engines import (ENGINES, EngineOptions, check_options_used, options_given, DTYPES, checkpoint_dtype,
                                  resolve_dtype)
from eagle3_synth.engines.base import check_sampling
from eagle3_synth.contract.ranges import check_ranges
from eagle3_synth.errors import ConfigError
from eagle3_synth.prompts.configs import TURN_MODES, get_config, load_config_file, sample_prompts_path
from eagle3_synth.prompts.prepare import model_context_length
from eagle3_synth.prompts.readers import readable_file
from eagle3_synth.prompts.selection import PromptPlan, PromptSelection
from eagle3_synth.prompts.templating import check_template_date, check_tokenizer_folder
from eagle3_synth.prompts.turns import ConversationPlan, check_kwarg_mix, check_sampling_mix
from eagle3_synth.prompts.held_out import check_validation
from eagle3_synth.run.shards import AUTO, Shard, resolve_auto
from eagle3_synth.run.spec import ModelSpec, RunSpec, SamplingSpec, output_engine_args

log = logging.getLogger(__name__)


def _strings(value: Any, name: str) -> tuple[str, ...]:
    """A repeatable option's values as a tuple (one string is one value)."""
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{name} must be a list of strings, got {value!r}")
    return tuple(value)


def parse_key_value(text: str, option: str) -> tuple[str, Any]:
    """KEY=VALUE with VALUE read as JSON when it parses (true, 8, 0.85), else as a string."""
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise ConfigError(f"{option} expects KEY=VALUE, got {text!r}")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key.strip(), value


def key_values(option: str) -> Callable[[list[str]], dict[str, Any]]:
    """A repeatable KEY=VALUE option's values as the mapping its field holds."""
    return lambda items: dict(parse_key_value(item, option) for item in items)


def shard_number(text: str) -> int | str:
    """--shard-index/--num-shards: a whole number, or `auto` (read from the launcher's environment)."""
    if text == AUTO:
        return AUTO
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number or {AUTO}, got {text!r}") from None


def option(default: object = None, help: str | None = None, *, fingerprint: bool = False, **read: object) -> Any:
    """A field that is a command-line option: its default, its --help text, whether it enters the
    run's fingerprint, and how the command line reads it (`read`: argparse's `metavar`, `type`,
    `choices`, `action`; `name`: its name when not the field's with dashes; `aliases`; `parse`: the
    parsed values -> the field's value; `exclusive`: one of the options naming where prompts come
    from; `sharded`: only where a shard is chosen). A mapping default is a fresh dict per instance."""
    metadata = {"option": {"help": help, "fingerprint": fingerprint, **read}}
    if isinstance(default, dict):
        return field(default_factory=dict, metadata=metadata)
    return field(default=default, metadata=metadata)


PRIORITIES = ("none", "turns-left")


@dataclass
class ModelSettings:
    model: str | None = option(None, "local model folder (for --engine replay: a folder holding the tokenizer)",
                               fingerprint=True)
    tokenizer: str | None = option(None, "tokenizer folder, if not the model's", fingerprint=True)
    profile: str = option(ModelSpec.profile, f"marker profile: auto (default), {', '.join(PROFILES)}, or one from "
                          "--profile-file", fingerprint=True, metavar="NAME")
    profile_file: str | None = option(None, "define model families of your own (the schema of "
                                      "eagle3_synth/contract/profiles.yaml); --profile may then name one",
                                      fingerprint=True, metavar="YAML")
    template_date: str | None = option(ModelSpec.template_date, "date a date-writing template (gpt-oss) renders as "
                                       "today (default: the run's recorded date, else today)", fingerprint=True,
                                       type=check_template_date, metavar="YYYY-MM-DD")
    # Over the config's own template kwargs.
    template_kwargs: Mapping[str, Any] = option(
        {}, "chat-template kwarg, e.g. thinking=true or enable_thinking=false (repeatable); checked against the "
        "names the template reads and the values the profile lists", fingerprint=True, name="--template-kwarg",
        action="append", metavar="KEY=VALUE", parse=key_values("--template-kwarg"))
    template_kwarg_unchecked: bool = option(
        False, "take --template-kwarg names the chat template does not visibly read (a "
        "template or tokenizer code that reads them indirectly); reserved names and values are still checked")
    # Never a default: the tokenizer's own code can change how text is tokenized.
    trust_remote_code: bool = option(ModelSpec.trust_remote_code,
                                     "allow the tokenizer/model's own code (Kimi needs it)", fingerprint=True)


@dataclass
class PromptSettings:
    config_file: str | None = option(None, "define your own configs (name -> source, adapter, cap...; see "
                                     "eagle3_synth/prompts/configs.py); CONFIG may then name one",
                                     fingerprint=True, metavar="YAML")
    prompts: str | None = option(None, "prepared prompts JSONL ({messages, tools?, id?} per line)", fingerprint=True,
                                 metavar="FILE", exclusive=True)
    source_files: tuple[str, ...] = option(
        PromptSelection.source_files, "records in the source's own schema (.jsonl, .json, .parquet), converted by "
        "the config's adapter (repeatable; read in the order given)", fingerprint=True, name="--source-file",
        action="append", metavar="FILE", exclusive=True)
    from_source: bool = option(PromptSelection.from_source, "read the config's source dataset with datasets "
                               "streaming (needs network)", fingerprint=True, exclusive=True)
    source_revision: str | None = option(PromptSelection.revision, "--from-source: dataset tag, branch or commit",
                                         fingerprint=True, metavar="REV")
    limit: int | None = option(PromptPlan.limit, "keep at most N prompts (default: a whole --prompts file; the "
                               "config's cap for a source)", fingerprint=True, aliases=("--cap",), metavar="N")
    selection_seed: int = option(PromptSelection.seed, "seed of the order source records are taken in (not the "
                                 f"sampling seed); default {PromptSelection.seed}", fingerprint=True, metavar="S")
    scan_limit: int | None = option(PromptSelection.scan_limit, "read only the first N source records (quick trials)",
                                    fingerprint=True, metavar="N")
    max_context: int | None = option(ModelSpec.context_length, "model context: prompts longer than it minus "
                                     "--max-new-tokens are skipped (default: max_position_embeddings of the model's "
                                     "config.json, if any)", fingerprint=True, metavar="TOKENS")
    strict: bool = option(False, "stop at the first rejected prompt instead of skipping it")


@dataclass
class ConversationSettings:
    turns: str | None = option(
        None, "last: the target writes each conversation's final answer, after the source's own earlier turns; all: "
        "every assistant turn, each on the history the target wrote, tool loops continued with the source's results "
        "(default: the config's, see docs/reference/configs.md)", fingerprint=True, choices=TURN_MODES)
    samples_per_prompt: int = option(ConversationPlan.samples_per_prompt, "rollouts per source conversation, each "
                                     f"with its own sampling seeds (default {ConversationPlan.samples_per_prompt})",
                                     fingerprint=True, metavar="N")
    # Or ((kwargs, weight), ...).
    template_kwarg_mix: str | tuple = option(
        ConversationPlan.template_kwarg_mix, "template kwargs drawn per rollout by a seeded draw (--selection-seed), "
        "e.g. thinking=true:0.7,thinking=false:0.3 (several kwargs: a=1+b=2:0.5); recorded per row",
        fingerprint=True, metavar="MIX")
    # Or ((values, weight), ...).
    sampling_mix: str | tuple = option(
        ConversationPlan.sampling_mix, "sampling drawn per rollout by a seeded draw (--selection-seed), over "
        "--temperature, --top-p, --top-k, --min-p, e.g. temperature=0.0:0.2,temperature=0.6:0.5,temperature=1.0:0.3 "
        "(several values: temperature=0.6+top_p=0.95:0.5); every turn of a rollout uses its rollout's; recorded per "
        "row in `sampling`", fingerprint=True, metavar="MIX")
    # A count N, a fraction (0 < F < 1) or its text ("200", "0.05").
    validation: str | float | int | None = option(
        None, "hold out whole conversations (every rollout, every turn) as a `validation` split: N of them, or a "
        "FRACTION (0.05), drawn by a seeded draw (--selection-seed); fingerprinted (default: the config's, none: "
        "train only)", fingerprint=True, metavar="N|FRACTION")


@dataclass
class SamplingSettings:
    # SGLang's default, 128, is never used.
    max_new_tokens: int | None = option(None, f"cap on output tokens (default: the config's, "
                                        f"{SamplingSpec.max_new_tokens})", fingerprint=True)
    temperature: float = option(SamplingSpec.temperature, f"0 = greedy (default: {SamplingSpec.temperature})",
                                fingerprint=True)
    top_p: float = option(SamplingSpec.top_p, f"nucleus sampling cut (default: {SamplingSpec.top_p}, off)",
                          fingerprint=True)
    top_k: int = option(SamplingSpec.top_k, f"top-k cut (default: {SamplingSpec.top_k}, off)", fingerprint=True)
    min_p: float = option(SamplingSpec.min_p, "min-p cut: drop tokens below MIN_P x the top token's probability "
                          f"(SGLang's min_p; default: {SamplingSpec.min_p}, off)", fingerprint=True)
    # None: unseeded.
    seed: int | None = option(SamplingSpec.seed, "sampling seed, per sample where the engine allows "
                              f"(default: {SamplingSpec.seed})", fingerprint=True)


@dataclass
class EngineSettings:
    """Plumbing, but for the replay file, a dtype cast and the engine args that change what the model
    computes (run/spec.py OUTPUT_ENGINE_ARGS: quantization, kv_cache_dtype ...)."""

    engine: str = option("transformers", choices=sorted(ENGINES))
    replay: str | None = option(None, "JSONL of recorded results for --engine replay", fingerprint=True)
    batch_size: int = option(EngineOptions.batch_size, "transformers engine: prompts per generate call "
                             f"(default {EngineOptions.batch_size})")
    device: str | None = option(EngineOptions.device, "transformers engine: torch device (default cpu)")
    # engines/__init__.py: never an engine's `auto`.
    dtype: str | None = option(
        None, "the dtype the model runs in (default: the checkpoint's own, from its config.json; never SGLang's auto, "
        "which runs a float32 checkpoint in float16). SGLang on a CPU runs bfloat16 only; sglang-http: the server "
        "must run this dtype", fingerprint=True, choices=DTYPES)
    engine_args: Mapping[str, Any] = option({}, "engine-specific argument, e.g. tp_size=8 for sglang (repeatable)",
                                            fingerprint=True, name="--engine-arg", action="append",
                                            metavar="KEY=VALUE", parse=key_values("--engine-arg"))
    urls: tuple[str, ...] = option(EngineOptions.urls, "sglang-http: server or router URL (repeatable)",
                                   name="--url", action="append", metavar="URL")
    max_in_flight: int | None = option(
        EngineOptions.max_in_flight, "sglang engines: a fixed number of requests in flight (default: follow the "
        "engine's load, from what it runs at once up to twice that; where the load cannot be read, that ceiling; "
        "sglang-http without a server capacity, e.g. a router: 256)")
    priority: str = option(
        "none", "sglang engines: turns-left sends each request the turns its conversation may still have as its "
        "priority, so SGLang runs long conversations' turns first (the engine gets enable_priority_scheduling; an "
        "sglang-http server must have it); default none", choices=PRIORITIES)
    request_timeout: float = option(
        EngineOptions.request_timeout_s, "sglang-http: idle timeout: retry a request when no data arrived for this "
        "long (the wait for the first token counts; a request that streams is never cut off; "
        f"default {EngineOptions.request_timeout_s:g})", metavar="SECONDS")
    max_retries: int = option(EngineOptions.max_retries, "sglang engines: retries of a connection error, timeout or "
                              f"5xx, with backoff (default {EngineOptions.max_retries})")


@dataclass
class RunSettings:
    # None: the caller's default (OUT/.runs/CONFIG for `build`).
    run_dir: str | None = option(None, "where results are journaled: a local path or any fsspec URL (s3://bucket/run)",
                                 metavar="URL")
    # Both auto: read from a Slurm array's or torchrun's environment (`shards.shard_from_environment`).
    num_shards: int | str = option(Shard.count, "split the config into N shards: shard I gets the samples with "
                                   "sample_id %% N == I; auto (with --shard-index auto): SLURM_ARRAY_TASK_COUNT, else "
                                   "WORLD_SIZE", type=shard_number, metavar="N", sharded=True)
    shard_index: int | str = option(Shard.index, "which shard this process generates; auto: SLURM_ARRAY_TASK_ID (from "
                                    "the array's first), else RANK", type=shard_number, metavar="I", sharded=True)
    max_hours: float | None = option(None, "stop handing out prompts after H hours, leaving a "
                                     f"resumable run (exit status {exit_status.RESUMABLE})", metavar="H")
    retry_errors: bool = option(False, "generate again the samples that failed before")
    # Processes that template prompts (prompts.prepare.make_templater): 1, N, or None (automatic);
    # the builder's only.
    workers: int | None = None


# The concerns, each an argument group of the generating commands, under its title.
CONCERNS: tuple[tuple[str, type], ...] = (
    ("model", ModelSettings), ("prompts (default: the config's bundled sample prompts)", PromptSettings),
    ("conversations", ConversationSettings), ("sampling", SamplingSettings), ("engine", EngineSettings),
    ("run", RunSettings))


@dataclass
class GenerationSettings(RunSettings, EngineSettings, SamplingSettings, ConversationSettings, PromptSettings,
                         ModelSettings):
    """Every setting of a generating command (bases in reverse, so the fields run model first)."""

    def __post_init__(self) -> None:
        check_ranges({f.name: getattr(self, f.name) for f in fields(GenerationSettings)})
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
        if self.source_revision and not self.from_source:
            raise ConfigError("--source-revision applies to --from-source only")
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

    @property
    def shard(self) -> Shard:
        """This process's share of the samples."""
        return Shard(index=self.shard_index, count=self.num_shards)

    def engine_options(self, spec: RunSpec) -> EngineOptions:
        """The engine's options (the one place they are made): these settings' plumbing, with the
        spec's model, tokenizer and replay file."""
        return EngineOptions(
            model=spec.model.model or self.model,
            tokenizer=spec.model.tokenizer,
            trust_remote_code=spec.model.trust_remote_code,
            replay_file=spec.model.replay_file,
            device=self.device,
            dtype=self.model_dtype(),
            batch_size=self.batch_size,
            urls=self.urls,
            max_in_flight=self.max_in_flight,
            request_timeout_s=self.request_timeout,
            max_retries=self.max_retries,
            engine_args=dict(self.engine_args),
            priority=self.priority == "turns-left",
        )

    def resolve(self, config_name: str, run_dir: str | None = None) -> tuple[RunSpec, GenerationSettings]:
        """What `run.generate.generate` takes: the spec of `config_name`, and these settings with the
        run directory they journal into (`run_dir` over the field)."""
        spec = self.run_spec(config_name)
        run_dir = run_dir or self.run_dir
        if not run_dir:
            raise ConfigError("give --run-dir: where the results are journaled")
        if self.engine == "replay" and not self.replay:
            raise ConfigError("--engine replay needs --replay FILE (recorded results)")
        return spec, replace(self, run_dir=str(run_dir))
