"""README's console examples, run as written: each `$ eagle3-synth ...` block prints what README shows.

Every ```console block of README.md is a list of commands (`$ ...`) and what each printed. They
run here in a folder holding `make demo`'s dataset (`demo_out`, built by scripts/demo.py) and a
link to the fixtures (`tests/`), each as its own process with stdout and stderr together, as a
user's terminal shows them. Compared after normalising what no two runs share: the checkout's and
the folder's absolute paths, and for commands whose figures are measured rates (`plan`) every
number. After a deliberate change, `EAGLE3_SYNTH_UPDATE_GOLDEN=1 python -m pytest
tests/test_readme_examples.py` rewrites the blocks from what ran; read the diff before committing.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from .support.golden import UPDATE_ENV

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
_BLOCK = re.compile(r"^```console\n(.*?)^```\n", re.S | re.M)
# Commands whose output holds measured rates or times: compared with every number as N.
TIMED = ("eagle3-synth plan ",)


@dataclass
class Example:
    command: str  # as written after "$ "
    expected: str  # the lines README shows after it
    start: int  # offsets of `expected` in README's text
    end: int

    @property
    def argv(self) -> tuple[list[str], bool]:
        """The command's arguments (comments dropped) and whether README appends its exit status."""
        command, echo_status = self.command, False
        if command.rstrip().endswith("; echo $?"):
            command, echo_status = command.rstrip()[: -len("; echo $?")], True
        return shlex.split(command, comments=True), echo_status


def examples(text: str) -> list[Example]:
    found = []
    for block in _BLOCK.finditer(text):
        offset = block.start(1)
        lines = block.group(1).splitlines(keepends=True)
        for i, line in enumerate(lines):
            if not line.startswith("$ "):
                continue
            start = offset + sum(len(x) for x in lines[: i + 1])
            j = i + 1
            while j < len(lines) and not lines[j].startswith("$ "):
                j += 1
            end = offset + sum(len(x) for x in lines[:j])
            found.append(Example(line[2:].rstrip("\n"), text[start:end], start, end))
    return found


def normalise(output: str, command: str, folder: Path) -> str:
    for root in (str(folder.resolve()), str(folder), str(ROOT)):
        output = output.replace(root + "/", "").replace(root, ".")
    if command.startswith(TIMED):  # numbers, and the column widths they set
        output = re.sub(r" +", " ", re.sub(r"\d[\d,.]*", "N", output))
    return "\n".join(line.rstrip() for line in output.splitlines())


def run_example(example: Example, folder: Path, env: dict[str, str]) -> str:
    argv, echo_status = example.argv
    assert argv[0] == "eagle3-synth", f"README example is not an eagle3-synth command: {example.command}"
    result = subprocess.run([sys.executable, "-m", "eagle3_synth.cli", *argv[1:]], cwd=folder, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    # The exit status is compared where README shows it (`; echo $?`); validate's 1 is part of its example.
    return result.stdout + (f"{result.returncode}\n" if echo_status else "")


@pytest.fixture(scope="module")
def demo_folder(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    folder = tmp_path_factory.mktemp("readme")
    (folder / "tests").symlink_to(ROOT / "tests")
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "HF_HOME": str(folder / ".hf"), "DEMO_OUT": str(folder / "demo_out"), "COLUMNS": "200"}
    subprocess.run([sys.executable, str(ROOT / "scripts" / "demo.py")], cwd=folder, env=env, check=True,
                   stdout=subprocess.DEVNULL, timeout=900)
    return folder, env


def test_readme_has_console_examples():
    commands = [e.command for e in examples(README.read_text(encoding="utf-8"))]
    assert len(commands) >= 10 and any(c.startswith("eagle3-synth stats demo_out") for c in commands)


@pytest.mark.slow
def test_readme_console_examples_print_what_readme_shows(demo_folder):
    folder, env = demo_folder
    text = README.read_text(encoding="utf-8")
    found = examples(text)
    updated, mismatches = text, []
    for example in reversed(found):  # from the end, so earlier offsets stay valid while rewriting
        output = run_example(example, folder, env)
        if normalise(output, example.command, folder) != normalise(example.expected, example.command, folder):
            mismatches.append(f"$ {example.command}\n--- README shows:\n{example.expected}--- it printed:\n{output}")
            shown = normalise(output, example.command, folder) + "\n"
            if example.command.startswith(TIMED):
                shown = "\n".join(line.rstrip() for line in output.replace(str(folder) + "/", "").splitlines()) + "\n"
            updated = updated[: example.start] + shown + updated[example.end:]
    if os.environ.get(UPDATE_ENV) and mismatches:
        README.write_text(updated, encoding="utf-8")
        return
    assert not mismatches, "\n\n".join(reversed(mismatches)) + f"\n\n({UPDATE_ENV}=1 rewrites README's blocks)"
