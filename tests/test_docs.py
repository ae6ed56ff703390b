"""The docs cannot drift: reference pages as the code renders them, code blocks that parse and name
only what exists, a short README, and the trainers' citations on the trainers' pages.

The console blocks of every page are run by tests/test_readme_examples.py; the Python builder's
snippet by tests/builders/test_builder.py.
"""

from __future__ import annotations

import argparse
import ast
import re
import shlex
from pathlib import Path

import pytest
import yaml

from docs import generate
from eagle3_synth.cli import COMMANDS, make_parser

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = (README, *sorted(DOCS.rglob("*.md")))
TRAINER_PAGES = DOCS / "training"
README_MAX_LINES = 250
# `file.py:LINE` citations of a third party's source that are not a trainer's: SGLang's scheduler
# (engines and tuning) and datatrove's executors (clusters). A trainer's belong on its own page.
OTHER_CITATIONS = {"scheduler.py:3520", "srt/managers/schedule_policy.py:304", "slurm.py:307", "ray.py:168"}
_BLOCK = re.compile(r"^```(\w+)\n(.*?)^```\n", re.S | re.M)
_CITATION = re.compile(r"[\w./-]+\.py:\d+")


def blocks(language: str) -> list[tuple[str, str]]:
    """(page, text) of every ```language block of README and the docs pages."""
    found = []
    for page in PAGES:
        for block in _BLOCK.finditer(page.read_text(encoding="utf-8")):
            if block.group(1) == language:
                found.append((str(page.relative_to(ROOT)), block.group(2)))
    return found


def test_reference_pages_are_what_the_code_renders():
    stale = [str(path.relative_to(ROOT)) for path, text in generate.render().items()
             if not path.is_file() or path.read_text(encoding="utf-8") != text]
    assert not stale, f"{', '.join(stale)} differ from the code: run `{generate.COMMAND}` and commit the pages"


def test_every_page_is_in_the_site_nav():
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    missing = [str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md") if str(p.relative_to(DOCS)) not in nav]
    assert not missing, f"pages missing from mkdocs.yml's nav: {missing}"


def test_readme_is_short():
    lines = len(README.read_text(encoding="utf-8").splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move the detail to a page under docs/"


def test_trainer_citations_live_on_the_trainer_pages():
    stray = []
    for page in PAGES:
        if TRAINER_PAGES in page.parents:
            continue
        for citation in _CITATION.findall(page.read_text(encoding="utf-8")):
            if citation not in OTHER_CITATIONS:
                stray.append(f"{page.relative_to(ROOT)}: {citation}")
    assert not stray, "version-pinned file:line citations belong on docs/training/ pages:\n" + "\n".join(stray)


@pytest.mark.parametrize(("page", "text"), blocks("yaml"))
def test_yaml_blocks_parse(page, text):
    assert yaml.safe_load(text) is not None, page


@pytest.mark.parametrize(("page", "text"), blocks("python"))
def test_python_blocks_parse(page, text):
    ast.parse(text, filename=page)


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {flag for action in parser._actions for flag in action.option_strings}  # noqa: SLF001


def eagle3_synth_commands(text: str) -> list[list[str]]:
    """Every `eagle3-synth ...` command of a bash block, as words (continuations joined, comments
    dropped, `[--optional]` brackets removed, split at `&&`, `;` and `|`)."""
    commands = []
    for line in text.replace("\\\n", " ").splitlines():
        words = shlex.split(line.replace("[", " ").replace("]", " "), comments=True)
        current: list[str] | None = None
        for word in words:
            if word in ("&&", ";", "|", "||"):
                current = None
            elif current is None and Path(word).name == "eagle3-synth":
                current = []
                commands.append(current)
            elif current is not None:
                current.append(word)
    return commands


@pytest.mark.parametrize(("page", "text"), blocks("bash"))
def test_bash_blocks_name_only_commands_and_options_that_exist(page, text):
    parser = make_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))  # noqa: SLF001
    wrong = []
    for words in eagle3_synth_commands(text):
        words = [w for w in words if w not in ("--debug", "-v", "--verbose")]
        if not words or words[0] not in COMMANDS:
            wrong.append(f"not a command: eagle3-synth {' '.join(words)}")
            continue
        known = _options(subparsers.choices[words[0]])
        wrong += [f"eagle3-synth {words[0]}: no option {w}" for w in words[1:]
                  if w.startswith("--") and w.split("=", 1)[0] not in known]
    assert not wrong, f"{page}:\n" + "\n".join(wrong)


def test_bash_blocks_are_found():
    assert len(blocks("bash")) >= 10 and any(eagle3_synth_commands(text) for _, text in blocks("bash"))
