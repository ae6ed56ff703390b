"""Arguments shared by the commands that generate (`build`, and `generate` for shards)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..configs import get_config, sample_prompts_path
from ..engines import ENGINES, EngineOptions
from ..errors import ConfigError
from ..pipeline import GenerateOptions
from ..profiles import PROFILES


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


def add_generation_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", metavar="CONFIG", help="config name, e.g. B1_glaive")
    model = parser.add_argument_group("model")
    model.add_argument("--model", help="local model folder (for --engine replay: a folder holding the tokenizer)")
    model.add_argument("--tokenizer", help="tokenizer folder, if not the model's")
    model.add_argument("--profile", default="auto", choices=["auto", *PROFILES], help="marker profile (default: auto)")
    model.add_argument("--template-kwarg", action="append", default=[], metavar="KEY=VALUE",
                       help="chat-template kwarg, e.g. thinking=true or enable_thinking=false (repeatable)")
    model.add_argument("--trust-remote-code", action="store_true", help="allow the tokenizer/model's own code (Kimi needs it)")
    prompts = parser.add_argument_group("prompts")
    prompts.add_argument("--prompts", help="prepared prompts JSONL ({messages, tools?, id?} per line); "
                         "default: the config's bundled samples")
    prompts.add_argument("--limit", type=int, help="use only the first N prompts")
    prompts.add_argument("--strict", action="store_true", help="stop at the first bad prompt instead of skipping it")
    sampling = parser.add_argument_group("sampling")
    sampling.add_argument("--max-new-tokens", type=int, help="cap on output tokens (default: the config's, 10240)")
    sampling.add_argument("--temperature", type=float, default=0.6)
    sampling.add_argument("--top-p", type=float, default=1.0)
    sampling.add_argument("--top-k", type=int, default=-1)
    sampling.add_argument("--seed", type=int, default=0)
    engine = parser.add_argument_group("engine")
    engine.add_argument("--engine", default="transformers", choices=sorted(ENGINES))
    engine.add_argument("--replay", help="JSONL of recorded results for --engine replay")
    engine.add_argument("--batch-size", type=int, default=8, help="transformers engine: prompts per generate call")
    engine.add_argument("--device", help="transformers engine: torch device (default cpu)")
    engine.add_argument("--engine-arg", action="append", default=[], metavar="KEY=VALUE",
                        help="engine-specific argument, e.g. tp_size=8 for sglang (repeatable)")
    engine.add_argument("--url", action="append", default=[], help="sglang-http: server or router URL (repeatable)")
    engine.add_argument("--max-in-flight", type=int, default=256, help="sglang engines: requests in flight at once")
    run = parser.add_argument_group("run")
    run.add_argument("--run-dir", help="where results are journaled (default: OUT/.runs/CONFIG)")
    run.add_argument("--retry-errors", action="store_true", help="generate again the samples that failed before")


def generate_options(args: argparse.Namespace, run_dir: str) -> GenerateOptions:
    config = get_config(args.config)
    if args.limit is not None and args.limit < 1:
        raise ConfigError(f"--limit must be >= 1, got {args.limit}")
    if args.engine != "replay" and not args.model:
        raise ConfigError(f"--engine {args.engine} needs --model PATH")
    tokenizer = args.tokenizer or args.model
    if not tokenizer:
        raise ConfigError("give --model (or --tokenizer) so prompts can be templated")
    prompts_file = args.prompts or sample_prompts_path(config.name)
    if not Path(prompts_file).is_file():
        raise ConfigError(f"--prompts {prompts_file}: no such file")
    engine_args = dict(parse_key_value(item, "--engine-arg") for item in args.engine_arg)
    template_kwargs = dict(parse_key_value(item, "--template-kwarg") for item in args.template_kwarg)
    return GenerateOptions(
        config=config,
        tokenizer_path=tokenizer,
        prompts_file=prompts_file,
        run_dir=run_dir,
        engine=args.engine,
        engine_options=EngineOptions(
            model=args.model,
            tokenizer=tokenizer,
            trust_remote_code=args.trust_remote_code,
            device=args.device,
            batch_size=args.batch_size,
            replay_file=args.replay,
            urls=tuple(args.url),
            max_in_flight=args.max_in_flight,
            engine_args=engine_args,
        ),
        profile=args.profile,
        limit=args.limit,
        max_new_tokens=config.max_new_tokens if args.max_new_tokens is None else args.max_new_tokens,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        seed=args.seed,
        template_kwargs=template_kwargs,
        trust_remote_code=args.trust_remote_code,
        strict=args.strict,
        retry_errors=args.retry_errors,
    )
