"""The run fingerprint: a digest of everything that determines a run's output, and its differences.

A run directory is keyed by it; a command whose settings give another fingerprint is refused,
naming each differing field by its dotted path (`sampling.temperature: run has 0.6, ...`).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


# Fields added to the fingerprint after runs were started without them, with the value such a run
# had: a run directory that lacks one still resumes when this command's value is that one (so an
# upgrade in the middle of a days-long run does not strand it), and is refused, naming the field,
# otherwise. Older versions sent no min_p (0.0 is SGLang's default, sampling_params.py, and
# transformers applies no min-p warper), drew no per-rollout sampling, and recorded no engine arg.
LATER_FIELDS: dict[str, Any] = {
    "sampling.min_p": 0.0,
    "conversations.sampling_mix": [],
    "model.engine_args": {},
}


def as_recorded(fields: dict[str, Any], recorded: dict[str, Any],
                later: dict[str, Any] | None = None) -> dict[str, Any]:
    """`fields` in JSON form as a run that predates some `later` fields (default `LATER_FIELDS`)
    recorded them: each such field the run lacks is left out when this command's value is the one
    that run had; kept (and so a difference) otherwise."""
    out = json.loads(json.dumps(fields))
    for path, absent in (LATER_FIELDS if later is None else later).items():
        *parents, name = path.split(".")
        mine, theirs = out, recorded
        for parent in parents:
            mine, theirs = mine.get(parent, {}), theirs.get(parent, {})
        if isinstance(mine, dict) and name not in theirs and mine.get(name, absent) == absent:
            mine.pop(name, None)
    return out


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
        elif key not in old:
            lines.append(f"{prefix}{key}: not recorded by the run (started by an eagle3-synth without this field; "
                         f"finish it with that version, or start a new --run-dir), this command has {b!r}")
        elif a != b:
            lines.append(f"{prefix}{key}: run has {a!r}, this command has {b!r}")
    return lines
