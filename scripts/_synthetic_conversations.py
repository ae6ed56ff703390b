"""The synthetic conversations moved beside the fixtures (tests/fixtures/_synthetic_conversations.py).

This name stays only for scripts/bench_onpolicy.py, which imports it from its own folder; delete it
when that benchmark moves to benchmarks/ (and imports the fixture module itself).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_PATH = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "_synthetic_conversations.py"
_spec = importlib.util.spec_from_file_location("_synthetic_conversations_fixture", _PATH)
_module = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _module  # dataclasses look their module up there
_spec.loader.exec_module(_module)

general_chat = _module.general_chat
math_question = _module.math_question
