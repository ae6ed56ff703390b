"""`sglang-http` engine: SGLang servers or an `sglang-router` through the native `/generate`.

One prompt per request (a router picks one worker per HTTP request, and a batch request returns
only when its slowest prompt ends), `max_in_flight` requests at once over keep-alive connections
(aiohttp: the fastest of the clients measured, see BENCHMARKS.md). Several `--url`s are used in
turn; a URL that refuses connections is skipped for a while.

Failures:
- connection errors, timeouts, 408, 429 and 5xx are retried with backoff and jitter (retry.py);
- any other 4xx (a prompt longer than the context, a bad sampling value) is that sample's error;
- retries used up: a 5xx or timeout becomes that sample's error; a server that cannot even be
  connected to stops the run (rerunning the command resumes), rather than marking every
  remaining prompt as failed while a server restarts.
Every 200 result is checked (result_checks.py) before it is handed on.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from eagle3_synth.errors import ConfigError, EngineError, TransientEngineError
from eagle3_synth.engines.base import EngineOptions, GenerationRequest, GenerationResult, SamplingParams, abort_result
from eagle3_synth.engines.result_checks import check_result
from eagle3_synth.engines.retry import RetryPolicy, retry_async
from eagle3_synth.engines.sglang.protocol import RequestIds, WindowedEngine, error_text, is_transient_status, result_with_retries, sglang_sampling_params
from eagle3_synth.engines.sglang.window import InFlightWindow, check_window_size

log = logging.getLogger(__name__)

DEFAULT_MAX_IN_FLIGHT = 256
CONNECT_TIMEOUT_S = 30.0
URL_COOLDOWN_S = 10.0


class ConnectionFailure(TransientEngineError):
    """The server could not be reached at all (refused, reset before answering, connect timeout)."""


def normalize_urls(urls: Iterable[str]) -> tuple[str, ...]:
    """Base URLs without a trailing slash; a missing scheme or a path such as /generate is an error."""
    result = []
    for url in urls:
        parts = urlsplit(url.strip())
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(f"--url {url!r}: expected http://HOST:PORT of an SGLang server or router")
        if parts.path.rstrip("/"):
            raise ConfigError(f"--url {url!r}: give the server's base URL, without {parts.path!r}")
        result.append(f"{parts.scheme}://{parts.netloc}")
    if not result:
        raise ConfigError("--engine sglang-http needs --url http://HOST:PORT (repeat it for several servers)")
    return tuple(result)


class UrlPool:
    """Round-robin over the URLs, skipping one that refused a connection in the last cooldown."""

    def __init__(self, urls: tuple[str, ...], cooldown_s: float = URL_COOLDOWN_S):
        self.urls = urls
        self.cooldown_s = cooldown_s
        self._next = 0
        self._down_until: dict[str, float] = {}

    def pick(self) -> str:
        now = time.monotonic()
        for _ in range(len(self.urls)):
            url = self.urls[self._next % len(self.urls)]
            self._next += 1
            if self._down_until.get(url, 0.0) <= now:
                return url
        # All are cooling down: the one that comes back first.
        return min(self.urls, key=lambda u: self._down_until.get(u, 0.0))

    def mark_down(self, url: str) -> None:
        if len(self.urls) > 1:
            self._down_until[url] = time.monotonic() + self.cooldown_s

    def mark_up(self, url: str) -> None:
        self._down_until.pop(url, None)


class SGLangHTTPEngine(WindowedEngine):
    def __init__(
        self,
        urls: tuple[str, ...],
        *,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        request_timeout_s: float = 3600.0,
        retry: RetryPolicy = RetryPolicy(),
    ):
        if request_timeout_s <= 0:
            raise ConfigError(f"--request-timeout must be > 0 seconds, got {request_timeout_s}")
        self.urls = UrlPool(normalize_urls(urls))
        check_window_size(max_in_flight)  # before an event loop exists to leak
        self.request_timeout_s = request_timeout_s
        self.retry = retry
        self._loop = asyncio.new_event_loop()
        self._window = InFlightWindow(self._loop, max_in_flight)
        self._session: Any = None
        self._rids = RequestIds()

    # -- session ---------------------------------------------------------------------------
    def _get_session(self) -> Any:
        import aiohttp

        if self._session is None:
            # Created inside a coroutine on self._loop, so aiohttp binds it to that loop.
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._window.size, keepalive_timeout=4.0),
                timeout=aiohttp.ClientTimeout(total=self.request_timeout_s, sock_connect=CONNECT_TIMEOUT_S),
            )
        return self._session

    # -- one attempt ----------------------------------------------------------------------
    async def _post(self, url: str, path: str, payload: dict[str, Any]) -> tuple[int, bytes]:
        """POST and read the whole body; every transport failure is classified as transient."""
        import aiohttp

        session = self._get_session()
        try:
            async with session.post(url + path, json=payload) as response:
                return response.status, await response.read()
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:
            self.urls.mark_down(url)
            raise ConnectionFailure(f"{url}: {type(exc).__name__}: {exc}") from exc
        except asyncio.TimeoutError as exc:
            raise TransientEngineError(f"{url}: no response within {self.request_timeout_s:g}s") from exc
        except aiohttp.ClientError as exc:  # a body cut off mid-way, a malformed response
            raise TransientEngineError(f"{url}: {type(exc).__name__}: {exc}") from exc

    async def _attempt(self, request: GenerationRequest, sampling: dict[str, Any], attempt: int) -> GenerationResult:
        url = self.urls.pick()
        payload = {"input_ids": request.prompt_ids, "sampling_params": sampling, "rid": self._rids(request.sample_id, attempt)}
        status, body = await self._post(url, "/generate", payload)
        self.urls.mark_up(url)
        try:
            data = json.loads(body)
        except ValueError:
            data = body.decode("utf-8", "replace")
            if status == 200:
                raise TransientEngineError(f"{url}: HTTP 200 with a body that is not JSON: {error_text(data)}") from None
        if status == 200:
            return check_result(request, data, source=url)
        message = f"{url}: HTTP {status}: {error_text(data)}"
        if is_transient_status(status):
            raise TransientEngineError(message)
        return abort_result(request, message)

    async def _generate_one(self, request: GenerationRequest, params: SamplingParams) -> GenerationResult:
        sampling = sglang_sampling_params(params, request.sample_id)
        try:
            return await result_with_retries(request, lambda attempt: self._attempt(request, sampling, attempt),
                                             self.retry, fatal=(ConnectionFailure,))
        except ConnectionFailure as exc:
            raise EngineError(f"no SGLang server could be reached ({exc}). Results so far are journaled: "
                              "start the server(s) again and rerun the same command to continue.") from exc

    # -- the Engine interface ---------------------------------------------------------------
    def check_servers(self) -> None:
        """Fail fast, before any prompt is sent, when a URL does not answer; log what each serves."""
        for url in self.urls.urls:
            async def probe(attempt: int, url: str = url) -> Any:
                import aiohttp

                try:
                    async with self._get_session().get(url + "/get_model_info", timeout=aiohttp.ClientTimeout(total=30)) as r:
                        return r.status, await r.read()
                except (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError) as exc:
                    raise ConnectionFailure(f"{type(exc).__name__}: {exc}") from exc

            try:
                status, body = self._loop.run_until_complete(
                    retry_async(probe, RetryPolicy(max_retries=min(self.retry.max_retries, 3)), describe="GET /get_model_info")
                )
            except ConnectionFailure as exc:
                raise ConfigError(f"--url {url}: no SGLang server answers ({exc})") from None
            if status == 200:
                try:
                    info = json.loads(body)
                except ValueError:
                    info = {}
                log.info("%s serves %s", url, info.get("model_path", "an unnamed model") if isinstance(info, dict) else info)

    def close(self) -> None:
        if self._loop.is_closed():
            return
        if self._session is not None:
            self._loop.run_until_complete(self._session.close())
            self._session = None
        self._loop.close()


def create(options: EngineOptions) -> SGLangHTTPEngine:
    engine = SGLangHTTPEngine(
        options.urls,
        max_in_flight=DEFAULT_MAX_IN_FLIGHT if options.max_in_flight is None else options.max_in_flight,
        request_timeout_s=options.request_timeout_s,
        retry=RetryPolicy(max_retries=options.max_retries),
    )
    try:
        engine.check_servers()
    except BaseException:
        engine.close()
        raise
    return engine
