"""What both SGLang adapters send: sampling parameters, request ids, and how errors read.

SGLang's defaults bite (`max_new_tokens=128`, `temperature=1.0`, and with `skip_tokenizer_init`
no EOS check), so every field we rely on is passed explicitly, stop ids from the model profile.
"""

from __future__ import annotations

import asyncio
import logging
import random
import secrets
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from eagle3_synth.errors import ConfigError, EngineError, TransientEngineError
from eagle3_synth.engines.base import GenerationRequest, GenerationResult, SamplingParams, StatesEngine, abort_result
from eagle3_synth.engines.sglang.window import InFlightWindow
from eagle3_synth.contract.ranges import check_range

# Retries, in one place: a transient failure is retried with capped exponential backoff and jitter.
#
# Transient vs. invalid is a type (`eagle3_synth.errors.TransientEngineError`), not a flag: only
# that type is retried; anything else goes straight to the caller. Jitter ("full jitter": a uniform
# delay between 0 and the capped exponential) keeps hundreds of in-flight requests that failed
# together, when a server restarted, from coming back together.

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a transient failure is retried."""

    max_retries: int = 8  # attempts after the first; 0 = never retry
    base_delay_s: float = 0.5  # cap of the first backoff; doubles each retry
    max_delay_s: float = 30.0  # no single wait is longer than this

    def __post_init__(self) -> None:
        check_range("max_retries", self.max_retries)
        if self.base_delay_s < 0 or self.max_delay_s < self.base_delay_s:
            raise ConfigError(f"retry delays must satisfy 0 <= base <= max, got {self.base_delay_s}, {self.max_delay_s}")

    def delay(self, retry: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before retry number `retry` (0-based): uniform in [0, min(max, base*2^retry)]."""
        cap = min(self.max_delay_s, self.base_delay_s * (2**retry))
        return (rng or random).uniform(0.0, cap)


async def retry_async(
    operation: Callable[[int], Awaitable[T]],
    policy: RetryPolicy,
    *,
    describe: str,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    rng: random.Random | None = None,
) -> T:
    """Run `operation(attempt)` until it returns, retrying `TransientEngineError` up to the policy.

    `attempt` (0-based) lets the operation vary per try (another server, a fresh request id).
    When the retries are used up, the last `TransientEngineError` is raised again with the number
    of attempts in its message; its type is kept, so callers can still tell failures apart.
    """
    retry = 0
    while True:
        try:
            return await operation(retry)
        except TransientEngineError as exc:
            if retry >= policy.max_retries:
                exc.args = (f"{describe}: gave up after {retry + 1} attempts; last error: {exc}",)
                raise
            wait = policy.delay(retry, rng)
            log.debug("%s: attempt %d failed (%s); retrying in %.2fs", describe, retry + 1, exc, wait)
            retry += 1
            await sleep(wait)


log = logging.getLogger(__name__)
K = TypeVar("K")

# Besides 5xx, the statuses worth another try (SGLang's router retries the same).
RETRIED_STATUS = frozenset({408, 429})


def is_transient_status(status: int) -> bool:
    return status >= 500 or status in RETRIED_STATUS


# sglang 0.5.23 srt/managers/tokenizer_manager.py TokenizerManager._init_req_state: a rid still in
# `rid_to_state` is refused with ValueError (HTTP 400, or a stream's error chunk). An aborted request
# stays there until the scheduler confirms the abort (a few seconds), and sglang-router 0.3.2 retries a
# failed or timed-out request with the same body, rid included (sglang_router/router_args.py RouterArgs
# `request_timeout_secs`, `retry_*`). Our own attempts use a fresh rid each (RequestIds), so this 400
# can only answer a retry made between us and the worker: transient, retried with a new rid after a
# backoff.
DUPLICATE_RID_MESSAGE = "Duplicate request ID detected"


def is_duplicate_rid(status: int, message: str) -> bool:
    return status == 400 and DUPLICATE_RID_MESSAGE in message


def merge_chunk(output: list[int], chunk: dict[str, Any]) -> list[int]:
    """The output ids so far after one stream chunk.

    With skip_tokenizer_init, sglang 0.5.23 srt/managers/tokenizer_manager.py
    `TokenizerManager._handle_batch_output` sends every chunk's `output_ids` cumulative (all ids so far;
    the non-stream result's list) by default, and only the new ids under --incremental-streaming-output;
    `meta_info.completion_tokens` counts all ids so far in both. A chunk as long as that count is
    cumulative (a delta that long can only be the first, where both read the same); anything else is a
    delta.
    """
    ids = chunk.get("output_ids")
    if not isinstance(ids, list):
        return output
    meta = chunk.get("meta_info")
    total = meta.get("completion_tokens") if isinstance(meta, dict) else None
    return list(ids) if total == len(ids) else output + list(ids)


def stream_status(data: dict[str, Any]) -> tuple[int, Any]:
    """The status a stream's last chunk stands for: an error chunk carries its `code`
    (srt/entrypoints/http_server.py `serve_generate_request`); an abort with a status (400-599) ends a stream
    as its final chunk where a non-stream call would answer that status (tokenizer_manager.py
    `TokenizerManager._handle_abort_finish_reason`)."""
    error = data.get("error")
    if error is not None:
        code = error.get("code") if isinstance(error, dict) else None
        return (code if isinstance(code, int) else 400), data
    meta = data.get("meta_info")
    reason = meta.get("finish_reason") if isinstance(meta, dict) else None
    if isinstance(reason, dict) and reason.get("type") == "abort":
        code = reason.get("status_code")
        if isinstance(code, int) and 400 <= code < 600:
            return code, {"error": {"message": str(reason.get("message"))}}
    return 200, data


async def result_with_retries(
    request: GenerationRequest,
    attempt: Callable[[int], Awaitable[GenerationResult]],
    policy: RetryPolicy,
    fatal: tuple[type[TransientEngineError], ...] = (),
) -> GenerationResult:
    """`attempt(n)` until it returns a result; when the retries are used up, that sample's error.

    A failure of a `fatal` type is raised instead (for a failure that is not the sample's fault).
    """
    try:
        return await retry_async(attempt, policy, describe=f"sample_id {request.sample_id}")
    except fatal:
        raise
    except TransientEngineError as exc:
        return abort_result(request, str(exc))


def sent_priority(priority: int | None, low_values_first: bool) -> dict[str, Any]:
    """The request's `priority` field: ours means higher first (the turns a conversation may still
    have); a server started with `schedule_low_priority_values_first` runs lower values first
    (sglang 0.5.23 srt/arg_groups/fields/schedule.py `Schedule`), so it is sent negated there."""
    if priority is None:
        return {}
    return {"priority": -priority if low_values_first else priority}


def priority_order(url: str, info: dict[str, Any]) -> bool | None:
    """What a request's priority does on a server (sglang 0.5.23 srt/managers/scheduler.py
    `Scheduler._set_or_validate_priority`): with `enable_priority_scheduling` it orders the queue
    (returns whether low values go first); without it the priority is ignored and the request served
    (None, and a warning), unless `abort_on_priority_when_disabled`, which aborts every such request
    with 503 (refused here)."""
    if info.get("enable_priority_scheduling") is True:
        return info.get("schedule_low_priority_values_first") is True
    if info.get("abort_on_priority_when_disabled") is True:
        raise ConfigError(f"--url {url}: the server runs with --abort-on-priority-when-disabled and without "
                          "--enable-priority-scheduling, so it aborts every request that has a priority: restart "
                          "it with --enable-priority-scheduling, or drop --priority")
    log.warning("%s runs without --enable-priority-scheduling: it serves each request and ignores its "
                "priority, so --priority changes nothing there (start the server with "
                "--enable-priority-scheduling for long conversations' turns to go first)", url)
    return None


def sglang_sampling_params(params: SamplingParams) -> dict[str, Any]:
    """SGLang `sampling_params` for one request (`GenerationRequest.params`: its own sampling).

    `sampling_seed` is the sample's seed (seed + sample_id), so a sample draws the same way however
    the run was split or resumed; SGLang uses it under `--enable-deterministic-inference` and
    ignores it otherwise. `min_p` is SGLang's own parameter (srt/sampling/sampling_params.py,
    default 0.0: off), always sent like the rest.
    """
    sampling: dict[str, Any] = {
        "max_new_tokens": params.max_new_tokens,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "top_k": params.top_k,
        "min_p": params.min_p,
        "stop_token_ids": list(params.stop_token_ids),
    }
    if params.seed is not None:
        sampling["sampling_seed"] = params.seed
    return sampling


class RequestIds:
    """Request ids unique per attempt: a retried request may still be registered under the old id."""

    def __init__(self) -> None:
        self.tag = secrets.token_hex(4)

    def __call__(self, sample_id: int, attempt: int) -> str:
        return f"eagle3-synth-{self.tag}-{sample_id}-{attempt}"


def error_text(body: Any) -> str:
    """The message inside any of SGLang's error bodies (`{"error": str}`, `{"error": {"message"}}`,
    `{"object": "error", "message"}`), else the body itself, shortened."""
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and "message" in error:
            return str(error["message"])
        if isinstance(error, str):
            return error
        if "message" in body:
            return str(body["message"])
    text = body if isinstance(body, str) else repr(body)
    return text if len(text) <= 500 else text[:500] + "..."


class WindowedEngine(StatesEngine):
    """What both SGLang adapters share: one request per prompt through an `InFlightWindow`, and
    the limits and settings read from the servers' info.

    A subclass sets `_window` and `limits`, and implements `_generate_one`, `_prefill_one` and
    `resolved_server_args`.
    """

    _window: InFlightWindow
    limits: "ContextLimits"
    groups_prefixes = True  # SGLang's radix cache

    @property
    def in_flight(self) -> int:
        return self._window.in_flight

    def max_prompt_tokens(self, max_new_tokens: int) -> int | None:
        return self.limits.max_prompt_tokens(max_new_tokens)

    @property
    def max_in_flight(self) -> int:
        return self._window.size

    async def _generate_one(self, request: GenerationRequest, params: SamplingParams) -> GenerationResult:
        raise NotImplementedError

    def generate(self, requests: Iterable[GenerationRequest], params: SamplingParams) -> Iterator[GenerationResult]:
        return self._window.run(requests, lambda request: self._generate_one(request, params))

    async def _prefill_one(self, ids: list[int], sampling: dict[str, Any], rid: str | None) -> Any:
        raise NotImplementedError

    def prefill_states(self, rows: Iterable[tuple[K, list[int], str | None]], sampling: dict[str, Any]
                       ) -> Iterator[tuple[K, Any]]:
        """Through the same window as `generate` (an engine that dies ends the run the same way); the
        states of a row without a rid come back as one [T, width] list. The engine must run with the
        capture's arguments (train/hidden_states/sglang_capture.py)."""
        async def one(row: tuple[K, list[int], str | None]) -> tuple[K, Any]:
            key, ids, rid = row
            return key, await self._prefill_one(ids, sampling, rid)
        return self._window.run(rows, one)


def prefill_hidden_states(response: Any, where: str, rid: str | None) -> Any:
    """The prefill's entry of a `return_hidden_states` response (`meta_info.hidden_states[0]`,
    sglang 0.5.23 srt/managers/scheduler_components/batch_result_processor.py
    `SchedulerBatchResultProcessor._append_prefill_hidden_states`); None for a
    request with an id (its states went to a file)."""
    if rid is not None:
        return None
    states = ((response or {}).get("meta_info") or {}).get("hidden_states") if isinstance(response, dict) else None
    if not states:
        raise EngineError(f"{where}: the response has no hidden states (is the engine started with "
                          f"enable_return_hidden_states?): {error_text(response)}")
    return states[0]


# sglang 0.5.23 srt/speculative/spec_info.py `SpeculativeAlgorithm.is_eagle`: these reserve draft slots.
_RESERVING_SPEC_ALGORITHMS = frozenset({"EAGLE", "EAGLE3", "FROZEN_KV_MTP"})


def _positive_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


@dataclass(frozen=True)
class ContextLimits:
    """The prompt lengths an SGLang server accepts, from its server info.

    sglang 0.5.23 rejects a prompt of n ids (with `allow_auto_truncate` off) when
    - `n + reserved >= context_len`: "The input (...) is longer than the model's context length"
      (srt/managers/tokenizer_manager.py `TokenizerManager._validate_one_request`);
    - `n + reserved + max_new_tokens > context_len`: "Requested token count exceeds the model's
      maximum context length of {C} tokens. ..." (the same function);
    - `n >= max_req_input_len` (= min(context_len - 1, kv_capacity - 1) - 5,
      srt/managers/tp_worker.py `TpModelWorker.get_worker_info`): "Input length (...) exceeds the
      maximum allowed length" (srt/managers/utils.py `validate_input_length`, from scheduler.py
      `Scheduler._handle_generate_request`).
    `reserved` is the draft-token slots of EAGLE-style speculative decoding
    (srt/managers/utils.py `compute_num_reserved_tokens`), 0 otherwise.
    """

    context_length: int | None = None
    max_req_input_len: int | None = None
    reserved_tokens: int = 0

    @classmethod
    def from_server_info(cls, info: dict[str, Any]) -> "ContextLimits":
        reserved = 0
        if str(info.get("speculative_algorithm") or "").upper() in _RESERVING_SPEC_ALGORITHMS:
            topk = _positive_int(info.get("speculative_eagle_topk")) or 0
            steps = _positive_int(info.get("speculative_num_steps")) or 0
            drafts = _positive_int(info.get("speculative_num_draft_tokens")) or 0
            reserved = max(topk * steps, drafts)
        return cls(_positive_int(info.get("context_length")), _positive_int(info.get("max_req_input_len")), reserved)

    def combine(self, other: "ContextLimits") -> "ContextLimits":
        """The limits that hold on both servers (the smaller of each)."""
        def smaller(a: int | None, b: int | None) -> int | None:
            return b if a is None else a if b is None else min(a, b)

        return ContextLimits(smaller(self.context_length, other.context_length),
                             smaller(self.max_req_input_len, other.max_req_input_len),
                             max(self.reserved_tokens, other.reserved_tokens))

    def max_prompt_tokens(self, max_new_tokens: int) -> int | None:
        """The longest prompt SGLang accepts with this max_new_tokens; None when nothing is known."""
        limits = []
        if self.context_length is not None:
            limits.append(self.context_length - self.reserved_tokens - max_new_tokens)
        if self.max_req_input_len is not None:
            limits.append(self.max_req_input_len - 1)
        return min(limits) if limits else None
