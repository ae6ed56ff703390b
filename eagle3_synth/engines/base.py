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
from collections.abc import Iterable, Iterator, Mapping, Collection, Sequence
from dataclasses import dataclass, field, replace
from itertools import islice
from typing import Any, TypeVar

from eagle3_synth.contract.row import check_sampling, FINISH_REASONS, out_of_range
from eagle3_synth.errors import ConfigError, EngineError

# Every engine's results are checked before they are stored: a violation stops the run, naming the sample.
#
# One check for every engine (`check_generation`, over a `GenerationResult`, its request and the
# sampling params): sglang, sglang-http, transformers and replay (the import path for results made
# elsewhere) all call it, so a result that breaks the contract cannot reach the journal by any path:
# - `len(output_ids) == completion_tokens`, at most `max_new_tokens` of them;
# - `prompt_tokens == len(prompt_ids)` (nothing truncated or re-tokenized on the way);
# - every prompt and output id is in the model's vocabulary, `0 <= id < vocab_size`
#   (`contract.row.out_of_range`; the size is the model config's `vocab_size`, `prompts.prepare.model_vocab`);
# - the output does not start with the prompt (a server that echoes the input);
# - a `stop` has output ids and ends with one of the requested stop ids (kept, last); no stop id
#   occurs before the last position (the engine would have stopped there);
# - `finish_reason` is the contract's `stop` / `length` / `abort`.
# An engine-side abort is not a violation: it becomes that sample's error result, reported and
# generated again with `--retry-errors`.
#
# SGLang 0.5.23 returns `{"output_ids", "meta_info": {"finish_reason": {"type": ...}, "prompt_tokens",
# "completion_tokens", "cached_tokens", ...}}` (plus `"text"` when it has a tokenizer); `check_result`
# reads that dict into a `GenerationResult` and adds what only SGLang's `matched` tells:
# - a token stop ends with the matched id, and that id is one of the requested stop ids: SGLang
#   reports a NaN or out-of-range sampled token as `{"type": "stop", "matched": "NaN happened"}`
#   after writing an EOS/stop id in its place (sglang 0.5.23 srt/managers/schedule_batch.py
#   `Req._check_vocab_boundary_finish`), so a stop whose `matched` is a string (we never send stop
#   strings) or an id we did not request is that sample's error (journaled, regenerated with
#   `--retry-errors`), never a row;
# - a `length` finish may have fewer ids than `max_new_tokens`: the scheduler lowers a request's
#   `max_new_tokens` to `min(requested, max_req_len - input_len - 1)` and then to what the KV pool can
#   hold (srt/managers/scheduler.py `Scheduler.init_req_max_new_tokens`; `max_req_len =
#   min(context_len - 1, kv_capacity - 1)`, srt/managers/tp_worker.py `TpModelWorker.get_worker_info`), and
#   reports `{"type": "length", "length": <the lowered value>}` (schedule_batch.py
#   `Req.update_finish_state`). Such a row is valid
#   (`finish_reason` "length"); `is_short_length` tells it apart. More than `max_new_tokens` is not.

def _violation(request: GenerationRequest, source: str, what: str) -> EngineError:
    return EngineError(f"sample_id {request.sample_id}: {source} returned a result that breaks the contract: {what}")


def _int_field(meta: dict[str, Any], key: str, request: GenerationRequest, source: str) -> int:
    value = meta.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise _violation(request, source, f"meta_info.{key} is {value!r}, not an integer")
    return value


def abort_message(finish: dict[str, Any]) -> str:
    message = finish.get("message") or "aborted"
    status = finish.get("status_code")
    return f"aborted by SGLang: {message}" + (f" (status {status})" if status is not None else "")


def is_short_length(result: GenerationResult, max_new_tokens: int) -> bool:
    """A `length` finish with fewer tokens than asked: SGLang lowered max_new_tokens to fit the
    context or the KV budget (sglang 0.5.23 `Scheduler.init_req_max_new_tokens`). Still a valid row."""
    return result.finish_reason == "length" and result.completion_tokens < max_new_tokens


def unrequested_stop(finish: dict[str, Any], stop_token_ids: Collection[int] | None) -> str | None:
    """Why a `stop` finish is not a stop we asked for, or None when it is."""
    matched = finish.get("matched")
    if not isinstance(matched, int) or isinstance(matched, bool):
        # e.g. "NaN happened": a NaN / out-of-range token, replaced by an EOS id (`Req._check_vocab_boundary_finish`)
        return (f"finish_reason stop with matched {matched!r}, not a stop token id (SGLang reports a NaN or "
                "out-of-range sampled token this way, with an EOS id written in its place)")
    if stop_token_ids is not None and matched not in stop_token_ids:
        return f"finish_reason stop on token {matched}, which is not one of the requested stop ids {sorted(stop_token_ids)}"
    return None


def vocabulary_problem(what: str, ids: Sequence[int], vocab_size: int | None) -> str | None:
    """`what[i] = id is outside the vocabulary ...` for the first id out of range, None if none."""
    bad = out_of_range(ids, vocab_size) if vocab_size is not None else None
    if bad is None:
        return None
    return f"{what}[{bad[0]}] = {bad[1]} is outside the model's vocabulary (0 <= id < {vocab_size})"


def first_stop_before_end(ids: Sequence[int], stops: frozenset[int]) -> int | None:
    """Where the first stop id before the last position is (the engine should have stopped there), None
    if none."""
    if stops.isdisjoint(ids[:-1]):
        return None
    return next(i for i, token in enumerate(ids) if token in stops)


def output_problem(result: GenerationResult, params: SamplingParams) -> str | None:
    """What breaks the contract in a result's output, whatever made it; None when nothing does.

    Needs no request, so the replay engine checks a whole file with it before anything runs.
    An abort (the sample's error) has no output to check.
    """
    finish, ids = result.finish_reason, result.output_ids
    if finish == "abort":
        return None
    if finish not in FINISH_REASONS:
        return f"finish_reason {finish!r} is not one of {FINISH_REASONS}"
    if len(ids) != result.completion_tokens:
        return f"len(output_ids) = {len(ids)} but completion_tokens = {result.completion_tokens}"
    if len(ids) > params.max_new_tokens:
        return f"{len(ids)} output ids, more than max_new_tokens = {params.max_new_tokens}"
    problem = vocabulary_problem("output_ids", ids, params.vocab_size)
    if problem is not None:
        return problem
    stops = frozenset(params.stop_token_ids)
    if finish == "stop" and not ids:
        return "finish_reason stop with no output ids (the stop token must be kept)"
    if finish == "stop" and ids[-1] not in stops:
        return (f"finish_reason stop but the output ends with {ids[-1]}, not a stop id {sorted(stops)} "
                "(the stop token must be kept, last)")
    at = first_stop_before_end(ids, stops)
    if at is not None:
        return f"stop id {ids[at]} at output position {at} of {len(ids)} (the engine should have stopped there)"
    return None


def check_generation(request: GenerationRequest, result: GenerationResult, params: SamplingParams,
                     source: str) -> GenerationResult:
    """The contract check of every engine's result: returns it, or raises `EngineError` naming the
    sample (the run stops; what is journaled stays). An abort is returned as it is: the sample's error.

    `source` says where the result came from (a URL, "sglang.Engine", a replay file's line).
    """
    if result.finish_reason == "abort":
        return result
    if result.sample_id != request.sample_id:
        raise _violation(request, source, f"the result is for sample_id {result.sample_id}")
    prompt = request.prompt_ids
    if result.prompt_tokens != len(prompt):
        raise _violation(request, source, f"prompt_tokens = {result.prompt_tokens} but {len(prompt)} prompt ids were "
                                          "sent (truncated, e.g. --allow-auto-truncate, or re-tokenized)")
    problem = vocabulary_problem("prompt_ids", prompt, params.vocab_size) or output_problem(result, params)
    if problem is None and prompt and result.output_ids[: len(prompt)] == prompt:
        problem = "output_ids start with the prompt ids (the prompt leaked into the output)"
    if problem is not None:
        raise _violation(request, source, problem)
    return result


def speculative_counts(meta: dict[str, Any]) -> SpeculativeCounts | None:
    """The request's speculative decoding counts, when the engine decoded speculatively (SGLang sets
    them only for a request with at least one verify step: sglang 0.5.23 tokenizer_manager.py
    `TokenizerManager._calculate_spec_decoding_metrics`)."""
    steps, correct, proposed = (meta.get(key) for key in ("spec_verify_ct", "spec_num_correct_drafts", "spec_num_proposed_drafts"))
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (steps, correct, proposed)):
        return None
    histogram = meta.get("spec_correct_drafts_histogram")
    valid = isinstance(histogram, list) and all(isinstance(n, int) and not isinstance(n, bool) for n in histogram)
    length = meta.get("spec_accept_length")
    return SpeculativeCounts(steps, correct, proposed, tuple(histogram) if valid else (),
                             float(length) if isinstance(length, (int, float)) and not isinstance(length, bool) else None)


def check_result(request: GenerationRequest, response: Any, source: str, params: SamplingParams) -> GenerationResult:
    """Turn one SGLang result dict into a checked `GenerationResult`, or raise `EngineError` naming the sample.

    `source` says where the result came from (a URL, "sglang.Engine") for the message; `params` are
    the request's sampling params (its stop ids, max_new_tokens, the vocabulary size). A stop on an
    id that is not a requested stop id is returned as that sample's error result.
    """
    if not isinstance(response, dict):
        raise _violation(request, source, f"expected one result object, got {type(response).__name__}")
    meta = response.get("meta_info")
    if not isinstance(meta, dict):
        raise _violation(request, source, "no meta_info object")
    finish = meta.get("finish_reason")
    if not isinstance(finish, dict) or finish.get("type") not in FINISH_REASONS:
        raise _violation(request, source, f"finish_reason {finish!r} is not one of {FINISH_REASONS} (request unfinished?)")
    if finish["type"] == "abort":
        return abort_result(request, abort_message(finish))

    output_ids = response.get("output_ids")
    if not isinstance(output_ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in output_ids):
        raise _violation(request, source, "output_ids is not a list of integers (was the request sent as token ids?)")
    completion_tokens = _int_field(meta, "completion_tokens", request, source)
    prompt_tokens = _int_field(meta, "prompt_tokens", request, source)
    if finish["type"] == "stop":
        problem = unrequested_stop(finish, params.stop_token_ids)
        if problem is not None:
            return abort_result(request, f"{source}: {problem}")
        if output_ids and output_ids[-1] != finish["matched"]:
            raise _violation(request, source, f"stopped on token {finish['matched']} but the output ends with "
                                              f"{output_ids[-1]} (the stop token must be kept, last)")
    cached = meta.get("cached_tokens")
    # Times the scheduler took the request out of the running batch to free KV memory and ran it
    # again later (sglang 0.5.23 srt/managers/tokenizer_manager.py `TokenizerManager._handle_batch_output`):
    # KV thrashing.
    retractions = meta.get("num_retractions")
    result = GenerationResult(
        sample_id=request.sample_id,
        output_ids=output_ids,
        finish_reason=finish["type"],
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        cached_tokens=cached if isinstance(cached, int) else 0,
        retractions=retractions if isinstance(retractions, int) and not isinstance(retractions, bool) else 0,
        speculative=speculative_counts(meta),
    )
    return check_generation(request, result, params, source)


__all__ = ["check_sampling"]  # re-exported: the one check lives in contract/row.py


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
    # Every id of a result must be below it: the model's embedding rows (`prompts.prepare.model_vocab`).
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
    # This sample's sampling (`contract.row.sample_sampling`: its rollout's values and its own
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
    # The dtype the model runs in (engines/__init__.py: --dtype or the checkpoint's; never `auto`);
    # None only without a model (replay) or an adapter tested on its own.
    dtype: str | None = None
    batch_size: int = 8
    replay_file: str | None = None
    urls: tuple[str, ...] = ()
    # sglang engines: a fixed number of requests in flight; None = follow the engine's load
    # (engines/sglang/window.py), up to twice what it runs at once.
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
