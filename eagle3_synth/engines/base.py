"""The one small interface every engine adapter implements.

An adapter takes token-id prompts and yields per-sample results as they complete (in any order).
It knows nothing about datasets, configs or the Hub.

Dependent requests (a conversation's next turn is known only once its previous turn's result is
handed on) use one rule: the request iterator may yield `None`, meaning "nothing is ready until
you hand on a result you hold". An adapter then stops taking requests, hands on what completes,
and asks again; it never sees `None` while it holds nothing (`take_requests`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from itertools import islice
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from eagle3_synth.contract.sampling import check_sampling
from eagle3_synth.errors import ConfigError

__all__ = ["check_sampling"]  # re-exported: the one check lives in contract/sampling.py


@dataclass(frozen=True)
class SamplingParams:
    """Sampling parameters, always passed to engines explicitly (SGLang's defaults bite)."""

    max_new_tokens: int
    temperature: float
    stop_token_ids: tuple[int, ...]
    top_p: float = 1.0
    top_k: int = -1  # -1: no top-k cut
    # A run's params: the run's seed (a sample draws with seed + sample_id); a request's own
    # (`GenerationRequest.params`): the sample's seed itself.
    seed: int | None = None
    # Every id of a result must be below it: the model's embedding rows (`prompts.model_vocab`).
    # Never sent to an engine; None only where nothing knows it (an adapter tested on its own).
    vocab_size: int | None = None

    min_p: float = 0.0  # 0.0: no min-p cut

    def __post_init__(self) -> None:
        check_sampling(self.max_new_tokens, self.temperature, self.top_p, self.top_k, self.min_p)
        if not self.stop_token_ids:
            raise ConfigError("at least one stop token id is required")
        if self.vocab_size is not None and self.vocab_size < 1:
            raise ConfigError(f"the vocabulary size must be >= 1, got {self.vocab_size}")


@dataclass(frozen=True)
class GenerationRequest:
    sample_id: int
    prompt_ids: list[int]
    # SGLang priority scheduling (higher first); None = the server's default. Never changes an id.
    priority: int | None = None
    # This sample's sampling (`contract.sampling.sample_sampling`: its rollout's values and its own
    # seed); None = the run's params with seed + sample_id.
    sampling: Mapping[str, Any] | None = None

    def params(self, run: "SamplingParams") -> "SamplingParams":
        """The params this request is generated with: the run's stop ids and vocabulary, with the
        request's own sampling (the seed already the sample's). Every engine reads sampling here."""
        if self.sampling is None:
            return replace(run, seed=None if run.seed is None else run.seed + self.sample_id)
        return replace(run, **self.sampling)


@dataclass(frozen=True)
class SpeculativeCounts:
    """One request's speculative decoding, as SGLang reports it in `meta_info` (sglang 0.5.23
    srt/managers/tokenizer_manager.py `TokenizerManager._calculate_spec_decoding_metrics`): verify steps
    (`spec_verify_ct`), drafts accepted over all of them (`spec_num_correct_drafts`, the bonus token not
    counted), drafts proposed (`spec_num_proposed_drafts` = steps x (draft tokens - 1)), and how many
    steps accepted 0, 1, 2 ... drafts (`spec_correct_drafts_histogram`; empty when SGLang sent none),
    and SGLang's own `spec_accept_length` (completion tokens / verify steps), kept to check our figures
    against."""

    verify_steps: int
    correct_drafts: int
    proposed_drafts: int
    correct_drafts_histogram: tuple[int, ...] = ()
    accept_length: float | None = None


@dataclass
class GenerationResult:
    """One finished sample, as the engine reported it (ids unmodified)."""

    sample_id: int
    output_ids: list[int]
    finish_reason: str  # stop | length | abort
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    error: str | None = None  # set when the engine failed this sample (finish_reason "abort")
    retractions: int = 0  # SGLang's num_retractions: times it was retracted to free KV memory
    speculative: SpeculativeCounts | None = None  # an engine serving with speculative decoding


@dataclass(frozen=True)
class EngineOptions:
    """Everything any adapter may need; each adapter reads only its own fields."""

    model: str | None = None
    tokenizer: str | None = None
    trust_remote_code: bool = False
    device: str | None = None
    # The dtype the model runs in (engines/dtypes.py: --dtype or the checkpoint's; never `auto`);
    # None only without a model (replay) or an adapter tested on its own.
    dtype: str | None = None
    batch_size: int = 8
    replay_file: str | None = None
    urls: tuple[str, ...] = ()
    # sglang engines: a fixed number of requests in flight; None = follow the engine's load
    # (engines/sglang/loads.py), up to twice what it runs at once.
    max_in_flight: int | None = None
    request_timeout_s: float = 3600.0  # sglang-http: idle timeout (no data for this long); covers the queue wait before the first token
    max_retries: int = 8  # sglang engines: retries of a transient failure (connection, timeout, 5xx)
    engine_args: dict[str, Any] = field(default_factory=dict)
    # sglang engines: send each request's priority (`--priority`): the engine runs with, and a
    # server must have, enable_priority_scheduling.
    priority: bool = False


def take_requests(requests: Iterator["GenerationRequest | None"], most: int, holding: int = 0
                  ) -> tuple[list["GenerationRequest"], bool]:
    """Up to `most` requests, stopping early at a `None` (see the module doc); and whether the
    iterator is exhausted. `holding` is how many results the caller has not handed on yet: with
    none held a `None` could never be followed by a request, so it is a caller's error."""
    taken: list[GenerationRequest] = []
    for request in islice(requests, most):
        if request is None:
            if not taken and not holding:
                raise RuntimeError("the request iterator yielded None while the engine held no request: "
                                   "no result can come back to unblock it")
            return taken, False
        taken.append(request)
    return taken, len(taken) < most


class Engine(ABC):
    """Generate results for token-id prompts; yield each as soon as it is complete (`requests` may
    yield None: see the module doc). What an engine can do beyond that is declared here, each with
    the answer of an engine that cannot, so a caller asks the engine, never probes it."""

    # Requests sharing a prefix are best sent together: an engine with a prefix cache (SGLang's radix cache).
    groups_prefixes: bool = False

    @abstractmethod
    def generate(
        self, requests: Iterable[GenerationRequest | None], params: SamplingParams
    ) -> Iterator[GenerationResult]: ...

    @abstractmethod
    def close(self) -> None: ...

    @property
    def in_flight(self) -> int | None:
        """Requests submitted and not yet handed on (the progress display); None: not counted."""
        return None

    def max_prompt_tokens(self, max_new_tokens: int) -> int | None:
        """The longest prompt the engine accepts with this max_new_tokens; None: only the model's
        context (the run's own limit) bounds it."""
        return None

    def resolved_server_args(self) -> dict[str, object] | None:
        """The server arguments the engine runs with as it resolved them (SGLang's `get_server_info()`),
        read now; None: an engine without a server."""
        return None


K = TypeVar("K")


class StatesEngine(Engine):
    """An engine that also prefills prompts for their hidden states (the SGLang engines)."""

    @abstractmethod
    def prefill_states(self, rows: Iterable[tuple[K, list[int], str | None]], sampling: dict[str, object]
                       ) -> Iterator[tuple[K, object]]:
        """One prefill per (key, ids, rid), in completion order: (key, its hidden states) where rid is
        None; with a rid the engine writes them to a file named by it and hands on (key, None)."""


def abort_result(request: GenerationRequest, message: str) -> GenerationResult:
    """The result recorded for a sample the engine could not generate."""
    return GenerationResult(
        sample_id=request.sample_id,
        output_ids=[],
        finish_reason="abort",
        prompt_tokens=len(request.prompt_ids),
        completion_tokens=0,
        error=message,
    )
