"""A config built into a Hub-layout folder through the builder: what `eagle3-synth build` runs.

The builder generates and assembles (its `download_and_prepare`); this installs the Parquet files
it wrote into `<folder>/<config>/` under fingerprinted names (`dataset.parquet.install_shards`),
with the run's info and the folder's README. It lives beside the builder because the library
never imports the builder (tests/test_layering.py): the command line calls it.
"""

from __future__ import annotations

import glob
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from eagle3_synth.dataset.folder import write_readme, write_run_info
from eagle3_synth.dataset.parquet import install_shards
from eagle3_synth.errors import ConfigError, Eagle3SynthError
from eagle3_synth.run.kill_points import kill_point
from eagle3_synth.run.progress import Coverage
from eagle3_synth.run.settings import GenerationSettings

from .eagle3_synth_builder import Eagle3Synth


def build_config(
    config: str,
    folder: str | Path,
    settings: GenerationSettings,
    *,
    partial: bool = False,
    echo: Callable[[str], None] = print,
    on_coverage: Callable[[Coverage], None] | None = None,
) -> tuple[int, list[Path]]:
    """Generate (if `settings` say so) and assemble `config` through the builder, then install its
    Parquet files into `<folder>/<config>/` with run_info.json, and rewrite README.md; return
    (rows, files). `settings.run_dir` is the run directory (any fsspec URL).

    The builder works in `.assemble-<config>`, a fixed name, so whatever a killed build left there
    is cleared by the next one instead of piling up in the folder that gets published.
    `on_coverage` receives what the run holds (its failed samples, for the command's exit status).
    """
    from datasets.exceptions import DatasetGenerationError

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    staging = folder / f".assemble-{config}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        builder = Eagle3Synth(config_name=config, cache_dir=str(staging / "cache"), echo=echo,
                                  partial=partial, **settings.to_kwargs())
        output_dir = str(staging / "out")
        try:
            with _datasets_progress_bars_off():  # a 100k-row tqdm bar is one huge line in batch logs
                builder.download_and_prepare(output_dir=output_dir, file_format="parquet")
        except DatasetGenerationError as exc:  # datasets wraps what assembly raised
            if isinstance(exc.__cause__, Eagle3SynthError):
                raise exc.__cause__ from None
            raise
        if on_coverage is not None and builder.coverage is not None:
            on_coverage(builder.coverage)
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
