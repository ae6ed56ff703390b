"""A config built into a Hub-layout folder through the builder: what `eagle3-synth build` runs.

The builder generates and assembles (its `download_and_prepare`); this installs the Parquet files
it wrote into `<folder>/<config>/` under fingerprinted names (`dataset.folder.install_config`),
with the run's info and the folder's README. It lives beside the builder because the library
never imports the builder (tests/test_layering.py): the command line calls it.

Builds run side by side safely: several configs into one folder at once (their installs and
README rewrites take turns under the folder's lock), and two builds of one config (the second
generator of a shard is refused by the run directory's lock, `run/lock.py`, before it touches
anything; each build stages in a folder of its own).
"""

from __future__ import annotations

import glob
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from eagle3_synth.dataset.folder import STAGING_PREFIX, check_out_folder, install_config
from eagle3_synth.errors import ConfigError, Eagle3SynthError
from eagle3_synth.run.progress import Coverage
from eagle3_synth.run.directory import RunDirectory
from eagle3_synth.run.lock import ALIVE, DEAD, Holder, holder_state

from .eagle3_synth_builder import Eagle3Synth, Eagle3SynthConfig

OWNER_FILE = ".owner.json"  # in a staging folder: the build it belongs to (a `run.lock.Holder`)


def build_config(
    settings: Eagle3SynthConfig,
    folder: str | Path,
    *,
    overwrite: bool = False,
    echo: Callable[[str], None] = print,
    on_coverage: Callable[[Coverage], None] | None = None,
) -> tuple[int, list[Path]]:
    """Generate (if `settings` say so) and assemble its config through the builder, then install its
    Parquet files into `<folder>/<config>/` with run_info.json, and rewrite README.md; return
    (rows, files), the rows of both splits with `--validation`. `settings.run_dir` is the run
    directory (any fsspec URL).

    The folder holds only what eagle3-synth writes there, and `config` in it is replaced only by a
    build from the run directory its rows came from, or with `overwrite` (`check_out_folder`: here
    before anything is generated or made, again under the folder's lock before installing).
    Assembling only (no model), a run that a generator is still writing is refused unless
    `settings.partial` (`_check_no_generator`).
    `on_coverage` receives what the run holds (its failed samples, for the command's exit status).
    """
    from datasets.exceptions import DatasetGenerationError

    config = settings.name

    folder = Path(folder)
    check_out_folder(folder, config, settings.run_dir, overwrite=overwrite)
    folder.mkdir(parents=True, exist_ok=True)
    if not settings.generates and settings.run_dir:
        _check_no_generator(settings.run_dir, config, settings.partial, echo)
    with _staging(folder, config) as staging:
        builder = Eagle3Synth(config=settings, cache_dir=str(staging / "cache"), echo=echo)
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
        validation = glob.glob(os.path.join(output_dir, "*-validation*.parquet"))
        num_rows = builder.info.splits["train"].num_examples
        if not num_rows:  # a 0-row config would make the folder's README name data load_dataset cannot load
            raise ConfigError(f"{config}: the run directory {settings.run_dir} holds no row to write; nothing written")
        held_out = builder.info.splits["validation"].num_examples if "validation" in builder.info.splits else 0
        if validation and not held_out:
            # An empty split in the card breaks every load_dataset of the config, train's included
            # (datasets: 'Instruction "validation" corresponds to no data!'): left out, and said.
            echo(f"{config}: no validation row yet (every held-out conversation failed or is not generated): "
                 "the validation split is left out; generate the rest (--retry-errors) and build again")
            validation = []
        files = install_config(folder, config, sources, settings.run_dir or builder.run_dir, num_rows,
                               on_wait=lambda line: _say_now(echo, f"{config}: {line}"), validation=validation,
                               overwrite=overwrite)
    return num_rows + held_out, files


def _say_now(echo: Callable[[str], None], line: str) -> None:
    """A line about waiting, seen while it waits (a batch log's stdout is block-buffered)."""
    echo(line)
    sys.stdout.flush()


def assemble_config(run_dir: str, folder: str | Path, config: str) -> tuple[int, list[Path]]:
    """Assemble a config's generated run directory into the folder (no generation); (rows, files)."""
    return build_config(Eagle3SynthConfig(name=config, run_dir=run_dir), folder, echo=lambda line: None)


def _check_no_generator(run_dir: str, config: str, partial: bool, echo: Callable[[str], None]) -> None:
    """Assembly takes no lock, but does not race a generator blindly: while one holds a shard's lock
    the run is still growing, so a dataset built now would be out of date the moment it is written.
    Refused, naming the generators; `partial` builds from what is journaled now (a consistent
    earlier state: the journal is append-only) and says so."""
    generators = RunDirectory(run_dir).generators()
    if not generators:
        return
    named = "; ".join(f"{shard} by {holder}" + ("" if state == ALIVE else " (another host: cannot check)")
                      for shard, holder, state in generators)
    if not partial:
        raise ConfigError(f"{config}: {run_dir} is still being generated ({named}); build when it is done, or "
                          "--partial to build from what is journaled now")
    echo(f"  --partial: {run_dir} is still being generated ({named}); building from what is journaled now")


@contextmanager
def _staging(folder: Path, config: str) -> Iterator[Path]:
    """A staging folder of this build's own (`.assemble-<config>-<random>`, its owner recorded in
    it), removed on the way out. Stale ones of builds that died on this host are cleared first;
    one whose owner lives, or cannot be checked (another host), is left alone."""
    for stale in folder.glob(STAGING_PREFIX + "*"):
        try:
            owner = Holder.from_bytes((stale / OWNER_FILE).read_bytes())
        except OSError:
            continue  # being created or removed right now, or not one of ours
        if owner is not None and holder_state(owner) == DEAD:
            shutil.rmtree(stale, ignore_errors=True)
    staging = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{config}-", dir=folder))
    try:
        (staging / OWNER_FILE).write_bytes(Holder.me().to_bytes())
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)


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
