"""The one "temporary file, then rename" helper (eagle3_synth/files.py)."""

from __future__ import annotations

import pytest

from eagle3_synth.files import temporary_name, write_text_whole, written_whole


def test_temporary_names_are_hidden_beside_the_file():
    assert temporary_name("a/b.json", unique=False) == "a/.b.json.tmp"
    unique = temporary_name("b.json", suffix=".partial")
    assert unique.startswith(".b.json.") and unique.endswith(".partial") and unique != temporary_name("b.json")


def test_a_failed_write_leaves_neither_file(tmp_path):
    path = tmp_path / "out.jsonl"
    with pytest.raises(RuntimeError), written_whole(path) as tmp:
        tmp.write_text("half")
        raise RuntimeError("stopped")
    assert list(tmp_path.iterdir()) == []


def test_a_whole_write_replaces_the_file(tmp_path):
    path = tmp_path / "run_info.json"
    path.write_text("old")
    write_text_whole(path, "new", unique=False)
    assert path.read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["run_info.json"]
