"""Python processes that import the checkout's top-level folders (examples/, stand_ins/, tests/) from
any working folder, with no `sys.path` edit of their own: the checkout's root on PYTHONPATH. So the
tests run examples/ as their docs do (`python -m examples.<name>`), in a folder of the test's."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def root_on_path(env: dict[str, str] | None = None) -> dict[str, str]:
    """`env` (default: this process's environment) with the checkout's root first on PYTHONPATH; a
    process started with it passes it on, so `python -m examples.<name>` works in its children too."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env
