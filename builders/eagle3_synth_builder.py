"""`datasets` builder for eagle3-synth: configs B1-B8, features = the data contract.

The one entry point for generation and assembly, thin on purpose: the configs come from
`eagle3_synth.prompts.configs`, the settings and their checks from `eagle3_synth.run.settings`
(the config inherits them: every generating option of the command line is a config kwarg of the
same name), generation from `eagle3_synth.run.generate`, the rows from `eagle3_synth.run.assemble`.
Installed as `eagle3_synth_builders`; from a checkout's root `builders` imports too.

    builder = Eagle3Synth(config_name="B1_glaive", model="models/tiny", prompts="p.jsonl",
                          max_new_tokens=64, temperature=0.0, run_dir="runs/B1_glaive")
    # or the whole configuration, as `eagle3-synth build` hands it over:
    builder = Eagle3Synth(config=Eagle3SynthConfig(name="B1_glaive", model="models/tiny", ...))
    builder.download_and_prepare()          # generates what is missing, then writes the rows
    ds = builder.as_dataset(split="train")

Generation is the "download" and the run directory is its cache (`run_dir`, default a folder per
config under the builder's downloads dir): `_split_generators` runs resumable generation into it,
so a crash loses nothing and the same call resumes. Given no model it only assembles an existing
run directory. Each split's `gen_kwargs` carry sample-id ranges, which `num_proc` processes
share; `_generate_tables` yields Arrow tables of up to 1,000 rows in the contract's schema.
A run with `validation` (`prompts/held_out.py`) has a `validation` split beside `train`: the same
ranges, each split taking its own whole conversations (`run.assemble.iter_rows(split=...)`).
"""

from __future__ import annotations

import dataclasses
import posixpath
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import datasets
import pyarrow as pa
from datasets.builder import Key
from datasets.utils.py_utils import classproperty

from eagle3_synth.contract.row import FEATURES
from eagle3_synth.errors import ConfigError, RunIncomplete
from eagle3_synth.prompts.configs import CONFIGS, get_config, load_config_file
from eagle3_synth.run import generate as run_generate
from eagle3_synth.run.assemble import (NoRowsToWrite, check_run, held_out_conversations, iter_row_tables,
                                       sample_id_ranges)
from eagle3_synth.run.directory import RunDirectory
from eagle3_synth.run.progress import Coverage, RunSummary, counted
from eagle3_synth.run.settings import GenerationSettings

RUNS_DIR = "eagle3-synth-runs"  # under the builder's downloads dir: the default run directories


@dataclass
class Eagle3SynthConfig(datasets.BuilderConfig, GenerationSettings):
    """One config (B1-B8, or one of a `config_file`) with the run configuration: what `build` makes
    from its command line and hands the builder whole (`Eagle3Synth(config=...)`)."""

    # Assemble even though some samples have no result yet (they are left out).
    partial: bool = False

    def __post_init__(self) -> None:
        GenerationSettings.__post_init__(self)
        if self.config_file:  # its configs are registered before the name is looked up
            load_config_file(self.config_file)
        get_config(self.name)  # an unknown name, said as the command line says it
        datasets.BuilderConfig.__post_init__(self)


def registry_builder_configs() -> list[Eagle3SynthConfig]:
    """One BuilderConfig per registered config, read from the registry each time it is asked."""
    return [
        Eagle3SynthConfig(name=spec.name, description=spec.pattern)
        for spec in CONFIGS.values()
    ]


class Eagle3Synth(datasets.ArrowBasedBuilder):
    BUILDER_CONFIG_CLASS = Eagle3SynthConfig
    BUILDER_CONFIGS = registry_builder_configs()
    DEFAULT_CONFIG_NAME = "B1_glaive"

    config: Eagle3SynthConfig

    def __init__(self, *args: Any, config: Eagle3SynthConfig | None = None,
                 echo: Callable[[str], None] | None = print, **kwargs: Any):
        """`config`: the whole configuration (what `build` passes), else datasets' `config_name` and
        config kwargs; `echo` receives the end-of-generation summary and what the run holds (None: silent)."""
        self.given = config
        if config is not None:
            kwargs["config_name"] = config.name
        else:  # a --config-file config must be registered before datasets looks its name up
            if kwargs.get("config_file"):
                load_config_file(kwargs["config_file"])
            if kwargs.get("config_name") is not None:
                get_config(kwargs["config_name"])
        self.echo = echo or (lambda line: None)
        self.generation_summary: RunSummary | None = None
        self.coverage: Coverage | None = None
        super().__init__(*args, **kwargs)

    # datasets memoizes `builder_configs` from BUILDER_CONFIGS once per class; reading the registry
    # live instead lets configs loaded from a --config-file after import be built too.
    @classproperty
    @classmethod
    def builder_configs(cls) -> dict[str, Eagle3SynthConfig]:
        return {config.name: config for config in registry_builder_configs()}

    def _create_builder_config(self, config_name=None, custom_features=None, config_id=None, **config_kwargs):
        if self.given is not None:  # cached under an id of its settings, as datasets ids a config's kwargs
            return self.given, self.given.create_config_id(
                {f.name: getattr(self.given, f.name) for f in dataclasses.fields(GenerationSettings)})
        # datasets sets the kwargs on a copy of the registered config, past its __post_init__;
        # rebuilding it runs the checks on the settings actually given.
        config, config_id = super()._create_builder_config(config_name, custom_features, config_id, **config_kwargs)
        return dataclasses.replace(config), config_id

    def _info(self) -> datasets.DatasetInfo:
        spec = get_config(self.config.name)  # the token pattern it teaches, its source dataset
        return datasets.DatasetInfo(
            description=f"EAGLE-3 drafter training data: {spec.pattern} (prompts from {spec.source})",
            features=FEATURES,
        )

    @property
    def run_dir(self) -> str:
        """Where this config's results are journaled: `run_dir`, else a folder under the downloads dir."""
        return self.config.run_dir or posixpath.join(self._cache_downloaded_dir, RUNS_DIR, self.config.name)

    def _download_and_prepare(self, dl_manager, verification_mode, **prepare_split_kwargs):
        # Split sizes restored from an earlier build of this cache are no expectation for a run
        # that has grown since (resumed, shards finished, errors retried).
        self.info.splits = None
        super()._download_and_prepare(dl_manager, verification_mode, **prepare_split_kwargs)

    def _split_generators(self, dl_manager: datasets.DownloadManager) -> list[datasets.SplitGenerator]:
        name, run_dir = self.config.name, self.run_dir
        if self.config.generates:
            summary = run_generate.generate(*self.config.resolve(name, run_dir))
            self.generation_summary = summary
            for line in summary.lines():
                self.echo(line)
            if summary.remaining:
                raise RunIncomplete(f"{name}: {counted(summary.remaining, summary.counts.unit)} left in {run_dir} "
                                    "(journaled so far: the same call continues)", summary)
        elif not RunDirectory(run_dir).exists():
            raise ConfigError(f"{run_dir} holds no run yet: give --model (and --engine ...) to generate the config, "
                              "or --run-dir of a run that `eagle3-synth generate` filled")
        self._check_validation(run_dir)
        coverage = self.coverage = check_run(run_dir, name)
        for line in coverage.lines():
            self.echo(line)
        if coverage.rows == 0:
            raise NoRowsToWrite(run_dir, name, coverage)
        if not coverage.complete:
            if not self.config.partial:
                raise ConfigError(coverage.missing_message())
            self.echo(f"  --partial: building without the {len(coverage.missing)} samples that have no result yet")
        ranges = sample_id_ranges(coverage.sample_ids, stops=coverage.sample_id_stops)
        held_out = held_out_conversations(RunDirectory(run_dir))
        gen_kwargs = {"run_dir": run_dir, "ranges": ranges}
        if not len(held_out):  # train only: no empty validation split
            return [datasets.SplitGenerator(name=datasets.Split.TRAIN, gen_kwargs=gen_kwargs)]
        self.echo(f"  validation: {len(held_out)} conversations held out (every rollout and turn of each)")
        return [datasets.SplitGenerator(name=split, gen_kwargs={**gen_kwargs, "split": str(split)})
                for split in (datasets.Split.TRAIN, datasets.Split.VALIDATION)]

    def _check_validation(self, run_dir: str) -> None:
        """Assembling only, a `validation` given must be the one the run was made with (fingerprinted)."""
        given = self.config.validation
        if self.config.generates or given is None:
            return
        recorded = RunDirectory(run_dir).read_run_file()["fields"].get("validation")
        if recorded != given:
            raise ConfigError(f"--validation {given}: the run directory {run_dir} was generated with validation "
                              f"{recorded} (it is part of the run's fingerprint); build without --validation or "
                              "with the run's own")

    def _generate_tables(self, run_dir: str, ranges: list[tuple[int, int]], split: str | None = None
                         ) -> Iterator[tuple[Key, pa.Table]]:
        for shard, batch, table in iter_row_tables(run_dir, ranges, split=split):
            yield Key(shard, batch), table
