"""The package's one seeded draw, shared by the per-rollout mixes (`turns.py`) and the validation
split (`held_out.py`): each keys it differently, so no draw moves another."""

from __future__ import annotations

import hashlib


def seeded_draw(seed: int, key: str) -> float:
    """A number in [0, 1) from blake2b of `seed:key`: the same for the same pair on any machine,
    and independent of every other key (one conversation's draw never moves another's)."""
    digest = hashlib.blake2b(f"{seed}:{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64
