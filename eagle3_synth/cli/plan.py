"""`eagle3-synth plan --hours H RUN_DIR|DIR...`: caps per config that fit H hours of generation.

Reads what the runs measured so far -- each config's mean output tokens per rollout and the
engine's output tokens per second -- and proposes a `--limit` per config that keeps the configs'
shares (their caps) and fits the budget (`run/budget.py`). Give the run directories (or a dataset
folder: its `.runs/*`) of a pilot: e.g. `build CONFIG --limit 200` for each config first.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from eagle3_synth.errors import ConfigError
from eagle3_synth.run.directory import RUN_FILE, RUNS_DIR
from eagle3_synth.run.budget import plan_budget, measure


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("plan", help="propose --limit per config to fit a time budget, from measured runs",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", metavar="RUN_DIR", nargs="+",
                        help="run directories (or dataset folders: their .runs/* are read)")
    parser.add_argument("--hours", type=float, required=True, help="the budget, in hours of generation per node")
    parser.add_argument("--nodes", type=int, default=1, help="nodes generating at once, one engine each (default 1)")
    parser.add_argument("--tokens-per-second", type=float, metavar="X",
                        help="an engine's output tokens/s (default: measured from the runs' sessions)")
    parser.set_defaults(run=run)


def run_dirs(paths: list[str]) -> list[str]:
    """The run directories named, a dataset folder standing for every run under its `.runs/`."""
    found = []
    for path in paths:
        folder = Path(path)
        if (folder / RUN_FILE).is_file() or "://" in path:
            found.append(path)
        elif (folder / RUNS_DIR).is_dir():
            found += sorted(str(p) for p in (folder / RUNS_DIR).iterdir() if (p / RUN_FILE).is_file())
        else:
            raise ConfigError(f"{path}: neither a run directory (no {RUN_FILE}) nor a dataset folder (no {RUNS_DIR}/)")
    return found


def run(args: argparse.Namespace) -> int:
    plan = plan_budget([measure(path) for path in run_dirs(args.runs)], args.hours, nodes=args.nodes,
                     tokens_per_second=args.tokens_per_second)
    for line in plan.lines():
        print(line)
    return 0
