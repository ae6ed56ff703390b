"""Files the commands write: an existing file only with --overwrite, a dataset folder's never."""

from __future__ import annotations

import json

import pytest

from eagle3_synth.cli import main

from ..support.built_datasets import KIMI_CONFIG, checks_dataset, copy_dataset


@pytest.fixture
def folder(tmp_path_factory, kimi_tokenizer, qwen_tokenizer, tmp_path):
    # A copy: these tests try to write into it and must find it unchanged.
    return copy_dataset(checks_dataset(tmp_path_factory, kimi_tokenizer, qwen_tokenizer), tmp_path / "ds")


def _export(folder, out, *extra: str) -> int:
    return main(["export", str(folder), KIMI_CONFIG, "--format", "ids", "--no-text", "--out", str(out), *extra])


def test_export_refuses_an_existing_file_and_leaves_it_untouched(folder, tmp_path, capsys):
    out = tmp_path / "b1.jsonl"
    out.write_text("last week's export\n", encoding="utf-8")
    assert _export(folder, out) == 2
    assert f"--out {out}: exists; pass --overwrite to replace it" in capsys.readouterr().err
    assert out.read_text(encoding="utf-8") == "last week's export\n"
    assert _export(folder, out, "--overwrite") == 0
    assert len(out.read_text(encoding="utf-8").splitlines()) == 24
    assert json.loads(out.read_text(encoding="utf-8").splitlines()[0])["input_ids"]


@pytest.mark.parametrize("name", ["README.md", f"{KIMI_CONFIG}/run_info.json", ".runs/B1_glaive/run.json"])
def test_no_command_writes_over_a_dataset_folders_files_even_with_overwrite(folder, name, capsys):
    target = folder / name
    before = target.read_bytes()
    assert _export(folder, target, "--overwrite") == 2
    err = capsys.readouterr().err
    assert f"--out {target}: exists inside the dataset folder" in err and "only `build` writes" in err
    assert target.read_bytes() == before


def test_a_new_file_is_written_and_a_folder_refused(folder, tmp_path, capsys):
    assert _export(folder, tmp_path / "new" / "b1.jsonl") == 0
    assert (tmp_path / "new" / "b1.jsonl").is_file()
    assert _export(folder, tmp_path) == 2
    assert f"--out {tmp_path}: is a folder" in capsys.readouterr().err


def test_validate_report_stats_plot_and_vocab_files_are_protected(folder, tmp_path, capsys):
    report, plot = tmp_path / "report.json", tmp_path / "lengths.png"
    report.write_text("keep", encoding="utf-8")
    plot.write_text("keep", encoding="utf-8")
    assert main(["validate", str(folder), KIMI_CONFIG, "--report", str(report)]) == 2
    assert f"--report {report}: exists" in capsys.readouterr().err
    assert main(["stats", str(folder), "--plot", str(plot)]) == 2
    assert f"--plot {plot}: exists" in capsys.readouterr().err
    assert report.read_text(encoding="utf-8") == plot.read_text(encoding="utf-8") == "keep"

    vocab = ["vocab", str(folder), KIMI_CONFIG, "--draft-vocab-size", "16", "--target-vocab-size", "2048",
             "--out", str(tmp_path / "vocab")]
    assert main(vocab) == 0
    mapping = next((tmp_path / "vocab").glob("specforge-vocab-*.pt"))
    written = mapping.read_bytes()
    capsys.readouterr()
    assert main(vocab) == 2
    assert f"--out {mapping}: exists; pass --overwrite" in capsys.readouterr().err
    assert mapping.read_bytes() == written
    assert main([*vocab, "--overwrite"]) == 0
