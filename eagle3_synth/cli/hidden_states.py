"""`eagle3-synth hidden-states DIR CONFIG... --format speculators --prepared PREP | --format specforge --out OUT`.

The target model's hidden states for the rows `export --format ids` writes (same --train-on,
--max-length, --overlong), computed with transformers on any device (default) or by SGLang
(--engine sglang in this process, --engine sglang-http against servers started with the flags
--dry-run prints: one prefill per row, the states written by SGLang's forward hooks into
--states-dir), and written as each trainer reads them:

  speculators  PREP/hidden_states/hs_<i>.safetensors, i the row of the dataset speculators'
               `prepare-data --output PREP` saved from our export (it shuffles; rows are matched by
               their token ids): token_ids [T], hidden_states [T, n_aux+1, H] (the --layers, then
               the final state before the norm). Then: speculators train --data-path PREP
               --target-layer-ids <the layers> --on-missing raise ...
  specforge    OUT/<config>-<sample_id>.ckpt: input_ids, loss_mask, hidden_state [1, T, H] (after
               the norm), aux_hidden_state [1, T, 3H], bf16. Then: specforge train --config
               run.yaml data.hidden_states_path=OUT (--split validation:
               data.eval_hidden_states_path=OUT) (a model with no index or a tied head: also
               model.target_model_path=OUT/target_model, written here).

--layers are vLLM's ids: 0 = embeddings, i = the input of decoder layer i, n = the last layer's
output before the final norm; the default is the trainers' own ([2, n//2, n-3]). It prints the
rows, tokens and bytes first (--dry-run: only that); a rerun skips finished files and redoes torn
ones; --num-shards/--shard-index split the files between processes. --check then compares
lm_head(norm(stored state)) with the model's own logits (and, on greedy data, its argmax with the
next output id).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from eagle3_synth.errors import ConfigError
from eagle3_synth.exit_status import DONE, PROBLEMS
from eagle3_synth.run.shards import Shard
from eagle3_synth.train.export import OVERLONG, TRAIN_ON
from eagle3_synth.train.hidden_states.layouts import DRAFTERS, LAYOUTS
from eagle3_synth.train.hidden_states.job import (DTYPES, ENGINES, STAGING, STATES_VIA, HiddenStatesOptions, run_job,
                                                  target_model)
from eagle3_synth.cli.options import add_source_argument, open_from_args, resolve_configs, parse_key_value


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("hidden-states", help="the target's hidden states in speculators' or SpecForge's layout",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_source_argument(parser)
    parser.add_argument("configs", metavar="CONFIG", nargs="+", help="config names, e.g. B1_glaive (several: the rows of "
                        "all, as prepare-data given each one's export)")
    parser.add_argument("--format", required=True, choices=sorted(LAYOUTS))
    parser.add_argument("--prepared", metavar="PREP", help="speculators: the folder `speculators prepare-data` wrote")
    parser.add_argument("--out", metavar="OUT", help="specforge: the folder the .ckpt files go to")
    parser.add_argument("--model", help="target model folder (default: the one recorded with the data)")
    parser.add_argument("--drafter", choices=DRAFTERS, default="eagle3", help="whose default --layers (default eagle3)")
    parser.add_argument("--layers", type=int, nargs="+", metavar="ID", help="vLLM layer ids of the aux states")
    rows = parser.add_argument_group("rows (as `export --format ids`)")
    rows.add_argument("--train-on", choices=TRAIN_ON, default="output", help="loss mask: every output token or the response")
    rows.add_argument("--max-length", type=int, metavar="L", help="rows over L tokens are dropped (see --overlong)")
    rows.add_argument("--overlong", choices=OVERLONG, default="drop", help="--max-length: drop (default) or truncate")
    rows.add_argument("--min-loss-tokens", type=int, default=0, metavar="N",
                      help="leave out rows with fewer than N tokens under the loss mask (block drafters: see docs/data.md)")
    compute = parser.add_argument_group("compute")
    compute.add_argument("--engine", choices=ENGINES, default="transformers",
                         help="who computes the states: transformers (default, here), sglang (SGLang's Engine in this "
                         "process) or sglang-http (servers started with the flags --dry-run prints)")
    compute.add_argument("--url", action="append", default=[], help="sglang-http: a server's URL (repeatable)")
    compute.add_argument("--engine-arg", action="append", default=[], metavar="KEY=VALUE",
                         help="sglang: an SGLang server argument (repeatable), e.g. tp_size=8 or device=cpu")
    compute.add_argument("--states-via", choices=STATES_VIA, default="files",
                         help="sglang: files SGLang's hook writes into --states-dir (default), or response (the states "
                         "as lists in SGLang's result, several times slower); sglang-http: the servers' --forward-hooks "
                         "decide, these shape the flags --dry-run prints (files: this machine must see the folder)")
    compute.add_argument("--states-dir", type=Path, metavar="DIR",
                         help=f"where SGLang writes each row's states (default: {STAGING} in the output folder)")
    compute.add_argument("--max-in-flight", type=int, default=HiddenStatesOptions.max_in_flight, metavar="N",
                         help="sglang engines: rows in flight at once (default %(default)s)")
    compute.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:1 ...")
    compute.add_argument("--device-map", metavar="MAP", help="e.g. auto: spread a model larger than one GPU (accelerate)")
    compute.add_argument("--dtype", choices=DTYPES, default="bfloat16", help="model and stored dtype (default bfloat16; "
                         "specforge always stores bf16)")
    compute.add_argument("--batch-tokens", type=int, default=HiddenStatesOptions.batch_tokens, metavar="N",
                         help="padded tokens per forward pass (rows batched by length)")
    compute.add_argument("--trust-remote-code", action="store_true", help="allow the model's own code")
    run_group = parser.add_argument_group("run")
    run_group.add_argument("--dry-run", action="store_true", help="print the rows, tokens and bytes, write nothing")
    run_group.add_argument("--max-bytes", type=int, metavar="B", help="refuse a run that would write more than B bytes")
    run_group.add_argument("--num-shards", type=int, default=1, metavar="N", help="split the files into N shards")
    run_group.add_argument("--shard-index", type=int, default=0, metavar="I", help="which shard this process writes")
    run_group.add_argument("--check", action="store_true", help="then check every file of this shard against the model")
    run_group.add_argument("--no-progress", action="store_true", help="no progress bar (it is off when stderr is no TTY)")
    parser.set_defaults(run=run)


def _folder(args: argparse.Namespace) -> Path:
    wanted, other = ("prepared", "out") if args.format == "speculators" else ("out", "prepared")
    if getattr(args, other):
        raise ConfigError(f"--{other} does not apply to --format {args.format}; pass --{wanted}")
    if not getattr(args, wanted):
        raise ConfigError(f"--format {args.format} needs --{wanted}")
    return Path(getattr(args, wanted))


def run(args: argparse.Namespace) -> int:
    source = open_from_args(args)
    configs = tuple(resolve_configs(source, args.configs))
    model = target_model(source, configs, args.model)
    options = HiddenStatesOptions(
        configs=configs, fmt=args.format, folder=_folder(args), model=model, drafter=args.drafter,
        layers=tuple(args.layers) if args.layers else None, train_on=args.train_on,
        max_length=args.max_length, overlong=args.overlong, min_loss_tokens=args.min_loss_tokens, device=args.device,
        device_map=args.device_map, dtype=args.dtype, batch_tokens=args.batch_tokens,
        shard=Shard(args.shard_index, args.num_shards), trust_remote_code=args.trust_remote_code, split=args.split,
        engine=args.engine, urls=tuple(args.url), max_in_flight=args.max_in_flight, states_via=args.states_via,
        states_dir=args.states_dir,
        engine_args=dict(parse_key_value(item, "--engine-arg") for item in args.engine_arg))
    ok = run_job(source, options, dry_run=args.dry_run, max_bytes=args.max_bytes, check=args.check,
                 progress=False if args.no_progress else None)
    return DONE if ok else PROBLEMS
