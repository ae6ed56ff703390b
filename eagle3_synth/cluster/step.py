"""The datatrove pipeline step: rank R of W generates shard R of W of a config into the run directory.

Executors pickle the step by reference (Slurm: dill into executor.pik, loaded by the
`launch_pickled_pipeline` console script on the node, datatrove 0.10.1 executor/slurm.py
`SlurmPipelineExecutor.launch_job`; Ray: `ray.put`, executor/ray.py `RayPipelineExecutor.run`), so
it lives in this installed package and holds only plain data: the config name and the generation
settings `eagle3-synth generate` would build.

The step returns normally only when the journal has a result for every rollout of its shard:
datatrove writes its completion marker exactly when the step returns (executor/base.py
`PipelineExecutor._run_for_rank`), so a shard interrupted by preemption, `--max-hours` or SIGTERM
raises instead and stays unfinished; the next launch runs it again and it resumes from its journal.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import replace
from typing import Any

from datatrove.pipeline.base import PipelineStep

from eagle3_synth.errors import RunIncomplete
from eagle3_synth.run.generate import generate
from eagle3_synth.run.progress import counted
from eagle3_synth.run.settings import GenerationSettings

from eagle3_synth.cluster.shard_status import shard_statuses


class GenerateShard(PipelineStep):
    """One shard of `config`'s generation per datatrove rank (rank -> shard index, world size -> count)."""

    name = "eagle3-synth generate"
    type = "generation"

    def __init__(self, config: str, settings: GenerationSettings):
        super().__init__()
        self.config = config
        self.settings = settings

    def run(self, data: Any = None, rank: int = 0, world_size: int = 1) -> None:
        if not logging.getLogger().handlers:  # launch_pickled_pipeline configures no logging of ours
            logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s", stream=sys.stderr)
        settings = replace(self.settings, shard_index=rank, num_shards=world_size)
        summary = generate(*settings.resolve(self.config))
        for line in summary.lines():
            print(line, flush=True)
        status = shard_statuses(settings.run_dir, self.config, world_size, "", {})
        shard = status.shards[rank]
        self.stat_update("samples_generated", value=summary.generated)
        if not shard.covered:
            raise RunIncomplete(f"{self.config} shard {rank} of {world_size}: {shard.rollouts - shard.done} of "
                                f"{counted(shard.rollouts, status.unit)} have no result yet "
                                f"({summary.stopped or 'stopped early'}); "
                                "launch again to continue it")
