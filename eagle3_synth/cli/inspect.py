"""`eagle3-synth inspect DIR CONFIG`: decode samples with their boundaries marked.

Pick samples with `--sample ID...`, `--random K`, `--shortest K`, `--longest K` and/or
`--where 'think_end == -1'` (which alone shows the first `--first K` matches), or whole
conversations turn by turn with `--conversation ID...` (every rollout of each, `--sample-index`
for one). Regions are coloured
on a terminal and tagged `[reasoning 0:41]...[/reasoning]` everywhere, so output can be grepped.
"""

from __future__ import annotations

import argparse
import os
import sys

from eagle3_synth.errors import ConfigError
from eagle3_synth.view import render_conversation, render_row, parse_where, select_samples
from eagle3_synth.cli.options import TokenizerCache, add_source_argument, add_tokenizer_arguments, open_config

DEFAULT_FIRST = 5


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("inspect", help="decode samples with reasoning, response, tool calls and stop marked",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_source_argument(parser)
    parser.add_argument("config", metavar="CONFIG", help="config name, e.g. B1_glaive")
    pick = parser.add_argument_group("which samples (combined; default: the first one)")
    pick.add_argument("--sample", type=int, nargs="+", default=[], metavar="ID", help="sample ids")
    pick.add_argument("--random", type=int, metavar="K", help="K random samples (see --seed)")
    pick.add_argument("--shortest", type=int, metavar="K", help="the K samples with the fewest output tokens")
    pick.add_argument("--longest", type=int, metavar="K", help="the K samples with the most output tokens")
    pick.add_argument("--where", metavar="EXPR",
                      help="only rows matching, e.g. 'think_end == -1', 'len(tool_calls) > 1 and finish_reason == \"stop\"'")
    pick.add_argument("--first", type=int, metavar="K", help=f"the first K samples (default with --where alone: {DEFAULT_FIRST})")
    pick.add_argument("--seed", type=int, default=0, help="seed for --random (default 0)")
    pick.add_argument("--conversation", type=int, nargs="+", default=[], metavar="ID",
                      help="whole conversations (conversation_id), turn by turn: each turn's new source messages "
                      "and its output")
    pick.add_argument("--sample-index", type=int, metavar="S", help="--conversation: only this rollout of each")
    show = parser.add_argument_group("display")
    show.add_argument("--ids", action="store_true", help="show each token's id beside its text")
    show.add_argument("--no-messages", action="store_true", help="do not print the prompt messages")
    show.add_argument("--colour", "--color", choices=["auto", "always", "never"], default="auto",
                      help="colour regions (auto: on a terminal, unless NO_COLOR is set)")
    add_tokenizer_arguments(parser)
    parser.set_defaults(run=run)


def use_colour(choice: str) -> bool:
    """--colour: always, never, or auto (on a terminal, unless NO_COLOR is set)."""
    return choice == "always" or (choice == "auto" and sys.stdout.isatty() and not os.environ.get("NO_COLOR"))


def show_conversations(args: argparse.Namespace, source, config: str) -> int:  # noqa: ANN001 - a RowSource
    """`--conversation`: every turn of each rollout asked for, in order."""
    table = source.table(config, ["sample_id", "conversation_id", "sample_index"])
    keys = list(zip(*(table.column(name).to_pylist() for name in ("sample_id", "conversation_id", "sample_index"))))
    rollouts_of: dict[int, set[int]] = {}
    for _, conversation, index in keys:
        rollouts_of.setdefault(conversation, set()).add(index)
    missing = [conversation for conversation in args.conversation if conversation not in rollouts_of]
    if missing:
        raise ConfigError(f"{source.location} {config}: no conversation_id {', '.join(map(str, missing))}")
    for conversation in args.conversation:
        if args.sample_index not in (None, *rollouts_of[conversation]):
            rollouts = ", ".join(map(str, sorted(rollouts_of[conversation])))
            raise ConfigError(f"{source.location} {config}: conversation_id {conversation} has no sample_index "
                              f"{args.sample_index} (its rollouts: {rollouts})")
    wanted = [(sample_id, (conversation, index)) for sample_id, conversation, index in keys
              if conversation in args.conversation and args.sample_index in (None, index)]
    print(f"{config} in {source.location} ({source.kind}): conversations {', '.join(map(str, args.conversation))}, "
          f"{len(wanted)} turns")
    tokenizer, _ = TokenizerCache(args).get(source.provenance(config))
    colour = use_colour(args.colour)
    rollouts: dict[tuple[int, int], list[dict]] = {}
    for row in source.rows_by_id(config, [sample_id for sample_id, _ in wanted]):
        rollouts.setdefault((row["conversation_id"], row["sample_index"]), []).append(row)
    for key in sorted(rollouts):
        print()
        print(render_conversation(rollouts[key], tokenizer, colour=colour, show_ids=args.ids))
    return 0


def check_picks(args: argparse.Namespace) -> None:
    """--conversation shows whole conversations, the other picks samples: neither is ignored for the other."""
    picks = {"--sample": args.sample, "--random": args.random, "--shortest": args.shortest, "--longest": args.longest,
             "--where": args.where, "--first": args.first}
    given = [option for option, value in picks.items() if value not in (None, [])]
    if args.conversation and given:
        raise ConfigError(f"--conversation shows whole conversations; it does not combine with {', '.join(given)}")
    if args.sample_index is not None and not args.conversation:
        raise ConfigError("--sample-index picks one rollout of each --conversation; give --conversation ID")


def run(args: argparse.Namespace) -> int:
    check_picks(args)
    source, config = open_config(args)
    if args.conversation:
        return show_conversations(args, source, config)
    where = parse_where(args.where) if args.where else None
    picks = (args.random, args.shortest, args.longest, args.first)
    first = args.first if args.first else (DEFAULT_FIRST if where and not any(picks) else None)
    if not args.sample and not where and not any(picks):
        first = 1
    ids = list(args.sample)
    note = ""
    if first or any(picks):
        columns = {"sample_id", "completion_tokens", *(where.columns if where else ())}
        selection = select_samples(source.table(config, sorted(columns)), where=where, random=args.random,
                                   shortest=args.shortest, longest=args.longest, first=first, seed=args.seed)
        ids += [i for i in selection.sample_ids if i not in ids]
        note = (f", {selection.matched} of {selection.total} rows match {where.text!r}" if where
                else f", {selection.total} rows")
    rows = source.rows_by_id(config, ids) if ids else []  # an unknown id is an error before anything is printed
    print(f"{config} in {source.location} ({source.kind}){note}; showing {len(ids)}")
    if not ids:
        return 0
    tokenizer, _ = TokenizerCache(args).get(source.provenance(config))
    colour = use_colour(args.colour)
    for row in rows:
        print()
        print(render_row(row, tokenizer, colour=colour, show_ids=args.ids, show_messages=not args.no_messages))
    return 0
