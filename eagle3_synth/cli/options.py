"""Arguments shared by the commands that generate (`build`, and `generate` for shards)."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

from eagle3_synth.prompts.templating import check_template_date, check_tokenizer_folder
from eagle3_synth.prompts.configs import get_config, load_config_file, sample_prompts_path
from eagle3_synth.engines import ENGINES, EngineOptions
from eagle3_synth.errors import ConfigError
from eagle3_synth.run.shards import Shard
from eagle3_synth.run.directory import run_dir_under
from eagle3_synth.run.spec import ModelSpec, RunOptions, RunSpec, SamplingSpec
from eagle3_synth.contract.profiles import PROFILES
from eagle3_synth.prompts.selection import PromptPlan, PromptSelection
from eagle3_synth.prompts.prepare import model_context_length
from eagle3_synth.run.progress import RunSummary

log = logging.getLogger(__name__)


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


def add_generation_arguments(parser: argparse.ArgumentParser, *, sharded: bool = False) -> None:
    """The options of every generating command; `sharded` adds --num-shards/--shard-index and
    makes --run-dir required (a shard has no --out to put it under)."""
    parser.add_argument("config", metavar="CONFIG", help="config name, e.g. B1_glaive")
    model = parser.add_argument_group("model")
    model.add_argument("--model", help="local model folder (for --engine replay: a folder holding the tokenizer)")
    model.add_argument("--tokenizer", help="tokenizer folder, if not the model's")
    model.add_argument("--profile", default=ModelSpec.profile, metavar="NAME",
                       help=f"marker profile: auto (default), {', '.join(PROFILES)}, or one from --profile-file")
    model.add_argument("--profile-file", metavar="YAML", help="define model families of your own (the schema of "
                       "eagle3_synth/profiles.yaml); --profile may then name one")
    model.add_argument("--template-date", type=check_template_date, metavar="YYYY-MM-DD",
                       help="date a date-writing template (gpt-oss) renders as today (default: the run's recorded "
                       "date, else today)")
    model.add_argument("--template-kwarg", action="append", default=[], metavar="KEY=VALUE",
                       help="chat-template kwarg, e.g. thinking=true or enable_thinking=false (repeatable)")
    model.add_argument("--trust-remote-code", action="store_true", help="allow the tokenizer/model's own code (Kimi needs it)")
    prompts = parser.add_argument_group("prompts (default: the config's bundled sample prompts)")
    prompts.add_argument("--config-file", metavar="YAML", help="define your own configs (name -> source, adapter, "
                         "cap...; see eagle3_synth/configs.py); CONFIG may then name one")
    where = prompts.add_mutually_exclusive_group()
    where.add_argument("--prompts", metavar="FILE", help="prepared prompts JSONL ({messages, tools?, id?} per line)")
    where.add_argument("--source-file", action="append", default=[], metavar="FILE",
                       help="records in the source's own schema (.jsonl, .json, .parquet), converted by the "
                       "config's adapter (repeatable; read in the order given)")
    where.add_argument("--from-source", action="store_true",
                       help="read the config's source dataset with datasets streaming (needs network)")
    prompts.add_argument("--source-revision", metavar="REV", help="--from-source: dataset tag, branch or commit")
    prompts.add_argument("--limit", "--cap", dest="limit", type=int, metavar="N",
                         help="keep at most N prompts (default: a whole --prompts file; the config's cap for a source)")
    prompts.add_argument("--selection-seed", type=int, default=PromptSelection.seed, metavar="S",
                         help="seed of the order source records are taken in (not the sampling seed); "
                         f"default {PromptSelection.seed}")
    prompts.add_argument("--scan-limit", type=int, metavar="N", help="read only the first N source records (quick trials)")
    prompts.add_argument("--max-context", type=int, metavar="TOKENS",
                         help="model context: prompts longer than it minus --max-new-tokens are skipped "
                         "(default: max_position_embeddings of the model's config.json, if any)")
    prompts.add_argument("--strict", action="store_true", help="stop at the first rejected prompt instead of skipping it")
    sampling = parser.add_argument_group("sampling")
    sampling.add_argument("--max-new-tokens", type=int,
                          help=f"cap on output tokens (default: the config's, {SamplingSpec.max_new_tokens})")
    sampling.add_argument("--temperature", type=float, default=SamplingSpec.temperature,
                          help=f"0 = greedy (default: {SamplingSpec.temperature})")
    sampling.add_argument("--top-p", type=float, default=SamplingSpec.top_p,
                          help=f"nucleus sampling cut (default: {SamplingSpec.top_p}, off)")
    sampling.add_argument("--top-k", type=int, default=SamplingSpec.top_k,
                          help=f"top-k cut (default: {SamplingSpec.top_k}, off)")
    sampling.add_argument("--seed", type=int, default=SamplingSpec.seed,
                          help=f"sampling seed, per sample where the engine allows (default: {SamplingSpec.seed})")
    engine = parser.add_argument_group("engine")
    engine.add_argument("--engine", default=RunOptions.engine, choices=sorted(ENGINES))
    engine.add_argument("--replay", help="JSONL of recorded results for --engine replay")
    engine.add_argument("--batch-size", type=int, default=EngineOptions.batch_size,
                        help=f"transformers engine: prompts per generate call (default {EngineOptions.batch_size})")
    engine.add_argument("--device", help="transformers engine: torch device (default cpu)")
    engine.add_argument("--engine-arg", action="append", default=[], metavar="KEY=VALUE",
                        help="engine-specific argument, e.g. tp_size=8 for sglang (repeatable)")
    engine.add_argument("--url", action="append", default=[], help="sglang-http: server or router URL (repeatable)")
    engine.add_argument("--max-in-flight", type=int, help="sglang engines: requests in flight at once; keep it above "
                        "the engine's running-request capacity (default: sglang twice that capacity, sglang-http 256)")
    engine.add_argument("--request-timeout", type=float, default=EngineOptions.request_timeout_s, metavar="SECONDS",
                        help="sglang-http: give up on one request after this long, then retry it "
                        f"(default {EngineOptions.request_timeout_s:g})")
    engine.add_argument("--max-retries", type=int, default=EngineOptions.max_retries,
                        help="sglang engines: retries of a connection error, timeout or 5xx, with backoff "
                        f"(default {EngineOptions.max_retries})")
    run = parser.add_argument_group("run")
    run.add_argument("--run-dir", required=sharded, metavar="URL",
                     help="where results are journaled: a local path or any fsspec URL (s3://bucket/run)"
                     + ("" if sharded else "; default: OUT/.runs/CONFIG"))
    if sharded:
        run.add_argument("--num-shards", type=int, default=1, metavar="N",
                         help="split the config into N shards: shard I gets the samples with sample_id %% N == I")
        run.add_argument("--shard-index", type=int, default=0, metavar="I", help="which shard this process generates")
    run.add_argument("--max-hours", type=float, metavar="H",
                     help="stop handing out prompts after H hours, leaving a resumable run (exit status 75)")
    run.add_argument("--retry-errors", action="store_true", help="generate again the samples that failed before")


# Exit status of a generating command that stopped early with work left (--max-hours, SIGTERM):
# the run is resumable; schedulers can requeue on it (75 is EX_TEMPFAIL, "try again later").
EXIT_RESUMABLE = 75


def report_generation(summary: RunSummary) -> int:
    """Print the end-of-run summary; the exit status says whether the run is complete."""
    for line in summary.lines():
        print(line)
    return EXIT_RESUMABLE if summary.remaining else 0


def prompt_selection(args: argparse.Namespace) -> PromptSelection:
    """Where the prompts come from and how they are chosen (the "prompts" options)."""
    if args.scan_limit is not None and args.scan_limit < 1:
        raise ConfigError(f"--scan-limit must be >= 1, got {args.scan_limit}")
    if args.source_revision and not args.from_source:
        raise ConfigError("--source-revision applies to --from-source only")
    return PromptSelection(source_files=tuple(args.source_file), from_source=args.from_source,
                           revision=args.source_revision, seed=args.selection_seed, scan_limit=args.scan_limit)


def default_run_dir(args: argparse.Namespace) -> str:
    """`--run-dir`, else the one default: OUT/.runs/CONFIG."""
    return args.run_dir or run_dir_under(args.out, args.config)


def run_spec(args: argparse.Namespace) -> RunSpec:
    """The spec of what the generating options ask for (everything that determines the output)."""
    if args.config_file:
        load_config_file(args.config_file)
    config = get_config(args.config)
    if args.engine != "replay" and not args.model:
        raise ConfigError(f"--engine {args.engine} needs --model PATH")
    tokenizer = args.tokenizer or args.model
    if not tokenizer:
        raise ConfigError("give --model (or --tokenizer) so prompts can be templated")
    for option, folder in (("--model", args.model), ("--tokenizer", args.tokenizer)):
        if folder and not Path(folder).is_dir():
            raise ConfigError(f"{option} {folder}: no such folder (eagle3-synth reads local model and tokenizer "
                              "folders only, nothing is downloaded)")
    check_tokenizer_folder(tokenizer, "--tokenizer" if args.tokenizer else "--model")
    if args.max_context is not None and args.max_context < 1:
        raise ConfigError(f"--max-context must be >= 1, got {args.max_context}")
    selection = prompt_selection(args)
    prompts_file = None if selection.reads_source else args.prompts or sample_prompts_path(config.name)
    if not selection.reads_source and not args.prompts:
        # Loud on purpose: forgetting --from-source on a GPU node would otherwise look like success.
        log.warning("%s: no --from-source, --source-file or --prompts given: using the config's few bundled "
                    "sample prompts (%s), which is a demo, not a real run", config.name, prompts_file)
    if prompts_file is not None and not Path(prompts_file).is_file():
        raise ConfigError(f"--prompts {prompts_file}: no such file")
    return RunSpec(
        prompts=PromptPlan(config=config, prompts_file=prompts_file, selection=selection, limit=args.limit),
        model=ModelSpec(
            tokenizer=tokenizer,
            model=args.model if args.engine != "replay" else None,
            replay_file=args.replay if args.engine == "replay" else None,
            trust_remote_code=args.trust_remote_code,
            profile=args.profile,
            profile_file=args.profile_file,
            template_kwargs=dict(parse_key_value(item, "--template-kwarg") for item in args.template_kwarg),
            template_date=args.template_date,
            context_length=args.max_context or model_context_length(args.model, args.tokenizer),
        ),
        sampling=SamplingSpec(
            max_new_tokens=config.max_new_tokens if args.max_new_tokens is None else args.max_new_tokens,
            temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, seed=args.seed),
    )


def run_options(args: argparse.Namespace, run_dir: str) -> RunOptions:
    """How this process runs the spec (plumbing, never fingerprinted)."""
    if args.max_hours is not None and not args.max_hours > 0:
        raise ConfigError(f"--max-hours must be > 0, got {args.max_hours}")
    if args.engine == "replay" and not args.replay:
        raise ConfigError("--engine replay needs --replay FILE (recorded results)")
    return RunOptions(
        run_dir=run_dir,
        engine=args.engine,
        engine_options=EngineOptions(
            model=args.model,
            device=args.device,
            batch_size=args.batch_size,
            urls=tuple(args.url),
            max_in_flight=args.max_in_flight,
            request_timeout_s=args.request_timeout,
            max_retries=args.max_retries,
            engine_args=dict(parse_key_value(item, "--engine-arg") for item in args.engine_arg),
        ),
        shard=Shard(index=getattr(args, "shard_index", 0), count=getattr(args, "num_shards", 1)),
        max_hours=args.max_hours,
        retry_errors=args.retry_errors,
        strict=args.strict,
    )
