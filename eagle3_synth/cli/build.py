"""`eagle3-synth build CONFIG --out DIR`: generate what is missing, then write the config's dataset.

With --model it generates first (resuming any earlier run; nothing already journaled is generated
again). Without it, it only assembles: `build CONFIG --run-dir URL --out DIR` turns a run that
`eagle3-synth generate` filled, possibly as many shards on many nodes, into the dataset. It refuses
while samples have no result yet, naming the shards to finish, unless --partial is given.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import glob
import os
import shutil

from eagle3_synth.dataset.folder import (_datasets_progress_bars_off, install_parquet_files, write_readme,
                                         write_run_info)
from eagle3_synth.errors import ConfigError
from eagle3_synth.run.directory import RunDirectory
from eagle3_synth.run.assemble import check_run, no_rows_message
from eagle3_synth.run.generate import generate
from eagle3_synth.cli.options import add_generation_arguments, default_run_dir, report_generation, run_options, run_spec


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "build",
        help="generate a config (resuming any earlier run) or assemble a generated run, into a Hub-layout folder",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_generation_arguments(parser)
    parser.add_argument("--out", required=True, help="dataset folder: OUT/CONFIG/train-*.parquet + OUT/README.md")
    parser.add_argument("--partial", action="store_true",
                        help="assemble even though some samples have no result yet (they are left out)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    run_dir = default_run_dir(args)
    if args.model or args.tokenizer or args.replay:
        status = report_generation(generate(run_spec(args), run_options(args, run_dir)))
        if status:
            return status
    elif not RunDirectory(run_dir).exists():
        raise ConfigError(f"{run_dir} holds no run yet: give --model (and --engine ...) to generate the config, "
                              "or --run-dir of a run that `eagle3-synth generate` filled")
    coverage = check_run(run_dir, args.config)
    for line in coverage.lines():
        print(line)
    if coverage.rows == 0:
        raise ConfigError(no_rows_message(run_dir, args.config, coverage, args.out))
    if not coverage.complete:
        if not args.partial:
            raise ConfigError(coverage.missing_message())
        print(f"  --partial: building without the {len(coverage.missing)} samples that have no result yet")
    rows, files = assemble_config(run_dir, args.out, args.config)
    print(f"{args.config}: wrote {rows} rows to {', '.join(str(f) for f in files)}")
    return 0


def assemble_config(run_dir: str, folder: str | Path, config: str) -> tuple[int, list[Path]]:
    """Write a config's rows from its run directory (any fsspec URL) into the folder; return (rows, files).

    Staged in `.assemble-<config>`, a fixed name, so whatever a killed assembly left there is
    cleared by the next one instead of piling up in the folder that gets published.
    """
    from builders import Eagle3Synth

    from eagle3_synth.run.directory import RunDirectory

    from eagle3_synth.run.kill_points import kill_point

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    staging = folder / f".assemble-{config}"
    shutil.rmtree(staging, ignore_errors=True)
    with RunDirectory(run_dir).local_copy() as run:
        try:
            builder = Eagle3Synth(config_name=config, run_dir=run.url, cache_dir=str(staging / "cache"))
            output_dir = str(staging / "out")
            with _datasets_progress_bars_off():  # a 100k-row tqdm bar is one huge line in batch logs
                builder.download_and_prepare(output_dir=output_dir, file_format="parquet")
            sources = glob.glob(os.path.join(output_dir, "*-train*.parquet"))
            num_rows = builder.info.splits["train"].num_examples
            if not num_rows:  # a 0-row config would make the folder's README name data load_dataset cannot load
                raise ConfigError(f"{config}: the run directory {run_dir} holds no row to write; nothing written")
            files = install_parquet_files(sources, folder, config)
            kill_point("assemble.installed")
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        write_run_info(folder, config, run.url)
    write_readme(folder, {config: num_rows})
    return num_rows, files
