"""Acceptance figures from SGLang's per-request counts, and those counts read from `meta_info`."""

from __future__ import annotations

import pytest

from eagle3_synth.engines.base import SpeculativeCounts, speculative_counts
from eagle3_synth.evaluate import Served, acceptance, greedy_check


def test_counts_read_from_meta_info_as_sglang_writes_them():
    # The keys sglang 0.5.23 `TokenizerManager._calculate_spec_decoding_metrics` sets (a real 0.5.23
    # response's meta_info, other keys dropped).
    meta = {"spec_accept_rate": 0.25, "spec_accept_length": 1.8, "spec_num_correct_drafts": 6,
            "spec_num_proposed_drafts": 24, "spec_verify_ct": 8, "spec_correct_drafts_histogram": [4, 2, 1, 0]}
    assert speculative_counts(meta) == SpeculativeCounts(8, 6, 24, (4, 2, 1, 0), 1.8)
    assert speculative_counts({"prompt_tokens": 5}) is None  # served without speculation
    assert speculative_counts({**meta, "spec_correct_drafts_histogram": None}).correct_drafts_histogram == ()


def test_acceptance_is_a_ratio_of_sums_with_the_spread_over_requests():
    served = [Served("B1", 0, 0, 10, SpeculativeCounts(4, 6, 12, (1, 1, 0, 2))),
              Served("B1", 1, 0, 5, SpeculativeCounts(4, 0, 12, (4,))),
              Served("B1", 2, 1, 1, None)]
    figures = acceptance(served)
    assert figures["rows"] == 3 and figures["rows_without_steps"] == 1
    assert figures["acceptance_length"] == pytest.approx(1 + 6 / 8)
    assert figures["tokens_per_step"] == pytest.approx(15 / 8)
    assert figures["acceptance_rate"] == pytest.approx(6 / 24)
    assert figures["correct_drafts_histogram"] == [5, 1, 0, 2]
    # steps that accepted >= 1, >= 2, >= 3 drafts, of all 8
    assert figures["per_position"] == pytest.approx([3 / 8, 2 / 8, 2 / 8])
    assert figures["acceptance_length_spread"]["p50"] == pytest.approx((2.5 + 1.0) / 2)


def test_no_verify_step_gives_no_figure_rather_than_a_division_by_zero():
    figures = acceptance([Served("B1", 0, 0, 1, None)])
    assert figures["acceptance_length"] is None and figures["per_position"] == []


def test_greedy_check_names_the_unequal_rows():
    served = [Served("B1", 7, 0, 3, None, equal_to_row=False, equal_to_baseline=True),
              Served("B1", 8, 0, 3, None, equal_to_row=True, equal_to_baseline=True),
              Served("B2", 9, 0, 3, None)]  # sampled: not checked
    check = greedy_check(served)
    assert check["row"] == {"checked": 2, "unequal": 1, "unequal_rows": ["B1:7"]}
    assert check["baseline"] == {"checked": 2, "unequal": 0, "unequal_rows": []}


def test_an_unequal_output_is_named_with_where_it_first_differs():
    from eagle3_synth.evaluate import first_difference

    assert first_difference([5, 6, 7], [5, 6, 7]) is None
    assert first_difference([5, 16, 7], [5, 20, 7]) == [1, 16, 20]
    assert first_difference([5, 6], [5, 6, 7]) == [2, None, 7]  # stopped early
    served = [Served("B1", 6, 0, 3, None, equal_to_baseline=False, differences={"baseline": [36, 16, 20]}),
              Served("B1", 7, 0, 3, None, equal_to_baseline=True)]
    check = greedy_check(served)
    assert check["baseline"] == {"checked": 2, "unequal": 1, "unequal_rows": ["B1:6 (output token 36: 16, not 20)"]}
    assert served[0].as_dict()["first_differences"] == {"baseline": [36, 16, 20]}
