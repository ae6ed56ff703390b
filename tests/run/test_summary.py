"""The end-of-run summary counts `length` finishes shorter than asked (the engine lowered the cap)."""

from __future__ import annotations

from pathlib import Path

from eagle3_synth.engines.base import GenerationResult
from eagle3_synth.run.progress import RunSummary


def result(sample_id: int, finish: str, tokens: int) -> GenerationResult:
    return GenerationResult(sample_id=sample_id, output_ids=[5] * tokens, finish_reason=finish,
                            prompt_tokens=3, completion_tokens=tokens)


def test_a_lowered_length_is_a_row_counted_apart():
    summary = RunSummary(config="B1_glaive", run_dir="run", max_new_tokens=30)
    for item in (result(0, "length", 30), result(1, "length", 28), result(2, "stop", 5)):
        summary.add(item)
    assert summary.short_lengths == 1 and summary.finish_reasons["length"] == 2
    assert ("  1 samples ended by length before --max-new-tokens 30: the engine lowered the cap to fit its "
            "context or KV budget") in summary.lines()
    quiet = RunSummary(config="B1_glaive", run_dir="run", max_new_tokens=30)
    quiet.add(result(0, "length", 30))
    assert not any("ended by length before" in line for line in quiet.lines())


def test_the_summary_lines_of_a_build_with_rejects_agree(tmp_path, capsys, caplog):
    """Preparation's log, the run summary and the assembly's coverage line count prompts alike:
    kept prompts, with the rejected ones beside them (the glaive fixture has 15 records, 7 rejected)."""
    import logging
    import re

    from eagle3_synth.cli import main

    from ..conftest import TINY_MODEL

    source = Path(__file__).resolve().parents[1] / "fixtures/sources/B1_glaive/glaive-function-calling-v2.json"
    caplog.set_level(logging.INFO)
    assert main(["build", "B1_glaive", "--source-file", str(source), "--model", str(TINY_MODEL), "--max-new-tokens",
                 "2", "--temperature", "0", "--out", str(tmp_path / "ds")]) == 0
    printed = capsys.readouterr().out
    prepared = re.search(r"B1_glaive: (\d+) prompts kept of (\d+) records considered", caplog.text)
    summary = re.search(r"B1_glaive: (\d+) prompts kept \((\d+) rejected\), 0 already in", printed)
    coverage = re.search(r"B1_glaive: (\d+) prompts kept \((\d+) rejected\) in .*: (\d+) results", printed)
    assert prepared and summary and coverage, printed
    kept, considered = map(int, prepared.groups())
    assert (kept, considered) == (8, 15)
    assert tuple(map(int, summary.groups())) == (kept, considered - kept)
    assert tuple(map(int, coverage.groups())) == (kept, considered - kept, kept)
    assert f"B1_glaive: wrote {kept} rows" in printed
