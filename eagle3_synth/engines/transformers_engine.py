"""`transformers` engine: a local causal LM with `generate`, anywhere (CPU included).

Prompts are batched with left padding and an attention mask. Each returned sequence is cut right
after its first stop token (kept), so neither padding nor anything generated after the stop is
stored. Ids go from `generate` to the result untouched: nothing is decoded or re-encoded.

Sampling is per request and seeded per sample, not per batch (`RowSampler`): a sample draws its
tokens from its own generator, seeded with its request's seed (`seed + sample_id`, as SGLang seeds
each request) and warped with its own temperature/top-k/top-p/min-p, so its output does not depend
on which samples share its batch -- a resumed run, whose first batch is whatever the crash left,
and another `--batch-size` give the same rows. A batch of greedy requests only (temperature 0) is
`generate`'s own greedy decoding, unchanged; a batch generates up to its largest `max_new_tokens`
and each row is cut at its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from eagle3_synth.contract.ranges import check_range
from eagle3_synth.errors import ConfigError
from eagle3_synth.engines.base import (Engine, EngineOptions, GenerationRequest, GenerationResult, SamplingParams,
                                       take_requests, check_generation)


def cut_after_stop(new_ids: list[int], stop_ids: tuple[int, ...], max_new_tokens: int) -> tuple[list[int], str]:
    """Keep ids up to and including the first stop id within the row's own `max_new_tokens` (its
    batch may have generated further for a row with a larger cap); the finish reason follows from
    where it ends."""
    stops = set(stop_ids)
    new_ids = new_ids[:max_new_tokens]
    for i, token in enumerate(new_ids):
        if token in stops:
            return new_ids[: i + 1], "stop"
    return new_ids[:max_new_tokens], "length"


class RowSampler:
    """A `LogitsProcessor` that samples each row's next token from that row's own generator, then
    hands `generate` (run greedily) logits whose argmax is that token.

    Why a processor inside greedy `generate` rather than `do_sample=True` or a decode loop of our
    own: `do_sample=True` draws every row from the one global generator in one `multinomial` call
    (transformers 5.25 generation/utils.py `GenerationMixin._sample`), so a row's draws depend on its
    batch; a loop of our own would repeat `generate`'s KV cache, padding and stopping code. Greedy
    `generate` (the same `_sample`) calls its processors with the step's float32 logits, takes the
    argmax and replaces a finished row's token with padding: so a row whose logits are -inf
    everywhere but at the drawn token gets exactly that token.

    Per row, with that row's own params: the warpers transformers itself applies when sampling, in
    its order (temperature, top-k, top-p, min-p: `GenerationMixin._get_logits_processor`;
    generation/logits_process.py `TemperatureLogitsWarper`, `TopKLogitsWarper`, `TopPLogitsWarper`,
    `MinPLogitsWarper`), then one `torch.multinomial` draw from the row's generator, as `generate`
    samples (`_sample`).
    A row is processed alone (a [1, vocab] slice), so the arithmetic is that of an unbatched run.
    Rows already finished (a stop id among their generated tokens) draw nothing: a row's k-th token
    is its generator's k-th draw whatever its batch. (Draws after a row's stop could not change
    its stored ids anyway -- they come from its own generator -- but drawing nothing is plainly
    equal.) A greedy row (temperature 0) in a sampled batch keeps its logits as they are, so
    `generate`'s argmax is its greedy token.

    What batching can still change is the logits themselves: a left-padded batched forward rounds
    differently from an unbatched one (on the tiny test model in float32 they differ by ~4e-6), so
    a draw landing within that distance of a boundary between two tokens could pick the other one:
    about one step in a million. The same holds for any batched engine (SGLang too, outside its
    deterministic-inference mode); the draws themselves never depend on the batch.
    """

    def __init__(self, rows: list[SamplingParams], prompt_width: int, device: Any):
        import torch
        from transformers.generation.logits_process import (MinPLogitsWarper, TemperatureLogitsWarper,
                                                            TopKLogitsWarper, TopPLogitsWarper)

        # Unseeded (seed None): the row's generator from torch's global one, so runs still vary.
        self.generators = [None if params.temperature == 0 else torch.Generator(device=device).manual_seed(
            params.seed if params.seed is not None else int(torch.randint(2**62, ()).item())) for params in rows]
        self.warpers: list[list[Any]] = []
        for params in rows:
            warpers: list[Any] = []
            if params.temperature not in (0.0, 1.0):
                warpers.append(TemperatureLogitsWarper(params.temperature))
            if params.top_k > 0:
                warpers.append(TopKLogitsWarper(top_k=params.top_k))
            if params.top_p < 1.0:
                warpers.append(TopPLogitsWarper(top_p=params.top_p))
            if params.min_p > 0.0:
                warpers.append(MinPLogitsWarper(min_p=params.min_p))
            self.warpers.append(warpers)
        self.prompt_width = prompt_width
        self.stop_ids = torch.tensor(sorted({i for params in rows for i in params.stop_token_ids}), device=device)

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        finished = torch.isin(input_ids[:, self.prompt_width :], self.stop_ids).any(dim=-1).tolist()
        chosen = torch.full_like(scores, float("-inf"))
        for row, generator in enumerate(self.generators):
            if finished[row]:
                chosen[row, 0] = 0.0  # replaced by padding in generate; never stored
                continue
            if generator is None:  # greedy: generate's argmax of the row's own logits
                chosen[row] = scores[row]
                continue
            row_ids, row_scores = input_ids[row : row + 1], scores[row : row + 1]
            for warper in self.warpers[row]:
                row_scores = warper(row_ids, row_scores)
            probs = torch.nn.functional.softmax(row_scores, dim=-1)
            token = torch.multinomial(probs, num_samples=1, generator=generator)
            chosen[row, token[0, 0]] = 0.0
        return chosen


class TransformersEngine(Engine):
    def __init__(self, model: Any, pad_token_id: int, batch_size: int):
        self.model = model
        self.pad_token_id = pad_token_id
        self.batch_size = batch_size

    def _generate_batch(self, batch: list[GenerationRequest], run: SamplingParams) -> list[GenerationResult]:
        import torch

        rows = [request.params(run) for request in batch]
        width = max(len(r.prompt_ids) for r in batch)
        input_ids = torch.full((len(batch), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, request in enumerate(batch):
            n = len(request.prompt_ids)
            input_ids[row, width - n :] = torch.tensor(request.prompt_ids, dtype=torch.long)
            attention_mask[row, width - n :] = 1
        kwargs: dict[str, Any] = {"do_sample": False}
        if any(params.temperature > 0 for params in rows):
            from transformers import LogitsProcessorList

            kwargs["logits_processor"] = LogitsProcessorList([RowSampler(rows, width, self.model.device)])
        with torch.no_grad():
            sequences = self.model.generate(
                input_ids=input_ids.to(self.model.device),
                attention_mask=attention_mask.to(self.model.device),
                max_new_tokens=max(params.max_new_tokens for params in rows),
                eos_token_id=list(run.stop_token_ids),
                pad_token_id=self.pad_token_id,
                **kwargs,
            )
        results = []
        for row, request in enumerate(batch):
            new_ids = sequences[row, width:].tolist()
            output_ids, finish_reason = cut_after_stop(new_ids, rows[row].stop_token_ids, rows[row].max_new_tokens)
            results.append(
                GenerationResult(
                    sample_id=request.sample_id,
                    output_ids=output_ids,
                    finish_reason=finish_reason,
                    prompt_tokens=len(request.prompt_ids),
                    completion_tokens=len(output_ids),
                )
            )
        return [check_generation(request, result, params, "transformers")
                for request, result, params in zip(batch, results, rows)]

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
    check_range("batch_size", options.batch_size)
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    # The run's dtype (engines/__init__.py); "auto" (the checkpoint's own) only for an adapter used on its own.
    dtype = getattr(torch, options.dtype) if options.dtype else "auto"
    model = AutoModelForCausalLM.from_pretrained(options.model, trust_remote_code=options.trust_remote_code, dtype=dtype)
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
