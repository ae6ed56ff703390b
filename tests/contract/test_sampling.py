"""The `sampling` column: one function makes what the engine is sent and what the row records."""

from __future__ import annotations

import json

import pytest

from eagle3_synth.contract.row import check_sampling, dumps_sampling, is_lowered, sample_sampling
from eagle3_synth.engines import GenerationRequest, SamplingParams
from eagle3_synth.errors import ConfigError

ROLLOUT = {"max_new_tokens": 64, "temperature": 0.6, "top_p": 0.9, "top_k": 20, "min_p": 0.05, "seed": 7}


def test_a_samples_seed_is_the_runs_plus_its_sample_id():
    assert sample_sampling(ROLLOUT, 12) == {**ROLLOUT, "seed": 19}
    assert sample_sampling({**ROLLOUT, "seed": None}, 12)["seed"] is None
    assert list(json.loads(dumps_sampling(sample_sampling(ROLLOUT, 1)))) == [
        "temperature", "top_p", "top_k", "min_p", "max_new_tokens", "seed"]


def test_a_request_is_generated_with_its_own_sampling_else_the_runs_with_its_seed():
    run = SamplingParams(max_new_tokens=32, temperature=1.0, stop_token_ids=(2,), seed=3, vocab_size=100)
    assert GenerationRequest(5, [1]).params(run) == SamplingParams(max_new_tokens=32, temperature=1.0,
                                                                   stop_token_ids=(2,), seed=8, vocab_size=100)
    own = GenerationRequest(5, [1], sampling=sample_sampling(ROLLOUT, 5)).params(run)
    assert (own.temperature, own.top_p, own.top_k, own.min_p, own.max_new_tokens, own.seed) == (0.6, 0.9, 20, 0.05, 64, 12)
    assert own.stop_token_ids == (2,) and own.vocab_size == 100


def test_a_length_row_under_its_own_cap_is_lowered():
    sampling = dumps_sampling(sample_sampling(ROLLOUT, 0))
    assert is_lowered("length", 40, sampling)
    assert not is_lowered("length", 64, sampling)
    assert not is_lowered("stop", 40, sampling)
    assert not is_lowered("length", 40, "")  # no sampling recorded: unknown, never counted


@pytest.mark.parametrize("args, message", [
    ((64, 0.6, 1.0, -1, 1.5), "--min-p must be >= 0 and <= 1, got 1.5"),
    ((64, 0.6, 1.0, 0, 0.0), "--top-k must be >= 1 (or -1), got 0"),
    ((0, 0.6, 1.0), "--max-new-tokens must be >= 1, got 0"),
    ((64, -1.0, 1.0), "--temperature must be >= 0, got -1.0"),
])
def test_bad_sampling_values_name_their_option(args, message):
    with pytest.raises(ConfigError) as caught:
        check_sampling(*args)
    assert str(caught.value) == message
