"""The bundled sample prompts are what scripts/make_sample_prompts.py writes (one place for them)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bundled_samples_are_the_scripts_output():
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_sample_prompts.py"), "--check"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
