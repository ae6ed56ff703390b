"""Arguments shared by the commands that generate (`build`, and `generate` for shards).

Declared once, with defaults read from `run.settings.GenerationSettings`; `generation_settings`
turns them into those settings, which build the run spec (the builder's config takes the same).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from eagle3_synth import exit_status
from eagle3_synth.cli import EXIT_RESUMABLE
from eagle3_synth.contract.profiles import PROFILES
from eagle3_synth.engines import ENGINES
from eagle3_synth.engines.dtypes import DTYPES
from eagle3_synth.errors import ConfigError
from eagle3_synth.prompts.configs import TURN_MODES
from eagle3_synth.prompts.templating import check_template_date
from eagle3_synth.prompts.turns import parse_kwarg_mix
from eagle3_synth.run.directory import run_dir_under
from eagle3_synth.contract.ranges import check_ranges
from eagle3_synth.run.progress import RunSummary
from eagle3_synth.run.staging import DryRun
from eagle3_synth.run.settings import PRIORITIES, GenerationSettings
from eagle3_synth.run.shards import AUTO
from eagle3_synth.run.spec import SamplingSpec


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


def shard_number(text: str) -> int | str:
    """--shard-index/--num-shards: a whole number, or `auto` (read from the launcher's environment)."""
    if text == AUTO:
        return AUTO
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number or {AUTO}, got {text!r}") from None


def add_generation_arguments(parser: argparse.ArgumentParser, *, sharded: bool = False) -> None:
    """The options of every generating command; `sharded` adds --num-shards/--shard-index and
    makes --run-dir required (a shard has no --out to put it under)."""
    parser.add_argument("config", metavar="CONFIG", help="config name, e.g. B1_glaive")
    model = parser.add_argument_group("model")
    model.add_argument("--model", help="local model folder (for --engine replay: a folder holding the tokenizer)")
    model.add_argument("--tokenizer", help="tokenizer folder, if not the model's")
    model.add_argument("--profile", default=GenerationSettings.profile, metavar="NAME",
                       help=f"marker profile: auto (default), {', '.join(PROFILES)}, or one from --profile-file")
    model.add_argument("--profile-file", metavar="YAML", help="define model families of your own (the schema of "
                       "eagle3_synth/contract/profiles.yaml); --profile may then name one")
    model.add_argument("--template-date", type=check_template_date, metavar="YYYY-MM-DD",
                       help="date a date-writing template (gpt-oss) renders as today (default: the run's recorded "
                       "date, else today)")
    model.add_argument("--template-kwarg", action="append", default=[], metavar="KEY=VALUE",
                       help="chat-template kwarg, e.g. thinking=true or enable_thinking=false (repeatable); "
                       "checked against the names the template reads and the values the profile lists")
    model.add_argument("--template-kwarg-unchecked", action="store_true",
                       help="take --template-kwarg names the chat template does not visibly read (a template or "
                       "tokenizer code that reads them indirectly); reserved names and values are still checked")
    model.add_argument("--trust-remote-code", action="store_true", help="allow the tokenizer/model's own code (Kimi needs it)")
    prompts = parser.add_argument_group("prompts (default: the config's bundled sample prompts)")
    prompts.add_argument("--config-file", metavar="YAML", help="define your own configs (name -> source, adapter, "
                         "cap...; see eagle3_synth/prompts/configs.py); CONFIG may then name one")
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
    prompts.add_argument("--selection-seed", type=int, default=GenerationSettings.selection_seed, metavar="S",
                         help="seed of the order source records are taken in (not the sampling seed); "
                         f"default {GenerationSettings.selection_seed}")
    prompts.add_argument("--scan-limit", type=int, metavar="N", help="read only the first N source records (quick trials)")
    prompts.add_argument("--max-context", type=int, metavar="TOKENS",
                         help="model context: prompts longer than it minus --max-new-tokens are skipped "
                         "(default: max_position_embeddings of the model's config.json, if any)")
    prompts.add_argument("--strict", action="store_true", help="stop at the first rejected prompt instead of skipping it")
    talks = parser.add_argument_group("conversations")
    talks.add_argument("--turns", choices=TURN_MODES,
                       help="last: the target writes each conversation's final answer, after the source's own earlier "
                       "turns; all: every assistant turn, each on the history the target wrote, tool loops continued "
                       "with the source's results (default: the config's, see docs/reference/configs.md)")
    talks.add_argument("--samples-per-prompt", type=int, default=GenerationSettings.samples_per_prompt, metavar="N",
                       help="rollouts per source conversation, each with its own sampling seeds "
                       f"(default {GenerationSettings.samples_per_prompt})")
    talks.add_argument("--template-kwarg-mix", metavar="MIX", default="",
                       help="template kwargs drawn per rollout by a seeded draw (--selection-seed), e.g. "
                       "thinking=true:0.7,thinking=false:0.3 (several kwargs: a=1+b=2:0.5); recorded per row")
    talks.add_argument("--sampling-mix", metavar="MIX", default="",
                       help="sampling drawn per rollout by a seeded draw (--selection-seed), over --temperature, "
                       "--top-p, --top-k, --min-p, e.g. temperature=0.0:0.2,temperature=0.6:0.5,temperature=1.0:0.3 "
                       "(several values: temperature=0.6+top_p=0.95:0.5); every turn of a rollout uses its "
                       "rollout's; recorded per row in `sampling`")
    talks.add_argument("--validation", metavar="N|FRACTION",
                       help="hold out whole conversations (every rollout, every turn) as a `validation` split: "
                       "N of them, or a FRACTION (0.05), drawn by a seeded draw (--selection-seed); fingerprinted "
                       "(default: the config's, none: train only)")
    sampling = parser.add_argument_group("sampling")
    sampling.add_argument("--max-new-tokens", type=int,
                          help=f"cap on output tokens (default: the config's, {SamplingSpec.max_new_tokens})")
    sampling.add_argument("--temperature", type=float, default=GenerationSettings.temperature,
                          help=f"0 = greedy (default: {GenerationSettings.temperature})")
    sampling.add_argument("--top-p", type=float, default=GenerationSettings.top_p,
                          help=f"nucleus sampling cut (default: {GenerationSettings.top_p}, off)")
    sampling.add_argument("--top-k", type=int, default=GenerationSettings.top_k,
                          help=f"top-k cut (default: {GenerationSettings.top_k}, off)")
    sampling.add_argument("--min-p", type=float, default=GenerationSettings.min_p,
                          help="min-p cut: drop tokens below MIN_P x the top token's probability "
                          f"(SGLang's min_p; default: {GenerationSettings.min_p}, off)")
    sampling.add_argument("--seed", type=int, default=GenerationSettings.seed,
                          help="sampling seed, per sample where the engine allows "
                          f"(default: {GenerationSettings.seed})")
    engine = parser.add_argument_group("engine")
    engine.add_argument("--engine", default=GenerationSettings.engine, choices=sorted(ENGINES))
    engine.add_argument("--replay", help="JSONL of recorded results for --engine replay")
    engine.add_argument("--batch-size", type=int, default=GenerationSettings.batch_size,
                        help="transformers engine: prompts per generate call "
                        f"(default {GenerationSettings.batch_size})")
    engine.add_argument("--device", help="transformers engine: torch device (default cpu)")
    engine.add_argument("--dtype", choices=DTYPES, help="the dtype the model runs in (default: the checkpoint's own, "
                        "from its config.json; never SGLang's auto, which runs a float32 checkpoint in float16). "
                        "SGLang on a CPU runs bfloat16 only; sglang-http: the server must run this dtype")
    engine.add_argument("--engine-arg", action="append", default=[], metavar="KEY=VALUE",
                        help="engine-specific argument, e.g. tp_size=8 for sglang (repeatable)")
    engine.add_argument("--url", action="append", default=[], help="sglang-http: server or router URL (repeatable)")
    engine.add_argument("--max-in-flight", type=int, help="sglang engines: a fixed number of requests in flight "
                        "(default: follow the engine's load, from what it runs at once up to twice that; "
                        "where the load cannot be read, that ceiling; sglang-http without a server capacity, "
                        "e.g. a router: 256)")
    engine.add_argument("--priority", choices=PRIORITIES, default=GenerationSettings.priority,
                        help="sglang engines: turns-left sends each request the turns its conversation may still "
                        "have as its priority, so SGLang runs long conversations' turns first (the engine gets "
                        "enable_priority_scheduling; an sglang-http server must have it); default none")
    engine.add_argument("--request-timeout", type=float, default=GenerationSettings.request_timeout, metavar="SECONDS",
                        help="sglang-http: idle timeout: retry a request when no data arrived for this long "
                        "(the wait for the first token counts; a request that streams is never cut off; "
                        f"default {GenerationSettings.request_timeout:g})")
    engine.add_argument("--max-retries", type=int, default=GenerationSettings.max_retries,
                        help="sglang engines: retries of a connection error, timeout or 5xx, with backoff "
                        f"(default {GenerationSettings.max_retries})")
    run = parser.add_argument_group("run")
    run.add_argument("--run-dir", required=sharded, metavar="URL",
                     help="where results are journaled: a local path or any fsspec URL (s3://bucket/run)"
                     + ("" if sharded else "; default: OUT/.runs/CONFIG"))
    if sharded:
        run.add_argument("--num-shards", type=shard_number, default=GenerationSettings.num_shards, metavar="N",
                         help="split the config into N shards: shard I gets the samples with sample_id %% N == I; "
                         "auto (with --shard-index auto): SLURM_ARRAY_TASK_COUNT, else WORLD_SIZE")
        run.add_argument("--shard-index", type=shard_number, default=GenerationSettings.shard_index, metavar="I",
                         help="which shard this process generates; auto: SLURM_ARRAY_TASK_ID (from the array's "
                         "first), else RANK")
    run.add_argument("--max-hours", type=float, metavar="H",
                     help=f"stop handing out prompts after H hours, leaving a resumable run (exit status {EXIT_RESUMABLE})")
    run.add_argument("--retry-errors", action="store_true", help="generate again the samples that failed before")
    run.add_argument("--dry-run", action="store_true",
                     help="check everything and prepare the prompts, then print what the run would generate "
                     "(prompts kept, rejects by reason, turns, the engine) and stop: no engine starts, nothing is written")


def check_numbers(args: argparse.Namespace) -> None:
    """Each number option in its range (the one table, `contract/ranges.py`): one line naming the
    option, as soon as the options are parsed."""
    check_ranges(vars(args))




EXIT_FAILED_SAMPLES = exit_status.FAILED_SAMPLES


def report_generation(summary: RunSummary) -> int:
    """Print the end-of-run summary; the exit status says whether the run is complete (work left:
    75, or 130 after Ctrl-C), and clean (1: failed samples)."""
    for line in summary.lines():
        print(line)
    if summary.remaining:
        return stopped_status(summary)
    return EXIT_FAILED_SAMPLES if summary.errors or summary.failed_before else 0


def stopped_status(summary: RunSummary) -> int:
    """The status of a run that stopped with work left: Ctrl-C's own (130), else resumable (75:
    --max-hours, SIGTERM, what schedulers requeue on). Either way the same command continues."""
    return exit_status.INTERRUPTED if summary.stopped == "interrupted" else EXIT_RESUMABLE


def report_dry_run(report: DryRun) -> int:
    """Print what a run would generate (`--dry-run`)."""
    for line in report.lines():
        print(line)
    return 0


def default_run_dir(args: argparse.Namespace) -> str:
    """`--run-dir`, else the one default: OUT/.runs/CONFIG."""
    return args.run_dir or run_dir_under(args.out, args.config)


def generation_settings(args: argparse.Namespace, run_dir: str | None) -> GenerationSettings:
    """The generating options as the flat settings the library (and the builder's config) take;
    the numbers are checked first."""
    check_numbers(args)
    return GenerationSettings(
        model=args.model,
        tokenizer=args.tokenizer,
        profile=args.profile,
        profile_file=args.profile_file,
        template_date=args.template_date,
        template_kwargs=dict(parse_key_value(item, "--template-kwarg") for item in args.template_kwarg),
        template_kwarg_unchecked=args.template_kwarg_unchecked,
        trust_remote_code=args.trust_remote_code,
        config_file=args.config_file,
        prompts=args.prompts,
        source_files=tuple(args.source_file),
        from_source=args.from_source,
        source_revision=args.source_revision,
        limit=args.limit,
        selection_seed=args.selection_seed,
        scan_limit=args.scan_limit,
        max_context=args.max_context,
        strict=args.strict,
        turns=args.turns,
        samples_per_prompt=args.samples_per_prompt,
        template_kwarg_mix=parse_kwarg_mix(args.template_kwarg_mix) if args.template_kwarg_mix else (),
        sampling_mix=args.sampling_mix or (),
        validation=args.validation,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        min_p=args.min_p,
        seed=args.seed,
        engine=args.engine,
        replay=args.replay,
        batch_size=args.batch_size,
        device=args.device,
        dtype=args.dtype,
        engine_args=dict(parse_key_value(item, "--engine-arg") for item in args.engine_arg),
        urls=tuple(args.url),
        max_in_flight=args.max_in_flight,
        request_timeout=args.request_timeout,
        max_retries=args.max_retries,
        priority=args.priority,
        run_dir=run_dir,
        num_shards=getattr(args, "num_shards", GenerationSettings.num_shards),
        shard_index=getattr(args, "shard_index", GenerationSettings.shard_index),
        max_hours=args.max_hours,
        retry_errors=args.retry_errors,
    )
