"""The docs' examples, run as written: each `$ eagle3-synth ...` block prints what its page shows.

Every ```console block of README.md and of every page under docs/ is a list of commands (`$ ...`)
and what each printed. They run here, in the page's order, in a folder holding `make demo`'s dataset
(`demo_out`, built by examples/demo.py, whose output holds README's sample block too) and a link to
the fixtures (`tests/`), each as its own process with stdout and stderr together, as a user's
terminal shows them. Compared after normalising what no two runs share: the checkout's and the
folder's absolute paths, measured durations and rates (`16s`, `0.37 samples/s`), and for commands
whose figures are all measured (`plan`) every number. After a deliberate change,
`EAGLE3_SYNTH_UPDATE_GOLDEN=1 python -m pytest tests/test_readme_examples.py` rewrites the blocks
from what ran; read the diff before committing.

A ```bash or ```python block right after a `<!-- runs locally -->` line runs in the same folder
too (bash with the venv's `eagle3-synth` on PATH) and must exit 0: the blocks whose output the page
does not show. The other bash blocks (a GPU node, a real model, servers, the Hub) are checked by
tests/test_docs.py to name only commands and options that exist.
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
from .support.modules import root_on_path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# Every page whose console blocks are run: README and the docs site's pages.
PAGES = (README, *sorted((ROOT / "docs").rglob("*.md")))
_BLOCK = re.compile(r"^```console\n(.*?)^```\n", re.S | re.M)
LOCAL_MARK = "<!-- runs locally -->"
_LOCAL_BLOCK = re.compile(r"^" + re.escape(LOCAL_MARK) + r"\n```(bash|python)\n(.*?)^```\n", re.S | re.M)
# Commands whose output holds measured rates or times only: compared with every number as N.
TIMED = ("eagle3-synth plan ",)
# What a run measured, in any command's output: durations as run/progress.py writes them (`16s`,
# `1m05s`, `2h03m`) and rates.
_MEASURED = re.compile(r"\b\d+(?:h\d\dm|m\d\ds|s)\b|\b\d+\.\d+(?= (?:samples|output tokens)/s\b)")


@dataclass
class Example:
    command: str  # as written after "$ "
    expected: str  # the lines the page shows after it
    start: int  # offsets of `expected` in the page's text
    end: int

    @property
    def argv(self) -> tuple[list[str], bool]:
        """The command's arguments (comments dropped) and whether the page appends its exit status."""
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


def normalise(output: str, folder: Path) -> str:
    """`output` with the folder's and the checkout's paths relative, as the pages show them."""
    for root in (str(folder.resolve()), str(folder), str(ROOT)):
        output = output.replace(root + "/", "").replace(root, ".")
    return "\n".join(line.rstrip() for line in output.splitlines())


def comparable(output: str, command: str, folder: Path) -> str:
    """`output` normalised, with what a run measured as N."""
    output = _MEASURED.sub("N", normalise(output, folder))
    if command.startswith(TIMED):  # numbers, and the column widths they set
        output = re.sub(r" +", " ", re.sub(r"\d[\d,.]*", "N", output))
    return output


def run_example(example: Example, folder: Path, env: dict[str, str]) -> str:
    argv, echo_status = example.argv
    assert argv[0] == "eagle3-synth", f"example is not an eagle3-synth command: {example.command}"
    result = subprocess.run([sys.executable, "-m", "eagle3_synth.cli", *argv[1:]], cwd=folder, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    # The exit status is compared where the page shows it (`; echo $?`); validate's 1 is part of its example.
    return result.stdout + (f"{result.returncode}\n" if echo_status else "")


@pytest.fixture(scope="module")
def demo_folder(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    folder = tmp_path_factory.mktemp("readme")
    (folder / "tests").symlink_to(ROOT / "tests")
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "HF_HOME": str(folder / ".hf"), "DEMO_OUT": str(folder / "demo_out"), "COLUMNS": "200"}
    demo = subprocess.run([sys.executable, "-m", "examples.demo"], cwd=folder, env=root_on_path(env), check=True,
                          stdout=subprocess.PIPE, text=True, timeout=900)
    (folder / "demo.out").write_text(demo.stdout, encoding="utf-8")
    return folder, env


def test_the_pages_have_console_examples():
    commands = [e.command for page in PAGES for e in examples(page.read_text(encoding="utf-8"))]
    assert len(commands) >= 10 and any(c.startswith("eagle3-synth stats demo_out") for c in commands)


def readme_demo_block() -> str:
    """The plain block after README's `make demo` paragraph: one sample as `make demo` prints it
    (its messages left out)."""
    section = README.read_text(encoding="utf-8").split("## The two commands", 1)[1].split("\n## ", 1)[0]
    plain, fence = [], None  # the fences in order: a plain block is one opened by a bare ```
    for line in section.splitlines(keepends=True):
        if line.startswith("```"):
            fence = None if fence is not None else line.strip()
            if fence == "```":
                plain.append("")
        elif fence == "```":
            plain[-1] += line
    return plain[0]


@pytest.mark.slow
def test_readme_shows_what_make_demo_prints(demo_folder):
    folder, _ = demo_folder
    printed = (folder / "demo.out").read_text(encoding="utf-8")
    # README shows the sample's header and its marked sequence (its messages left out): each line as
    # printed, in the order printed.
    lines = iter(printed.splitlines())
    missing = [line for line in readme_demo_block().splitlines() if line not in lines]
    assert not missing, f"README's `make demo` lines {missing} are not in what it printed:\n{printed}"


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_console_examples_print_what_the_page_shows(demo_folder, page):
    folder, env = demo_folder
    text = page.read_text(encoding="utf-8")
    found = examples(text)
    # In the page's order (a command may use what the one before it wrote), rewritten from the end.
    outputs = [run_example(example, folder, env) for example in found]
    updated, mismatches = text, []
    for example, output in reversed(list(zip(found, outputs))):
        if comparable(output, example.command, folder) != comparable(example.expected, example.command, folder):
            mismatches.append(f"$ {example.command}\n--- {page.name} shows:\n{example.expected}"
                              f"--- it printed:\n{output}")
            updated = updated[: example.start] + normalise(output, folder) + "\n" + updated[example.end:]
    if os.environ.get(UPDATE_ENV) and mismatches:
        page.write_text(updated, encoding="utf-8")
        return
    assert not mismatches, "\n\n".join(reversed(mismatches)) + f"\n\n({UPDATE_ENV}=1 rewrites the page's blocks)"


def local_blocks() -> list[tuple[str, str, str]]:
    """(page, language, text) of every block marked to run locally."""
    return [(str(page.relative_to(ROOT)), block.group(1), block.group(2))
            for page in PAGES for block in _LOCAL_BLOCK.finditer(page.read_text(encoding="utf-8"))]


def test_the_pages_have_blocks_that_run_locally():
    marks = sum(line == LOCAL_MARK for page in PAGES for line in page.read_text(encoding="utf-8").splitlines())
    assert local_blocks() and len(local_blocks()) == marks, f"a {LOCAL_MARK} line not right before a bash/python block"


@pytest.mark.slow
@pytest.mark.parametrize(("page", "language", "text"), local_blocks(),
                         ids=[f"{page}-{i}" for i, (page, _, _) in enumerate(local_blocks())])
def test_blocks_marked_local_run_as_written(demo_folder, page, language, text):
    folder, env = demo_folder
    # The venv's scripts first on PATH, as after `source .venv/bin/activate`.
    env = {**env, "PATH": os.pathsep.join((str(Path(sys.executable).parent), env.get("PATH", "")))}
    argv = ["bash", "-e", "-c", text] if language == "bash" else [sys.executable, "-c", text]
    result = subprocess.run(argv, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            timeout=600)
    assert result.returncode == 0, f"{page}: the {language} block exited {result.returncode}:\n{text}\n{result.stdout}"
