"""The run fingerprint: a digest of everything that determines a run's output, and its differences.

A run directory is keyed by it; a command whose settings give another fingerprint is refused,
naming each differing field by its dotted path (`sampling.temperature: run has 0.6, ...`).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def fingerprint(fields: dict[str, Any]) -> str:
    canonical = json.dumps(fields, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def _differences(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[str]:
    """Each differing field by its dotted path (`sampling.temperature`), nested dicts opened."""
    lines = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            lines += _differences(a, b, f"{prefix}{key}.")
        elif key not in old:  # a field left out when unset (`omit_none`)
            lines.append(f"{prefix}{key}: not set for the run, this command has {b!r}")
        elif key not in new:
            lines.append(f"{prefix}{key}: run has {a!r}, not set for this command")
        elif a != b:
            lines.append(f"{prefix}{key}: run has {a!r}, this command has {b!r}")
    return lines
