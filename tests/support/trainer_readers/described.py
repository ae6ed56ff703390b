"""What a trainer's reader returned, as JSON our test compares with what we wrote (run in the trainer's venv).

Values go as Python floats/ints: exact for every dtype we write (bf16 and fp32 widen to a double
without rounding), so the comparison on our side can be `torch.equal`.
"""

from __future__ import annotations

import json


def tensor(value) -> dict:
    return {"shape": list(value.shape), "dtype": str(value.dtype), "values": value.tolist()}


def emit(samples: list[dict]) -> None:
    """One JSON line, the last of stdout (the caller reads only that)."""
    print(json.dumps(samples))
