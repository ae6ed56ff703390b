"""`eagle3-synth build CONFIG --out DIR`: generate what is missing, then write the config's dataset.

With --model it generates first (resuming any earlier run; nothing already journaled is generated
again). Without it, it only assembles: `build CONFIG --run-dir URL --out DIR` turns a run that
`eagle3-synth generate` filled, possibly as many shards on many nodes, into the dataset. It refuses
while samples have no result yet, naming the shards to finish, unless --partial is given.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from eagle3_synth.cli.options import EXIT_RESUMABLE, add_generation_arguments, default_run_dir, generation_settings
from eagle3_synth.dataset.folder import write_readme, write_run_info
from eagle3_synth.dataset.parquet import install_shards
from eagle3_synth.errors import ConfigError, Eagle3SynthError, RunIncomplete
from eagle3_synth.run.assemble import NoRowsToWrite, no_rows_message
from eagle3_synth.run.kill_points import kill_point
from eagle3_synth.run.settings import GenerationSettings


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
    settings = generation_settings(args, default_run_dir(args))
    try:
        rows, files = build_config(args.config, args.out, settings, partial=args.partial)
    except RunIncomplete:
        return EXIT_RESUMABLE  # its summary is printed; the run resumes with the same command
    except NoRowsToWrite as exc:
        raise ConfigError(no_rows_message(exc.run_dir, exc.config, exc.coverage, args.out)) from None
    print(f"{args.config}: wrote {rows} rows to {', '.join(str(f) for f in files)}")
    return 0


def builder_class() -> type:
    """The datasets builder, as installed (`builders/` of the repo, installed as eagle3_synth_builders)."""
    try:
        from eagle3_synth_builders import Eagle3Synth
    except ImportError as exc:
        raise ConfigError(f"the builder package eagle3_synth_builders is not installed ({exc}); reinstall "
                          "eagle3-synth (pip install -e . in a checkout)") from None
    return Eagle3Synth


def build_config(
    config: str,
    folder: str | Path,
    settings: GenerationSettings,
    *,
    partial: bool = False,
    echo: Callable[[str], None] = print,
) -> tuple[int, list[Path]]:
    """Generate (if `settings` say so) and assemble `config` through the builder, then install its
    Parquet files into `<folder>/<config>/` with run_info.json, and rewrite README.md; return
    (rows, files). `settings.run_dir` is the run directory (any fsspec URL).

    The builder works in `.assemble-<config>`, a fixed name, so whatever a killed build left there
    is cleared by the next one instead of piling up in the folder that gets published.
    """
    from datasets.exceptions import DatasetGenerationError

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    staging = folder / f".assemble-{config}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        builder = builder_class()(config_name=config, cache_dir=str(staging / "cache"), echo=echo,
                                  partial=partial, **settings.to_kwargs())
        output_dir = str(staging / "out")
        try:
            with _datasets_progress_bars_off():  # a 100k-row tqdm bar is one huge line in batch logs
                builder.download_and_prepare(output_dir=output_dir, file_format="parquet")
        except DatasetGenerationError as exc:  # datasets wraps what assembly raised
            if isinstance(exc.__cause__, Eagle3SynthError):
                raise exc.__cause__ from None
            raise
        sources = glob.glob(os.path.join(output_dir, "*-train*.parquet"))
        num_rows = builder.info.splits["train"].num_examples
        if not num_rows:  # a 0-row config would make the folder's README name data load_dataset cannot load
            raise ConfigError(f"{config}: the run directory {settings.run_dir} holds no row to write; nothing written")
        files = install_shards(sources, folder, config)
        kill_point("assemble.installed")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    write_run_info(folder, config, settings.run_dir)
    write_readme(folder, {config: num_rows})
    return num_rows, files


def assemble_config(run_dir: str, folder: str | Path, config: str) -> tuple[int, list[Path]]:
    """Assemble a config's generated run directory into the folder (no generation); (rows, files)."""
    return build_config(config, folder, GenerationSettings(run_dir=run_dir), echo=lambda line: None)


@contextmanager
def _datasets_progress_bars_off() -> Iterator[None]:
    from datasets.utils import logging as datasets_logging

    was_enabled = datasets_logging.is_progress_bar_enabled()
    datasets_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            datasets_logging.enable_progress_bar()
