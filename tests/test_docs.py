"""The docs cannot drift: reference pages as the code renders them."""

from __future__ import annotations

from pathlib import Path

from docs import generate

ROOT = Path(__file__).resolve().parents[1]


def test_reference_pages_are_what_the_code_renders():
    stale = [str(path.relative_to(ROOT)) for path, text in generate.render().items()
             if not path.is_file() or path.read_text(encoding="utf-8") != text]
    assert not stale, f"{', '.join(stale)} differ from the code: run `{generate.COMMAND}` and commit the pages"
