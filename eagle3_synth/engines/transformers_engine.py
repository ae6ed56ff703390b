"""`transformers` engine: a local causal LM with `generate`, anywhere (CPU included).

Prompts are batched with left padding and an attention mask. Each returned sequence is cut right
after its first stop token (kept), so neither padding nor anything generated after the stop is
stored. Ids go from `generate` to the result untouched: nothing is decoded or re-encoded.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from eagle3_synth.errors import ConfigError
from eagle3_synth.engines.base import (EngineOptions, GenerationRequest, GenerationResult, SamplingParams,
                                       take_requests)
from eagle3_synth.engines.result_checks import check_generation


def cut_after_stop(new_ids: list[int], stop_ids: tuple[int, ...], max_new_tokens: int) -> tuple[list[int], str]:
    """Keep ids up to and including the first stop id; the finish reason follows from where it ends."""
    stops = set(stop_ids)
    for i, token in enumerate(new_ids):
        if token in stops:
            return new_ids[: i + 1], "stop"
    return new_ids[:max_new_tokens], "length"


class TransformersEngine:
    def __init__(self, model: Any, pad_token_id: int, batch_size: int):
        self.model = model
        self.pad_token_id = pad_token_id
        self.batch_size = batch_size

    def _generate_batch(self, batch: list[GenerationRequest], params: SamplingParams) -> list[GenerationResult]:
        import torch

        width = max(len(r.prompt_ids) for r in batch)
        input_ids = torch.full((len(batch), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, request in enumerate(batch):
            n = len(request.prompt_ids)
            input_ids[row, width - n :] = torch.tensor(request.prompt_ids, dtype=torch.long)
            attention_mask[row, width - n :] = 1
        if params.seed is not None:
            # Seeded per batch by its first sample id, so a batch's outputs do not depend on
            # which batches ran before it (a resumed run repeats them).
            torch.manual_seed(params.seed + batch[0].sample_id)
        sampling = params.temperature > 0
        kwargs: dict[str, Any] = {"do_sample": sampling}
        if sampling:
            kwargs.update(temperature=params.temperature, top_p=params.top_p, top_k=params.top_k if params.top_k > 0 else 0)
        with torch.no_grad():
            sequences = self.model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                max_new_tokens=params.max_new_tokens,
                eos_token_id=list(params.stop_token_ids),
                pad_token_id=self.pad_token_id,
                **kwargs,
            )
        results = []
        for row, request in enumerate(batch):
            new_ids = sequences[row, width:].tolist()
            output_ids, finish_reason = cut_after_stop(new_ids, params.stop_token_ids, params.max_new_tokens)
            results.append(
                GenerationResult(
                    sample_id=request.sample_id,
                    output_ids=output_ids,
                    finish_reason=finish_reason,
                    prompt_tokens=len(request.prompt_ids),
                    completion_tokens=len(output_ids),
                )
            )
        return [check_generation(request, result, params, "transformers") for request, result in zip(batch, results)]

    def generate(self, requests: Iterable[GenerationRequest], params: SamplingParams) -> Iterator[GenerationResult]:
        iterator = iter(requests)
        exhausted = False
        while not exhausted:
            batch, exhausted = take_requests(iterator, self.batch_size)
            if batch:
                yield from self._generate_batch(batch, params)

    def close(self) -> None:
        self.model = None


def create(options: EngineOptions) -> TransformersEngine:
    if not options.model:
        raise ConfigError("--engine transformers needs --model PATH (a local model folder)")
    if options.batch_size < 1:
        raise ConfigError(f"--batch-size must be >= 1, got {options.batch_size}")
    from transformers import AutoConfig, AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(options.model, trust_remote_code=options.trust_remote_code)
    model.to(options.device or "cpu")
    model.eval()
    config = AutoConfig.from_pretrained(options.model, trust_remote_code=options.trust_remote_code)
    pad = getattr(model.generation_config, "pad_token_id", None)
    if pad is None:
        pad = getattr(config, "pad_token_id", None)
    if pad is None:
        eos = getattr(config, "eos_token_id", None)
        pad = eos[0] if isinstance(eos, list) else eos
    if pad is None:
        raise ConfigError(f"model {options.model}: no pad_token_id or eos_token_id in its config to pad batches with")
    return TransformersEngine(model, int(pad), options.batch_size)
