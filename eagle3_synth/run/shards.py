"""Shards: how a config's samples split across processes and nodes (`--num-shards/--shard-index`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from eagle3_synth.errors import ConfigError


@dataclass(frozen=True)
class Shard:
    """Which samples one process generates: those of conversations with `conversation_id % count ==
    index` (a conversation's turns and rollouts never split between shards; with one turn and one
    sample per prompt, conversation_id is the sample_id).

    Round-robin rather than contiguous ranges, so every shard gets the same mix of short and long
    prompts (sources are often ordered) and the shards finish together. Any number of shards may
    share a run directory, even with different counts: a shard skips whatever is already done.
    """

    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ConfigError(f"--num-shards must be >= 1, got {self.count}")
        if not 0 <= self.index < self.count:
            raise ConfigError(f"--shard-index must be in 0..{self.count - 1} for --num-shards {self.count}, got {self.index}")

    def owns(self, conversation_id: Any) -> Any:
        """Whether this shard owns a conversation (an int), or which of them (a numpy array)."""
        return conversation_id % self.count == self.index

    def __str__(self) -> str:
        return "all samples" if self.count == 1 else f"shard {self.index} of {self.count}"


AUTO = "auto"  # --shard-index/--num-shards: read from the launcher's environment
# Where a launcher says which task this is, in the order they are read: a Slurm job array
# (sbatch(1) "OUTPUT ENVIRONMENT VARIABLES"; the array may start above 0, so the index counts from
# SLURM_ARRAY_TASK_MIN), then torchrun-style launchers (torch.distributed.run, accelerate, Ray Train).
SLURM_ARRAY = ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT")
TORCHRUN = ("RANK", "WORLD_SIZE")


def shard_from_environment(environ: Mapping[str, str] | None = None) -> tuple[Shard, str]:
    """The shard a launcher's environment names, and the variables it was read from: a hand-written
    `sbatch --array=0-15` script then needs no arithmetic (`--shard-index auto --num-shards auto`)."""
    environ = os.environ if environ is None else environ
    for index_name, count_name in (SLURM_ARRAY, TORCHRUN):
        if index_name in environ and count_name in environ:
            try:
                index, count = int(environ[index_name]), int(environ[count_name])
                if index_name == SLURM_ARRAY[0]:
                    index -= int(environ.get("SLURM_ARRAY_TASK_MIN", 0))
            except ValueError:
                raise ConfigError(f"--shard-index auto: {index_name}={environ[index_name]!r} and {count_name}="
                                  f"{environ[count_name]!r} are not whole numbers") from None
            try:
                return Shard(index=index, count=count), f"{index_name}/{count_name}"
            except ConfigError as exc:
                raise ConfigError(f"--shard-index auto: {index_name}/{count_name} give {exc}") from None
    raise ConfigError(f"--shard-index auto --num-shards auto read {SLURM_ARRAY[0]} and {SLURM_ARRAY[1]} (a Slurm job "
                      f"array) or {TORCHRUN[0]} and {TORCHRUN[1]} (torchrun-style launchers); none of them is set")


def resolve_auto(index: int | str, count: int | str, environ: Mapping[str, str] | None = None) -> Shard:
    """`--shard-index`/`--num-shards` as a shard: numbers as given, both `auto` from the environment."""
    autos = [index == AUTO, count == AUTO]
    if any(autos) and not all(autos):
        raise ConfigError("--shard-index auto and --num-shards auto go together (both read from the same launcher), "
                          f"got --shard-index {index} --num-shards {count}")
    if all(autos):
        return shard_from_environment(environ)[0]
    if not isinstance(index, int) or not isinstance(count, int):
        raise ConfigError(f"--shard-index and --num-shards take whole numbers or auto, got {index!r} and {count!r}")
    return Shard(index=index, count=count)


# -- journal lines --------------------------------------------------------------------------------
