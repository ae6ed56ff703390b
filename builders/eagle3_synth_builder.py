"""`datasets` builder for eagle3-synth: configs B1-B8, features = the data contract.

Thin on purpose: the configs come from `eagle3_synth.configs`, the features from
`eagle3_synth.records`, the rows from `eagle3_synth.pipeline.iter_rows` over a run directory.
Use it as a class (datasets >= 4 runs no loading scripts):

    builder = Eagle3Synth(config_name="B1_glaive", run_dir="runs/B1_glaive", cache_dir=tmp)
    builder.download_and_prepare(file_format="parquet")
"""

from __future__ import annotations

from dataclasses import dataclass

import datasets
from datasets.utils.py_utils import classproperty

from eagle3_synth.prompts.configs import CONFIGS
from eagle3_synth.errors import ConfigError
from eagle3_synth.run.assemble import iter_rows
from eagle3_synth.contract.row import FEATURES


@dataclass
class Eagle3SynthConfig(datasets.BuilderConfig):
    """One config B1-B8; `run_dir` says where its generated results are."""

    source: str = ""
    pattern: str = ""
    run_dir: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.name not in CONFIGS:
            raise ConfigError(f"unknown config {self.name!r}; known configs: {', '.join(CONFIGS)}")


def registry_builder_configs() -> list[Eagle3SynthConfig]:
    """One BuilderConfig per registered config, read from the registry each time it is asked."""
    return [
        Eagle3SynthConfig(name=spec.name, source=spec.source, pattern=spec.pattern, description=spec.pattern)
        for spec in CONFIGS.values()
    ]


class Eagle3Synth(datasets.GeneratorBasedBuilder):
    BUILDER_CONFIG_CLASS = Eagle3SynthConfig
    BUILDER_CONFIGS = registry_builder_configs()
    DEFAULT_CONFIG_NAME = "B1_glaive"

    # datasets memoizes `builder_configs` from BUILDER_CONFIGS once per class; reading the registry
    # live instead lets configs loaded from a --config-file after import be built too.
    @classproperty
    @classmethod
    def builder_configs(cls) -> dict[str, Eagle3SynthConfig]:
        return {config.name: config for config in registry_builder_configs()}

    def _info(self) -> datasets.DatasetInfo:
        return datasets.DatasetInfo(
            description=f"EAGLE-3 drafter training data: {self.config.pattern} (prompts from {self.config.source})",
            features=FEATURES,
        )

    def _split_generators(self, dl_manager: datasets.DownloadManager) -> list[datasets.SplitGenerator]:
        if not self.config.run_dir:
            raise ConfigError(f"config {self.config.name}: pass run_dir=<run directory> to build it")
        return [datasets.SplitGenerator(name=datasets.Split.TRAIN, gen_kwargs={"run_dir": self.config.run_dir})]

    def _generate_examples(self, run_dir: str):
        for row in iter_rows(run_dir):
            yield row["sample_id"], row
