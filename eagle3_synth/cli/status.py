"""`eagle3-synth status RUN_DIR`: where each shard of a launched run stands.

Shards done / running / failed / pending (done = the task finished AND the journal has a result for
every sample of the shard), samples per shard, throughput and ETA; for a failed shard, the log to
read. Read from the run directory (and, for Slurm, `squeue`): it needs neither datatrove nor a node.
Exit status 0 when every shard is done, 1 when one failed, 3 while shards are still running or pending.
"""

from __future__ import annotations

import argparse

from eagle3_synth.cluster.follow import current_status
from eagle3_synth.cluster.shard_status import FAILED_STATE, read_launch_record


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "status",
        help="shards of a launched run: done / running / failed, samples, throughput, ETA",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the run directory given to launch (--run-dir)")
    parser.add_argument("--tasks", type=int, metavar="N", help="the launch over N shards (default: the latest)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    record = read_launch_record(args.run_dir, args.tasks)
    status = current_status(record, args.run_dir)
    for line in status.lines():
        print(line)
    if status.all_done:
        return 0
    return 1 if status.named(FAILED_STATE) else 3
