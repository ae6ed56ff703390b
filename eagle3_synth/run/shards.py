"""Shards: how a config's samples split across processes and nodes (`--num-shards/--shard-index`)."""

from __future__ import annotations

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


# -- journal lines --------------------------------------------------------------------------------
