"""The transformers engine stores exactly what the model generated: stop kept, padding never."""

from __future__ import annotations

import pytest
import torch

from eagle3_synth.prompts.templating import ChatTokenizer
from eagle3_synth.prompts.conversation import Conversation
from eagle3_synth.engines import EngineOptions, GenerationRequest, SamplingParams, create_engine
from eagle3_synth.engines.transformers_engine import cut_after_stop

from ..conftest import TINY_MODEL

QUESTIONS = [
    "What is the weather in Paris?",
    "Hi",
    "Convert 250 US dollars to euros, please, and tell me the rate you used for it.",
    "Explain binary search.",
    "Which language is 'Je suis un étudiant'?",
]


@pytest.fixture(scope="module")
def tiny():
    if not (TINY_MODEL / "config.json").exists():
        pytest.skip("tiny model fixture missing: run python -m tests.fixtures.train_tiny_model")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(TINY_MODEL)
    model = AutoModelForCausalLM.from_pretrained(TINY_MODEL).eval()
    return tokenizer, model


def requests_for(tokenizer) -> list[GenerationRequest]:
    chat = ChatTokenizer(tokenizer)
    return [
        GenerationRequest(i, chat.prompt_ids(Conversation(messages=[{"role": "user", "content": q}])))
        for i, q in enumerate(QUESTIONS)
    ]


def stop_ids(tokenizer) -> tuple[int, ...]:
    """The kimi_k2 profile's stop ids, as the build command uses them."""
    from eagle3_synth.contract.profiles import PROFILES, resolve_markers

    return resolve_markers(PROFILES["kimi_k2"], tokenizer).stop_ids


def test_cut_after_stop_keeps_the_stop_and_drops_what_follows():
    assert cut_after_stop([5, 6, 2, 0, 0], (2,), 5) == ([5, 6, 2], "stop")
    assert cut_after_stop([5, 6, 7], (2,), 3) == ([5, 6, 7], "length")
    assert cut_after_stop([2, 2], (2, 9), 2) == ([2], "stop")
    assert cut_after_stop([5, 6, 7, 2], (2,), 3) == ([5, 6, 7], "length"), "a stop past the row's own cap"


def test_greedy_batched_equals_each_prompt_generated_alone(tiny):
    tokenizer, model = tiny
    requests = requests_for(tokenizer)
    assert len({len(r.prompt_ids) for r in requests}) > 1, "prompts of different lengths exercise padding"
    params = SamplingParams(max_new_tokens=48, temperature=0.0, stop_token_ids=stop_ids(tokenizer))
    engine = create_engine("transformers", EngineOptions(model=str(TINY_MODEL), batch_size=3))
    results = {r.sample_id: r for r in engine.generate(requests, params)}
    assert sorted(results) == [r.sample_id for r in requests]
    pad = engine.pad_token_id
    for request in requests:
        with torch.no_grad():
            alone = model.generate(torch.tensor([request.prompt_ids]), attention_mask=torch.ones(1, len(request.prompt_ids), dtype=torch.long),
                                   max_new_tokens=48, do_sample=False, eos_token_id=list(params.stop_token_ids),
                                   pad_token_id=pad)
        new = alone[0, len(request.prompt_ids):].tolist()
        result = results[request.sample_id]
        expected, reason = cut_after_stop(new, params.stop_token_ids, 48)
        assert result.output_ids == expected
        assert result.finish_reason == reason
        assert result.completion_tokens == len(result.output_ids)
        if reason == "stop":
            assert result.output_ids[-1] in params.stop_token_ids
            assert all(t not in params.stop_token_ids for t in result.output_ids[:-1])


def sampled_alone(model, request, params, pad) -> list[int]:
    """transformers' own sampling of one prompt, unbatched, with the global generator seeded
    `seed + sample_id`: what the engine must give the sample in any batch."""
    torch.manual_seed(params.seed + request.sample_id)
    with torch.no_grad():
        alone = model.generate(torch.tensor([request.prompt_ids]),
                               attention_mask=torch.ones(1, len(request.prompt_ids), dtype=torch.long),
                               max_new_tokens=params.max_new_tokens, do_sample=True, temperature=params.temperature,
                               top_p=params.top_p, top_k=max(params.top_k, 0), eos_token_id=list(params.stop_token_ids),
                               pad_token_id=pad)
    return cut_after_stop(alone[0, len(request.prompt_ids):].tolist(), params.stop_token_ids, params.max_new_tokens)[0]


def sampled(requests, params, batch_size) -> dict[int, list[int]]:
    engine = create_engine("transformers", EngineOptions(model=str(TINY_MODEL), batch_size=batch_size))
    return {r.sample_id: r.output_ids for r in engine.generate(requests, params)}


@pytest.mark.parametrize("temperature, top_p, top_k", [(1.0, 1.0, -1), (0.8, 0.9, 20)])
def test_a_sampled_row_is_its_prompt_sampled_alone_with_seed_plus_its_sample_id(tiny, temperature, top_p, top_k):
    """Each row of a batch equals transformers' own sampling of its prompt alone, seeded with
    `--seed` + its sample id (the per-batch seed gave every row after the first other ids)."""
    tokenizer, model = tiny
    requests = [GenerationRequest(10 + r.sample_id, r.prompt_ids) for r in requests_for(tokenizer)]
    params = SamplingParams(max_new_tokens=40, temperature=temperature, top_p=top_p, top_k=top_k,
                            stop_token_ids=stop_ids(tokenizer), seed=7)
    results = sampled(requests, params, batch_size=3)
    for request in requests:
        assert results[request.sample_id] == sampled_alone(model, request, params, tokenizer.pad_token_id)


def test_a_sampled_row_does_not_depend_on_its_batch(tiny):
    """Batch sizes 1, 2 and 4, the requests reversed, or only the last three (what a resumed run
    hands out after a crash mid-batch) give every sample the same ids: rows that finish early draw
    nothing more, so the others' draws stay theirs."""
    tokenizer, model = tiny
    requests = requests_for(tokenizer)
    params = SamplingParams(max_new_tokens=40, temperature=1.0, stop_token_ids=stop_ids(tokenizer), seed=3)
    one = sampled(requests, params, batch_size=1)
    assert len({len(ids) for ids in one.values()}) > 1, "rows finishing at different steps exercise finished rows"
    assert sampled(requests, params, batch_size=4) == one
    assert sampled(requests[::-1], params, batch_size=2) == one
    assert sampled(requests[2:], params, batch_size=4) == {i: one[i] for i in (2, 3, 4)}
    # Sampling really happened, and the seed decides it.
    greedy = sampled(requests, SamplingParams(max_new_tokens=40, temperature=0.0, stop_token_ids=params.stop_token_ids), 4)
    assert greedy != one
    assert sampled(requests, SamplingParams(max_new_tokens=40, temperature=1.0, stop_token_ids=params.stop_token_ids,
                                            seed=4), 4) != one


def test_build_with_the_tiny_model_stores_what_the_model_generated(tiny, tmp_path):
    """CLI end to end with the transformers engine: the dataset's ids are the model's, exactly."""
    import json

    from datasets import load_dataset

    from eagle3_synth.cli import main
    from eagle3_synth.prompts.configs import sample_prompts_path

    tokenizer, model = tiny
    out = tmp_path / "ds"
    assert main(["build", "B1_glaive", "--model", str(TINY_MODEL), "--limit", "3", "--max-new-tokens", "64",
                 "--temperature", "0", "--batch-size", "2", "--out", str(out)]) == 0
    ds = load_dataset(str(out), "B1_glaive", split="train")
    assert ds["sample_id"] == [0, 1, 2]
    chat = ChatTokenizer(tokenizer)
    stops = list(stop_ids(tokenizer))
    with open(sample_prompts_path("B1_glaive"), encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle][:3]
    for row, record in zip(ds, records):
        prompt_ids = chat.prompt_ids(Conversation(messages=record["messages"], tools=record.get("tools")))
        assert row["prompt_ids"] == prompt_ids
        with torch.no_grad():
            alone = model.generate(torch.tensor([prompt_ids]), attention_mask=torch.ones(1, len(prompt_ids), dtype=torch.long),
                                   max_new_tokens=64, do_sample=False, eos_token_id=stops,
                                   pad_token_id=tokenizer.pad_token_id)
        expected, reason = cut_after_stop(alone[0, len(prompt_ids):].tolist(), tuple(stops), 64)
        assert row["output_ids"] == expected and row["finish_reason"] == reason
        if reason == "stop":
            assert row["stop_index"] == len(expected) - 1


def test_each_request_is_sampled_with_its_own_params_in_a_shared_batch(tiny):
    """A greedy request, a sampled one and one with a smaller cap share a batch: each gets what it
    gets alone with its own params (a greedy row stays greedy; the small cap cuts only its row)."""
    from eagle3_synth.contract.row import sample_sampling

    tokenizer, model = tiny
    stops = stop_ids(tokenizer)
    run = SamplingParams(max_new_tokens=40, temperature=1.0, stop_token_ids=stops, seed=5)
    own = [{"temperature": 0.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0, "max_new_tokens": 40, "seed": 5},
           {"temperature": 0.8, "top_p": 0.9, "top_k": 20, "min_p": 0.0, "max_new_tokens": 40, "seed": 5},
           {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0, "max_new_tokens": 6, "seed": 5}]
    requests = [GenerationRequest(r.sample_id, r.prompt_ids, sampling=sample_sampling(own[r.sample_id % 3], r.sample_id))
                for r in requests_for(tokenizer)]
    together = sampled(requests, run, batch_size=5)
    for request in requests:
        alone = sampled([request], request.params(run), batch_size=1)  # its own params as the run's
        assert together[request.sample_id] == alone[request.sample_id]
    assert all(len(together[r.sample_id]) <= 6 for r in requests if r.sample_id % 3 == 2)
    greedy = sampled([GenerationRequest(0, requests[0].prompt_ids)],
                     SamplingParams(max_new_tokens=40, temperature=0.0, stop_token_ids=stops), 1)
    assert together[0] == greedy[0]


def test_min_p_cuts_the_tail_as_transformers_does(tiny):
    tokenizer, model = tiny
    request = requests_for(tokenizer)[0]
    params = SamplingParams(max_new_tokens=30, temperature=1.5, min_p=0.2, stop_token_ids=stop_ids(tokenizer), seed=1)
    torch.manual_seed(params.seed + request.sample_id)
    with torch.no_grad():
        alone = model.generate(torch.tensor([request.prompt_ids]),
                               attention_mask=torch.ones(1, len(request.prompt_ids), dtype=torch.long),
                               max_new_tokens=30, do_sample=True, temperature=1.5, min_p=0.2, top_k=0,
                               eos_token_id=list(params.stop_token_ids), pad_token_id=tokenizer.pad_token_id)
    expected = cut_after_stop(alone[0, len(request.prompt_ids):].tolist(), params.stop_token_ids, 30)[0]
    assert sampled([request], params, batch_size=1)[request.sample_id] == expected
