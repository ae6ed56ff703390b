"""The package's layering, checked on its source: imports flow one way, no circles, small modules.

docs/development.md: cli -> builder/publish/cluster -> (train, checks, evaluate) -> view -> dataset -> run ->
(prompts, engines) -> contract. A module may import its own stage and the stages below; `prompts` and
`engines` know nothing of each other, nor do `train`, `checks` and `evaluate`; the base modules (errors,
exit_status, files) import nothing of the package; nothing in the library below
the command line imports the builder; `contract`, `engines` and the journal do not pull in `datasets`.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "eagle3_synth"
BASE = {"errors", "exit_status", "files", "__init__"}
# cluster sits beside publish: both drive the library from above, neither knows the other, only cli imports them.
# train (what trainers read) sits beside checks (validate, doctor) and evaluate (a drafter served):
# none knows the others.
LEVEL = {"contract": 0, "prompts": 1, "engines": 1, "run": 2, "dataset": 3, "view": 4, "train": 5, "checks": 5,
         "evaluate": 5, "publish": 6, "cluster": 6, "cli": 7}
MAX_LINES = 800


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imports_of(name: str, path: Path) -> set[str]:
    """Every eagle3_synth module (or builders) this module imports, at any depth of its code."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names
                      if alias.name.split(".")[0] in ("eagle3_synth", "builders", "eagle3_synth_builders")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] in ("eagle3_synth", "builders", "eagle3_synth_builders"):
                found.add(target)
                found |= {f"{target}.{alias.name}" for alias in node.names}
    return found


def stage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_imports_flow_one_way():
    known = modules()
    wrong = []
    for name, path in known.items():
        here = stage(name)
        for target in imports_of(name, path):
            if target.split(".")[0] == "builders" or target.startswith("eagle3_synth_builders"):
                if here != "cli":  # the command line drives the builder; nothing below it may
                    wrong.append(f"{name} imports the builder ({target})")
                continue
            if target not in known:
                continue  # a name imported from a module, not a module
            there = stage(target)
            if here in BASE and there != here:
                wrong.append(f"{name} is a base module but imports {target}")
            elif there in BASE or there == here:
                continue
            elif here in LEVEL and (LEVEL[there] >= LEVEL[here]):
                wrong.append(f"{name} ({here}) imports {target} ({there}), which is not below it")
    assert not wrong, "\n".join(sorted(wrong))


def test_no_import_circle():
    known = modules()
    graph = {name: {t for t in imports_of(name, path) if t in known and t != name} for name, path in known.items()}
    # A package's __init__ importing its own submodules is how packages expose them, not a circle.
    for name in graph:
        graph[name] = {t for t in graph[name] if not t.startswith(name + ".")}
    state: dict[str, int] = {}
    circles = []

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                circles.append(" -> ".join(trail[trail.index(nxt):] + [nxt]) if nxt in trail else f"{node} -> {nxt}")
            elif nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not circles, "\n".join(circles)


def test_no_module_is_over_800_lines():
    long = {name: n for name, path in modules().items() if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, long


def test_the_contract_engines_and_journal_do_not_import_datasets():
    code = ("import sys; import eagle3_synth.contract.row, eagle3_synth.contract.markers, eagle3_synth.engines.base, "
            "eagle3_synth.engines.replay, eagle3_synth.run.journal, eagle3_synth.run.directory; "
            "print(sorted(m for m in sys.modules if m == 'datasets' or m.startswith('datasets.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]", out
