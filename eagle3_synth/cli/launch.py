"""`eagle3-synth launch CONFIG --run-dir URL --executor slurm|ray|local --tasks N`: many nodes.

Runs the config as N shards, one per task of a scheduler (a Slurm job array, a Ray cluster, or
local processes), through datatrove's executors (pip install 'eagle3-synth[cluster]', and [ray]
for Ray). Each task is `eagle3-synth generate --num-shards N --shard-index RANK` into the shared
run directory. A shard is done when its task finished AND the journal has a result for every one
of its samples; the same command again runs only the unfinished shards, which resume from the journal.
With --wait it follows the tasks, prints each shard's progress, exits 1 naming the failed shards
and the log to read, and, with --out, assembles the dataset once all are done (as build --run-dir).
"""

from __future__ import annotations

import argparse
import sys

from eagle3_synth.cli.options import add_generation_arguments, generation_settings, parse_key_value
from eagle3_synth.dataset.folder import check_out_folder
from eagle3_synth.errors import ConfigError
from eagle3_synth.exit_status import DONE, PROBLEMS
from eagle3_synth.run.preflight import check_output_folder
from eagle3_synth.run.progress import counted


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "launch",
        help="run a config as N shards on Slurm, Ray or local processes; --wait follows and assembles",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_generation_arguments(parser)
    from eagle3_synth.cluster.executors import EXECUTORS, ExecutorSettings as E

    tasks = parser.add_argument_group("tasks (datatrove's executors)")
    tasks.add_argument("--executor", choices=EXECUTORS, default=E.executor, help=f"default {E.executor}")
    tasks.add_argument("--tasks", type=int, required=True, metavar="N", help="shards, one task each (one node each)")
    # dest task_workers: `workers` is the run configuration's prompt-preparation processes (>= 1), which
    # `generation_settings` reads from the parsed arguments; datatrove's -1 means "all at once".
    tasks.add_argument("--workers", dest="task_workers", type=int, default=E.workers, metavar="N",
                       help="tasks running at once (default: all)")
    tasks.add_argument("--nodes-per-task", type=int, default=E.nodes_per_task, metavar="N",
                       help="nodes per task, for a model that spans nodes (see docs/guides/clusters.md)")
    tasks.add_argument("--gpus-per-task", type=int, default=E.gpus_per_task, metavar="N",
                       help=f"GPUs per node of a task (default {E.gpus_per_task}: a GPU node's all; 0 on CPU nodes)")
    tasks.add_argument("--cpus-per-task", type=int, default=E.cpus_per_task, metavar="N",
                       help=f"CPUs of a task (default {E.cpus_per_task})")
    tasks.add_argument("--mem-per-cpu-gb", type=float, default=E.mem_per_cpu_gb, metavar="GB",
                       help=f"memory per CPU (default {E.mem_per_cpu_gb:g})")
    slurm = parser.add_argument_group("Slurm")
    slurm.add_argument("--partition", help="partition of the GPU nodes (required for --executor slurm)")
    slurm.add_argument("--time", default=E.time, help=f"time limit per task (default {E.time}); a task cut by it "
                       "is unfinished, and the next launch resumes it")
    slurm.add_argument("--qos", help="quality of service, if your cluster has them")
    slurm.add_argument("--exclusive", action=argparse.BooleanOptionalAction, default=E.exclusive,
                       help="a task owns its node(s) (default: yes)")
    slurm.add_argument("--sbatch-arg", action="append", default=[], metavar="KEY=VALUE",
                       help="another #SBATCH line, e.g. account=proj or gres=gpu:8 (repeatable)")
    slurm.add_argument("--job-name", default=E.job_name)
    slurm.add_argument("--venv", metavar="ACTIVATE", help="the bin/activate the nodes source (where eagle3-synth "
                       "and datatrove are installed), if not already on PATH there")
    ray = parser.add_argument_group("Ray")
    ray.add_argument("--ray-address", help="the Ray cluster (default: RAY_ADDRESS, else a local one)")
    ray.add_argument("--ray-remote-kwarg", action="append", default=[], metavar="KEY=VALUE",
                     help='option of each task\'s Ray actor, e.g. resources={"H200": 1} (repeatable)')
    parser.add_argument("--wait", action="store_true", help="follow the tasks until they end; assemble with --out")
    parser.add_argument("--out", help="with --wait: the dataset folder to assemble the config into when all shards "
                        "are done (a new or empty folder, or one eagle3-synth built)")
    parser.add_argument("--overwrite", action="store_true",
                        help="with --out: replace CONFIG there when its rows came from another run directory")
    parser.add_argument("--poll-seconds", type=float, default=30.0, help="--wait with Slurm: seconds between looks")
    parser.set_defaults(run=run)


def executor_settings(args: argparse.Namespace):  # noqa: ANN201 - cluster.executors.ExecutorSettings
    from eagle3_synth.cluster.executors import ExecutorSettings

    return ExecutorSettings(
        executor=args.executor, tasks=args.tasks, workers=args.task_workers, nodes_per_task=args.nodes_per_task,
        gpus_per_task=args.gpus_per_task, cpus_per_task=args.cpus_per_task, mem_per_cpu_gb=args.mem_per_cpu_gb,
        partition=args.partition, time=args.time, qos=args.qos, exclusive=args.exclusive,
        sbatch_args=dict(parse_key_value(item, "--sbatch-arg") for item in args.sbatch_arg),
        job_name=args.job_name, venv=args.venv, ray_address=args.ray_address,
        ray_remote_kwargs=dict(parse_key_value(item, "--ray-remote-kwarg") for item in args.ray_remote_kwarg),
    )


def run(args: argparse.Namespace) -> int:
    if not args.run_dir:
        raise ConfigError("launch needs --run-dir URL: the run directory every task journals into (shared by all nodes)")
    if args.out and not args.wait:
        raise ConfigError("--out assembles once every shard is done, which only --wait sees; add --wait, or run "
                          "eagle3-synth build CONFIG --run-dir URL --out DIR when status says all are done")
    if args.overwrite and not args.out:
        raise ConfigError("--overwrite replaces a config in --out; without --out nothing is assembled")
    if args.out:
        check_output_folder(args.out, "--out")
        check_out_folder(args.out, args.config, args.run_dir, overwrite=args.overwrite)
    try:
        from eagle3_synth.cluster.executors import failure_message, follow, portable, submit
    except ImportError as exc:
        raise ConfigError(f"launch needs datatrove ({exc}): pip install 'eagle3-synth[cluster]' "
                          "('eagle3-synth[ray]' for --executor ray)") from None
    settings = portable(generation_settings(args, args.run_dir))
    if not settings.generates:
        raise ConfigError("launch generates: give --model (or --tokenizer with --engine replay)")
    settings.resolve(args.config)  # every option checked here, before any task is submitted
    record = submit(args.config, settings, executor_settings(args))
    if not args.wait:
        job = record["submissions"][-1].get("job_id")
        print(f"{args.config}: {counted(args.tasks, 'shards')} launched via {args.executor}"
              + (f" (Slurm job {job})" if job else "") + f"; eagle3-synth status {settings.run_dir} shows them")
        return DONE
    status = follow(record, settings.run_dir, poll_seconds=args.poll_seconds)
    if not status.all_done:
        print(f"eagle3-synth launch: error: {failure_message(status, record)}", file=sys.stderr)
        return PROBLEMS
    if args.out:
        from eagle3_synth.cli.build import folder_builds

        builds = folder_builds()
        assemble = builds.Eagle3SynthConfig(name=args.config, run_dir=settings.run_dir)
        rows, files = builds.build_config(assemble, args.out, overwrite=args.overwrite)
        print(f"{args.config}: wrote {counted(rows, 'rows')} to {', '.join(str(f) for f in files)}")
    return DONE
