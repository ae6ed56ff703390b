"""What both SGLang adapters send: sampling parameters, request ids, and how errors read.

SGLang's defaults bite (`max_new_tokens=128`, `temperature=1.0`, and with `skip_tokenizer_init`
no EOS check), so every field we rely on is passed explicitly, stop ids from the model profile.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any

from eagle3_synth.errors import TransientEngineError
from eagle3_synth.engines.base import GenerationRequest, GenerationResult, SamplingParams, abort_result
from eagle3_synth.engines.retry import RetryPolicy, retry_async
from eagle3_synth.engines.sglang.window import InFlightWindow

# Besides 5xx, the statuses worth another try (SGLang's router retries the same).
RETRIED_STATUS = frozenset({408, 429})


def is_transient_status(status: int) -> bool:
    return status >= 500 or status in RETRIED_STATUS


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


def sglang_sampling_params(params: SamplingParams, sample_id: int) -> dict[str, Any]:
    """SGLang `sampling_params` for one sample.

    `sampling_seed` is seed + sample_id, so a sample draws the same way however the run was
    split or resumed; SGLang uses it under `--enable-deterministic-inference` and ignores it
    otherwise.
    """
    sampling: dict[str, Any] = {
        "max_new_tokens": params.max_new_tokens,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "top_k": params.top_k,
        "stop_token_ids": list(params.stop_token_ids),
    }
    if params.seed is not None:
        sampling["sampling_seed"] = params.seed + sample_id
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


class WindowedEngine:
    """What both SGLang adapters share: one request per prompt through an `InFlightWindow`.

    A subclass sets `_window` and implements `_generate_one(request, params)`.
    """

    _window: InFlightWindow

    @property
    def in_flight(self) -> int:
        """Requests submitted and not yet handed on (read by the progress display)."""
        return self._window.in_flight

    @property
    def max_in_flight(self) -> int:
        return self._window.size

    async def _generate_one(self, request: GenerationRequest, params: SamplingParams) -> GenerationResult:
        raise NotImplementedError

    def generate(self, requests: Iterable[GenerationRequest], params: SamplingParams) -> Iterator[GenerationResult]:
        return self._window.run(requests, lambda request: self._generate_one(request, params))
