"""The end-of-run summary counts `length` finishes shorter than asked (the engine lowered the cap)."""

from __future__ import annotations

from pathlib import Path

from eagle3_synth.engines.base import GenerationResult
from eagle3_synth.run.progress import Coverage, PromptCounts, RunSummary


def result(sample_id: int, finish: str, tokens: int) -> GenerationResult:
    return GenerationResult(sample_id=sample_id, output_ids=[5] * tokens, finish_reason=finish,
                            prompt_tokens=3, completion_tokens=tokens)


def test_a_lowered_length_is_a_row_counted_apart():
    summary = RunSummary(config="B1_glaive", run_dir="run", max_new_tokens=30)
    for item in (result(0, "length", 30), result(1, "length", 28), result(2, "stop", 5)):
        summary.add(item)
    assert summary.short_lengths == 1 and summary.finish_reasons["length"] == 2
    assert ("  1 sample ended by length before --max-new-tokens 30: the engine lowered the cap to fit its "
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


def test_two_samples_per_prompt_are_counted_as_rollouts_and_the_turns_as_samples(tmp_path, capsys, caplog):
    """With several rollouts per prompt the run's lines say which count is which: preparation's
    prompts, the summary's and coverage's prompts then rollouts, the samples generated (rows)."""
    import logging

    from eagle3_synth.cli import main

    from ..conftest import TINY_MODEL

    source = Path(__file__).resolve().parents[1] / "fixtures/sources/B1_glaive/glaive-function-calling-v2.json"
    caplog.set_level(logging.INFO)
    assert main(["build", "B1_glaive", "--source-file", str(source), "--model", str(TINY_MODEL), "--max-new-tokens",
                 "2", "--temperature", "0", "--samples-per-prompt", "2", "--out", str(tmp_path / "ds")]) == 0
    printed = capsys.readouterr().out
    run_dir = tmp_path / "ds" / ".runs" / "B1_glaive"
    assert "B1_glaive: 8 prompts kept of 15 records considered" in caplog.text
    assert (f"B1_glaive: 8 prompts kept (7 rejected), 16 rollouts (0 rejected), 0 rollouts already in {run_dir}, "
            "16 samples generated in ") in printed
    assert (f"B1_glaive: 8 prompts kept (7 rejected), 16 rollouts (0 rejected) in {run_dir}: 16 results (length=16), "
            "0 failed, 0 rollouts not generated yet") in printed
    assert "B1_glaive: wrote 16 rows" in printed


def counts_of(conversations: list[int], samples: int, rejects: list[dict]) -> PromptCounts:
    import numpy as np

    return PromptCounts.of(np.array(conversations, dtype=np.int64), samples, rejects)


def test_prompt_counts_tell_a_rejected_prompt_from_a_rejected_rollout():
    # conversations 0 and 1 kept with two rollouts each, but one of 1's was rejected (its drawn kwargs);
    # conversation 2 rejected whole (a prompt reject has no sample_index); 3 lost its only rollout
    rejects = [{"sample_id": 5, "conversation_id": 1, "sample_index": 1, "reason": "too_long"},
               {"sample_id": 6, "conversation_id": 2, "reason": "control_token"},
               {"sample_id": 8, "conversation_id": 3, "sample_index": 0, "reason": "too_long"}]
    counts = counts_of([0, 0, 1], 7, rejects)
    assert counts == PromptCounts(prompts=2, rollouts=3, samples=7, rejected_prompts=2, rejected_rollouts=1)
    assert counts.kept() == "2 prompts kept (2 rejected), 3 rollouts (1 rejected)"
    assert counts.unit == "rollouts"
    # one rollout of one turn per prompt: the three counts are one
    simple = counts_of([0, 1, 2], 3, [{"sample_id": 3, "reason": "duplicate"}])
    assert simple.kept() == "3 prompts kept (1 rejected)" and simple.unit == "samples"
    # one rollout per prompt, several turns: done counts prompts (conversations), generated counts samples
    turns = counts_of([0, 3], 6, [])
    assert turns.kept() == "2 prompts kept (0 rejected)" and turns.unit == "prompts"


def test_the_summary_and_coverage_lines_name_their_units():
    import numpy as np
    from collections import Counter

    turns = counts_of([0, 3], 6, [])
    summary = RunSummary(config="B2_hermes_fc", run_dir="run", counts=turns, already_done=1, remaining=1,
                         stopped="interrupted")
    for item in (result(3, "stop", 4), result(4, "stop", 4)):
        summary.add(item)
    lines = summary.lines()
    assert lines[0].startswith("B2_hermes_fc: 2 prompts kept (0 rejected), 1 already in run, 2 samples generated in ")
    assert lines[-1] == "  interrupted: 1 prompt left; run the same command again to continue"
    coverage = Coverage(config="B2_hermes_fc", run_dir="run", counts=turns, finish_reasons=Counter(stop=4), failed=[],
                        missing=np.array([3]), layouts={})
    assert coverage.lines()[0] == ("B2_hermes_fc: 2 prompts kept (0 rejected) in run: 4 results (stop=4), 0 failed, "
                                   "1 prompt not generated yet")
    assert coverage.missing_message().startswith("B2_hermes_fc: 1 of 2 prompts in run have no result yet")
