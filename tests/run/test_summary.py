"""The end-of-run summary counts `length` finishes shorter than asked (the engine lowered the cap)."""

from __future__ import annotations

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
