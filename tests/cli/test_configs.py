"""`eagle3-synth --version` and `eagle3-synth configs`."""

from __future__ import annotations

import json

import pytest

from eagle3_synth import __version__
from eagle3_synth.cli import main
from eagle3_synth.prompts.configs import BUILTIN_CONFIGS, CONFIGS


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"eagle3-synth {__version__}"


def test_configs_lists_every_built_in_config_with_its_source_and_cap(capsys):
    assert main(["configs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:4] == ["name", "source", "adapter", "cap"]
    rows = {line.split()[0]: line for line in lines[1:-1]}
    assert list(rows) == list(BUILTIN_CONFIGS)
    assert "glaiveai/glaive-function-calling-v2 (train)" in rows["B1_glaive"] and "12,000" in rows["B1_glaive"]
    assert "NousResearch/hermes-function-calling-v1 [5 configs] (train)" in rows["B2_hermes_fc"]
    assert lines[-1].startswith("8 configs, 88,000 prompts at their caps")


def test_configs_adds_a_config_files_own(tmp_path, capsys):
    path = tmp_path / "mine.yaml"
    path.write_text("MY_support:\n  adapter: sharegpt\n  source: my-org/chats\n  cap: 3000\n  turns: all\n",
                    encoding="utf-8")
    try:
        assert main(["configs", "--config-file", str(path), "--json"]) == 0
    finally:
        CONFIGS.pop("MY_support", None)
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["MY_support"] == {**rows["MY_support"], "origin": "config file", "source": "my-org/chats (train)",
                                  "adapter": "sharegpt", "cap": 3000, "turns": "all", "sample_prompts": False}
    assert rows["B1_glaive"]["origin"] == "built-in" and rows["B1_glaive"]["sample_prompts"] is True


def test_configs_names_a_bad_config_file(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("MY_x:\n  source: a/b\n", encoding="utf-8")
    assert main(["configs", "--config-file", str(path)]) == 2
    assert f"--config-file {path}: config 'MY_x': 'adapter' is required" in capsys.readouterr().err
