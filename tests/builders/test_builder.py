"""The builder is the one path that generates and assembles: the docs' snippet, resume, num_proc.

Generation is the tiny model on the CPU (transformers engine, greedy, a few prompts, short outputs),
so the builder's rows can be compared with `eagle3-synth build`'s for the same settings exactly.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from eagle3_synth.cli import main
from eagle3_synth.prompts.configs import sample_prompts_path

from ..conftest import TINY_MODEL
from ..support.cli_processes import config_rows

PAGE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "python.md"
CONFIG = "B1_glaive"
# The snippet's settings as build options (what the rows are compared with).
SNIPPET_PROMPTS = "eagle3_synth/prompts/samples/B1_glaive.jsonl"
BUILD_OPTIONS = ["--model", "tests/fixtures/models/tiny-kimi", "--engine", "transformers", "--prompts", SNIPPET_PROMPTS,
                 "--max-new-tokens", "64", "--temperature", "0"]

pytestmark = pytest.mark.skipif(not (TINY_MODEL / "config.json").exists(),
                                reason="tiny model fixture missing: run python -m tests.fixtures.train_tiny_model")


def docs_snippet() -> str:
    """The Python block of the docs' "The Python builder" page (docs/guides/python.md)."""
    return re.search(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S).group(1)


def workdir(root: Path) -> Path:
    """A folder laid out as the checkout's root is for the snippet: the model and the bundled prompts
    at their repo paths; and three of those prompts in p.jsonl (the other tests' run)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "tests" / "fixtures" / "models").mkdir(parents=True, exist_ok=True)
    (root / "tests" / "fixtures" / "models" / "tiny-kimi").symlink_to(TINY_MODEL, target_is_directory=True)
    (root / SNIPPET_PROMPTS).parent.mkdir(parents=True)
    (root / SNIPPET_PROMPTS).symlink_to(sample_prompts_path(CONFIG))
    lines = Path(sample_prompts_path(CONFIG)).read_text(encoding="utf-8").splitlines(keepends=True)
    (root / "p.jsonl").write_text("".join(lines[:3]), encoding="utf-8")
    return root


def journal(run_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((run_dir / "journal").glob("*.jsonl"))}


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """The snippet's run, generated once by the builder: (workdir, its run directory, its rows)."""
    from builders.eagle3_synth_builder import Eagle3Synth

    root = workdir(tmp_path_factory.mktemp("builder"))
    builder = Eagle3Synth(config_name=CONFIG, model=str(TINY_MODEL), engine="transformers",
                          prompts=str(root / "p.jsonl"), max_new_tokens=64, temperature=0.0,
                          run_dir=str(root / "runs" / CONFIG), cache_dir=str(root / "hf-cache"), echo=None)
    builder.download_and_prepare()
    rows = builder.as_dataset(split="train").to_list()
    assert [r["sample_id"] for r in rows] == [0, 1, 2]
    return root, root / "runs" / CONFIG, rows


def test_the_docs_snippet_gives_the_rows_of_build(tmp_path, monkeypatch, capsys):
    root = workdir(tmp_path / "work")
    monkeypatch.chdir(root)
    scope: dict = {}
    exec(docs_snippet(), scope)  # noqa: S102 - the docs' own code, run as a user would
    ds = scope["ds"]
    assert "B1_glaive: 6 prompts kept (0 rejected), 0 already in runs/B1_glaive, 6 generated" in capsys.readouterr().out

    assert main(["build", CONFIG, *BUILD_OPTIONS, "--out", "ds"]) == 0
    built = config_rows(root / "ds")
    assert ds.to_list() == built and len(built) == 6
    assert all(r["finish_reason"] in ("stop", "length") and r["completion_tokens"] <= 64 for r in built)
    # Not only the same rows: the same run, setting for setting.
    run_files = [json.loads((root / d / "run.json").read_text()) for d in ("runs/B1_glaive", "ds/.runs/B1_glaive")]
    assert run_files[0]["fingerprint"] == run_files[1]["fingerprint"]
    assert run_files[0]["fields"] == run_files[1]["fields"]


def test_a_second_download_and_prepare_generates_nothing(generated, tmp_path):
    from builders.eagle3_synth_builder import Eagle3Synth

    root, run_dir, rows = generated
    before = journal(run_dir)
    lines: list[str] = []
    builder = Eagle3Synth(config_name=CONFIG, model=str(TINY_MODEL), engine="transformers",
                          prompts=str(root / "p.jsonl"), max_new_tokens=64, temperature=0.0,
                          run_dir=str(run_dir), cache_dir=str(tmp_path / "hf-cache"), echo=lines.append)
    builder.download_and_prepare()
    summary = builder.generation_summary
    assert (summary.generated, summary.already_done, summary.remaining) == (0, 3, 0)
    assert journal(run_dir) == before  # no new session, not a byte appended
    assert lines[0].startswith(f"B1_glaive: 3 prompts kept (0 rejected), 3 already in {run_dir}, 0 generated")
    assert builder.as_dataset(split="train").to_list() == rows


def test_assembly_from_the_run_directory_alone(generated, tmp_path):
    from builders.eagle3_synth_builder import Eagle3Synth

    _, run_dir, rows = generated
    builder = Eagle3Synth(config_name=CONFIG, run_dir=str(run_dir), cache_dir=str(tmp_path / "hf-cache"), echo=None)
    builder.download_and_prepare()
    assert builder.generation_summary is None and builder.coverage.rows == 3
    assert builder.as_dataset(split="train").to_list() == rows


def test_num_proc_splits_assembly_and_gives_the_same_rows(generated, tmp_path):
    from builders.eagle3_synth_builder import Eagle3Synth

    _, run_dir, rows = generated
    builder = Eagle3Synth(config_name=CONFIG, run_dir=str(run_dir), cache_dir=str(tmp_path / "hf-cache"), echo=None)
    builder.download_and_prepare(num_proc=2)
    assert builder.info.splits["train"].shard_lengths == [2, 1]  # two processes wrote a shard each
    assert builder.as_dataset(split="train").to_list() == rows


def test_the_config_checks_the_kwargs_it_is_given(tmp_path):
    from builders.eagle3_synth_builder import Eagle3Synth
    from eagle3_synth.errors import ConfigError

    with pytest.raises(ConfigError, match="--temperature must be >= 0, got -1"):
        Eagle3Synth(config_name=CONFIG, model=str(TINY_MODEL), temperature=-1.0, cache_dir=str(tmp_path))
    with pytest.raises(ConfigError, match="unknown config 'B9_nothing'"):
        Eagle3Synth(config_name="B9_nothing", cache_dir=str(tmp_path))
    with pytest.raises(ValueError, match="doesn't have a 'max_new_token' key"):
        Eagle3Synth(config_name=CONFIG, max_new_token=64, cache_dir=str(tmp_path))
    builder = Eagle3Synth(config_name=CONFIG, cache_dir=str(tmp_path), echo=None)
    assert builder.run_dir == str(tmp_path / "downloads" / "eagle3-synth-runs" / CONFIG)
    with pytest.raises(ConfigError, match="holds no run yet"):
        builder.download_and_prepare()
