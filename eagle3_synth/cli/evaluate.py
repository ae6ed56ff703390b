"""`eagle3-synth evaluate DIR CONFIG... --drafter PATH`: the drafter's acceptance as SGLang's own
speculative decoder serves it, on the target's held-out rows.

Each row's exact prompt ids go to the target twice: alone (the baseline: its tokens/s, and at
temperature 0 the output speculation must equal) and with the drafter (SGLang's EAGLE-3). The
figures are SGLang's per-request counts: acceptance length (1 + drafts accepted per verify step),
tokens per verify step, per-position acceptance, acceptance rate, per config, per turn and overall,
and the speed-up. `--engine sglang` runs SGLang in this process; `--engine sglang-http` sends to
servers you started: `--url` with the drafter (the flags are printed by `--dry-run`), `--baseline-url`
without it (or `--no-baseline`). A drafter that does not fit the target is refused before any engine
starts. speculators' drafters are served from their SGLang layout (written beside, weights linked).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from eagle3_synth.cli.options import (add_source_argument, open_from_args, parse_key_value, add_overwrite_argument,
                                      check_outputs)
from eagle3_synth.dataset.stores import open_source, resolve_configs
from eagle3_synth.engines import ENGINE_OPTIONS, check_options_used, DTYPES, resolve_dtype
from eagle3_synth.contract.ranges import check_ranges
from eagle3_synth.errors import ConfigError
from eagle3_synth.run.preflight import check_model_and_engine


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("evaluate", help="a drafter's acceptance served by SGLang's speculative decoding",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_source_argument(parser)
    parser.set_defaults(split=None)
    parser.add_argument("configs", metavar="CONFIG", nargs="*", help="configs (default: all)")
    parser.add_argument("--drafter", required=True, metavar="PATH",
                        help="the drafter folder: SpecForge's `export --to sglang` output or speculators' checkpoint")
    parser.add_argument("--model", help="the target's folder (default: the one recorded with the data)")
    parser.add_argument("--max-rows", type=int, metavar="N", help="evaluate the first N rows of each config")
    parser.add_argument("--temperature", type=float, metavar="T",
                        help="sample every row at T (0: greedy, outputs checked) instead of each row's recorded sampling")
    spec = parser.add_argument_group("speculative decoding (unset: " + "SGLang's own choice per target)")
    spec.add_argument("--num-steps", type=int, metavar="N", help="draft steps per verify (speculative_num_steps)")
    spec.add_argument("--eagle-topk", type=int, metavar="K", help="branches per draft step (speculative_eagle_topk)")
    spec.add_argument("--num-draft-tokens", type=int, metavar="N",
                      help="draft tokens verified per step (speculative_num_draft_tokens)")
    engine = parser.add_argument_group("engine")
    engine.add_argument("--engine", choices=("sglang", "sglang-http"), default="sglang")
    engine.add_argument("--dtype", choices=DTYPES, help="the dtype the target runs in (default: the checkpoint's own)")
    engine.add_argument("--engine-arg", action="append", default=[], metavar="KEY=VALUE",
                        help="sglang: an SGLang server argument (repeatable), e.g. device=cpu")
    engine.add_argument("--url", action="append", default=[], help="sglang-http: a server started with the drafter")
    engine.add_argument("--baseline-url", action="append", default=[],
                        help="sglang-http: a server of the target alone, for the baseline")
    engine.add_argument("--no-baseline", action="store_true", help="skip the run without speculation (no speed-up, "
                                                                     "no baseline output check)")
    engine.add_argument("--max-in-flight", type=int, help="requests in flight (default: follow the engine's load)")
    parser.add_argument("--sglang-drafter", metavar="DIR", type=Path,
                        help="a speculators drafter: write its SGLang layout here (kept; default: a temporary folder)")
    parser.add_argument("--report", metavar="FILE.json", help="write the report, with every request's counts, as JSON")
    parser.add_argument("--dry-run", action="store_true",
                        help="check the drafter against the target and print the SGLang server command; start nothing")
    add_overwrite_argument(parser)
    parser.set_defaults(run=run)


# What each engine uses here (`engines.ENGINE_OPTIONS`), but for --dtype: an sglang-http server runs
# the dtype it was started with, and evaluate records none. --dry-run prints a server's command, with
# --engine-arg and --dtype in it, for either engine (`engine_options_given`).
EVALUATE_USES = {**ENGINE_OPTIONS, "--dtype": ("sglang",)}


def engine_options_given(args: argparse.Namespace) -> list[str]:
    """The options only one engine uses, where given (none has a default), less those --dry-run prints."""
    given = {"--url": args.url, "--baseline-url": args.baseline_url,
             "--engine-arg": args.engine_arg and not args.dry_run, "--dtype": args.dtype and not args.dry_run}
    return [option for option, value in given.items() if value]


def open_rows_source(args: argparse.Namespace):  # noqa: ANN201 - RowSource
    """The validation split where the data has one for the configs asked, else train (said)."""
    if args.split is not None:
        return open_from_args(args)
    validation = open_source(args.source, revision=args.revision, split="validation")
    try:
        held_out = validation.configs()
    except ConfigError:
        held_out = []
    if held_out and all(c in held_out for c in (args.configs or held_out)):
        return validation
    print(f"evaluate: {args.source} has no validation split for these configs; evaluating train rows "
          "(rows the drafter may have trained on)", file=sys.stderr)
    return open_source(args.source, revision=args.revision, split="train")


def run(args: argparse.Namespace) -> int:
    from eagle3_synth.engines import EngineOptions, SamplingParams
    from eagle3_synth.evaluate import format_report
    from eagle3_synth.evaluate import (Evaluation, check_drafter, evaluate, evaluation_row, scratch_dir,
                                           served_drafter_path)

    if args.report:
        check_outputs([args.report], "--report", args.overwrite)
    check_ranges(vars(args))
    check_options_used(args.engine, engine_options_given(args), EVALUATE_USES)
    if args.engine == "sglang-http" and not args.url:
        raise ConfigError("--engine sglang-http needs --url: a server started with the drafter (see --dry-run)")
    if args.engine == "sglang-http" and not args.no_baseline and not args.baseline_url:
        raise ConfigError("--engine sglang-http: give --baseline-url (a server of the target alone) or --no-baseline")
    source = open_rows_source(args)
    configs = resolve_configs(source, args.configs)
    provenance = source.provenance(configs[0])
    model = args.model or provenance.model
    drafter, target, architecture = check_drafter(args.drafter, model)
    engine_args = dict(parse_key_value(item, "--engine-arg") for item in args.engine_arg)
    check_model_and_engine(args.engine, model, EngineOptions(
        model=model, dtype=resolve_dtype(model, args.dtype, engine_args), engine_args=engine_args))
    markers = provenance.markers
    if markers is None:
        raise ConfigError(f"{args.source}: no markers recorded with {configs[0]} ({provenance.origin}); "
                          "evaluate needs the stop ids the rows were generated with")
    with scratch_dir() as scratch:
        drafter_path = served_drafter_path(drafter, target, architecture, args.sglang_drafter, Path(scratch))
        speculative = {"num_steps": args.num_steps, "eagle_topk": args.eagle_topk, "num_draft_tokens": args.num_draft_tokens,
                       "draft_window_size": drafter.sliding_window}
        if args.dry_run:
            print(server_command(model, drafter_path, speculative, engine_args, args.dtype))
            if drafter.layout == "speculators" and args.sglang_drafter is None:
                print("  (a speculators drafter: give --sglang-drafter DIR to keep the SGLang layout that server loads)")
            return 0
        rows = []
        for config in configs:
            for i, row in enumerate(source.iter_rows(config)):
                if args.max_rows is not None and i >= args.max_rows:
                    break
                rows.append(evaluation_row(config, row, args.temperature, provenance.max_new_tokens))
        if not rows:
            raise ConfigError(f"{args.source}: no rows in {', '.join(configs)} ({source.split} split)")
        check_cpu_sampling(args.engine, engine_args, rows)
        vocab = (provenance.vocab_size or {}).get("size") or (target.get("text_config") or target).get("vocab_size")
        params = SamplingParams(max_new_tokens=max(r.sampling["max_new_tokens"] for r in rows), temperature=0.0,
                                stop_token_ids=tuple(markers.stop_ids), vocab_size=vocab)
        options = EngineOptions(model=model, dtype=resolve_dtype(model, args.dtype, engine_args), urls=tuple(args.url),
                                max_in_flight=args.max_in_flight, engine_args=engine_args)
        evaluation = Evaluation(engine=args.engine, options=options, speculative=speculative,
                                baseline=not args.no_baseline, baseline_urls=tuple(args.baseline_url))
        result = evaluate(rows, evaluation, drafter_path, params)
    result = {"source": args.source, "split": source.split, "drafter": str(drafter.path), "layout": drafter.layout,
              "target": model, "temperature": "recorded" if args.temperature is None else args.temperature, **result}
    print(format_report(result))
    if args.report:
        Path(args.report).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.report}")
    return 0


def check_cpu_sampling(engine: str, engine_args: dict, rows: list) -> None:
    """SGLang 0.5.23 verifies sampled drafts with a CUDA (or MUSA, NPU) kernel only: on its CPU backend
    `tree_speculative_sampling_target_only` is None (sglang/kernels/ops/speculative/verify_sampling.py:
    21-32) and the first sampled verify step kills the scheduler. Refused here, before the engine starts."""
    from eagle3_synth.engines.sglang.args import is_cpu_engine

    sampled = sum(1 for row in rows if not row.greedy)
    if engine == "sglang" and is_cpu_engine(engine_args) and sampled:
        raise ConfigError(f"--engine sglang on a CPU serves speculative decoding greedy only ({sampled} of {len(rows)} rows "
                          "would be sampled): SGLang 0.5.23 has no CPU kernel for speculative sampling "
                          "(kernels/ops/speculative/verify_sampling.py); give --temperature 0")


def server_command(model: str, drafter: Path, speculative: dict, engine_args: dict, dtype: str | None) -> str:
    """The `launch_server` command of a server with the drafter (sglang-http's --url)."""
    argv = ["python", "-m", "sglang.launch_server", "--model-path", model, "--skip-tokenizer-init",
            "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(drafter)]
    if dtype:
        argv += ["--dtype", dtype]
    for name, value in speculative.items():
        if value is not None:
            argv += [f"--speculative-{name.replace('_', '-')}", str(value)]
    for key, value in engine_args.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    return f"SGLang server with the drafter (evaluate --engine sglang-http --url ...):\n  {shlex.join(argv)}"
