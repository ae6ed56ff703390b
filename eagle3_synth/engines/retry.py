"""Retries, in one place: a transient failure is retried with capped exponential backoff and jitter.

Transient vs. invalid is a type (`eagle3_synth.errors.TransientEngineError`), not a flag: only
that type is retried; anything else goes straight to the caller. Jitter ("full jitter": a uniform
delay between 0 and the capped exponential) keeps hundreds of in-flight requests that failed
together, when a server restarted, from coming back together.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from eagle3_synth.contract.ranges import check_range
from eagle3_synth.errors import ConfigError, TransientEngineError

log = logging.getLogger(__name__)

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
