"""`eagle3-synth status RUN_DIR`: where each shard of a run stands.

For a run `launch` started: shards done / running / failed / pending (done = the task finished AND
the journal has a result for every sample of the shard), samples per shard, throughput and ETA;
for a failed shard, the log to read. For shards started by hand (`generate --shard-index I
--num-shards N`, e.g. a Slurm array): done / running / stopped / pending, from the journal and the
shard locks (`--tasks N` where the count is not the latest one). Read from the run directory (and,
for Slurm, `squeue`): it needs neither datatrove nor a node.
"""

from __future__ import annotations

import argparse

from eagle3_synth.exit_status import DONE, PROBLEMS, STILL_RUNNING, help_line
from eagle3_synth.cluster.executors import current_status
from eagle3_synth.cluster.shard_status import FAILED_STATE, STOPPED, journal_record, read_launch_record


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "status",
        help="shards of a run (launched, or started by hand): done / running / failed, samples, throughput, ETA",
        description=__doc__ + help_line(DONE, PROBLEMS, STILL_RUNNING),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the run directory (launch's or generate's --run-dir)")
    parser.add_argument("--tasks", type=int, metavar="N", help="the shards of a count N (default: the latest)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    record = read_launch_record(args.run_dir, args.tasks) or journal_record(args.run_dir, args.tasks)
    status = current_status(record, args.run_dir)
    for line in status.lines():
        print(line)
    if status.all_done:
        return DONE
    return PROBLEMS if status.named(FAILED_STATE) or status.named(STOPPED) else STILL_RUNNING
