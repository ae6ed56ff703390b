"""`sglang-http` engine: SGLang servers or an `sglang-router` through the native `/generate`.

One prompt per request (a router picks one worker per HTTP request, and a batch request returns only
when its slowest prompt ends), `max_in_flight` requests at once over keep-alive connections (aiohttp:
the fastest client measured, benchmarks/README.md). `--url`s are used in turn, one refusing skipped.

Failures:
- connection errors, idle timeouts, 408, 429 and 5xx are retried with backoff and jitter (protocol.py);
- a 400 "Duplicate request ID detected" is retried too (with a new rid): it answers a retry that
  a router made with our rid while the worker still held the aborted first try (protocol.py);
- 401, 403, 404, 405 (a wrong URL path, a missing or wrong API key: SGLang's auth middleware
  answers 401 "Unauthorized" / 403 "Forbidden", sglang 0.5.23 srt/utils/auth.py `add_api_key_middleware`) stop the
  run with one message naming the status and URL, instead of failing every prompt;
- any other 4xx (a prompt longer than the context, a bad sampling value) is that sample's error;
- retries used up: a 5xx or timeout becomes that sample's error; a server that cannot be connected
  to stops the run with `EngineDied` (exit 75; rerun to resume), not failing every prompt left.
Every 200 result is checked (base.py) before it is handed on.

Requests stream (`"stream": true`, `sampling_params.stream_interval` = STREAM_INTERVAL), so the
timeout is about progress, not total time: an attempt fails only when no data arrived for
`request_timeout_s` (aiohttp's `sock_read`). SGLang has no queue timeout (srt/environ.py), so a
total timeout would count queue time and restart a long sample that was running fine. The wait
for the first chunk (queue + prefill) still counts against it: SGLang sends nothing while a
request is queued. Chunks are reassembled into exactly the ids a non-stream request returns
(protocol.merge_chunk).

At start, each URL's `/health` is waited for, at most `health_timeout_s`, through refused connections
(sglang 0.5.23 srt/entrypoints/http_server.py `launch_server` binds its port once the model is loaded)
and 503s (warming up, `health_generate`); a host not reached otherwise (no such name) is an error at once.
Then its server info (`/server_info`, or the deprecated `/get_server_info`, http_server.py `server_info`: the resolved
server args plus the scheduler's `max_req_input_len`, srt/utils/common.py `build_server_info` and
srt/managers/scheduler.py `Scheduler.get_init_info`) is checked: `skip_tokenizer_init` must be true,
`allow_auto_truncate` false, and the served `model_path` should match the run's model folder
(a warning). Its context limits are kept (`limits`) so a prompt SGLang would reject is reported too long.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
import time
from collections.abc import Iterator, Iterable
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from eagle3_synth.contract.ranges import check_range
from eagle3_synth.errors import ConfigError, EngineDied, EngineError, TransientEngineError
from eagle3_synth.engines.base import (EngineOptions, GenerationRequest, GenerationResult, SamplingParams, abort_result,
                                       check_result)
from eagle3_synth.engines.sglang.protocol import (RetryPolicy, retry_async, ContextLimits, RequestIds, WindowedEngine,
                                                  error_text, is_duplicate_rid, is_transient_status, merge_chunk,
                                                  priority_order, result_with_retries, sent_priority,
                                                  sglang_sampling_params, stream_status, prefill_hidden_states)
from eagle3_synth.engines.sglang.args import AUTO_TRUNCATE_REFUSED
from eagle3_synth.engines.sglang.window import (EngineLoad, LoadDrivenSize, running_capacity, running_ranks, start_size,
                                                InFlightWindow, check_window_size)

# What `SGLangHTTPEngine` sends for `hidden-states --engine sglang-http`: one prefill per row.
#
# A non-streaming `/generate` of the row's ids with `max_new_tokens` 1: with `return_hidden_states`
# (the states in the answer, `protocol.prefill_hidden_states`), or with an `rid` the server's hook
# names the row's states file by (train/hidden_states/sglang_capture.py). Retried as every request
# is (`engines/sglang/protocol.py`); a server no longer reachable ends the run with `EngineDied` (exit 75).

class ConnectionFailure(TransientEngineError):
    """The server could not be reached at all (refused, reset before answering, connect timeout)."""


def json_or_text(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace")


class HTTPPrefill:
    """Mixed into `SGLangHTTPEngine` (http.py), whose session, URL pool, timeout and retry policy it uses."""

    urls: Any
    retry: Any
    request_timeout_s: float

    def _get_session(self) -> Any:
        raise NotImplementedError

    @contextmanager
    def transport_errors(self, url: str) -> Iterator[None]:
        """aiohttp's failures of a request to `url` as ours, every one transient: a server not reached
        (marked down) is a `ConnectionFailure`, an idle timeout or a broken answer a `TransientEngineError`."""
        import aiohttp

        try:
            yield
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:
            self.urls.mark_down(url)
            raise ConnectionFailure(f"{url}: {type(exc).__name__}: {exc}") from exc
        except asyncio.TimeoutError as exc:
            raise TransientEngineError(f"{url}: no data for {self.request_timeout_s:g}s (idle timeout)") from exc
        except aiohttp.ClientError as exc:  # a stream cut off mid-way, a malformed response
            raise TransientEngineError(f"{url}: {type(exc).__name__}: {exc}") from exc

    async def _post_states(self, ids: list[int], sampling: dict[str, Any], rid: str | None) -> Any:
        """One non-streaming /generate with `return_hidden_states`: its states are in the final
        answer only. Transport failures and 5xx are transient; another status ends the run."""
        import orjson

        url = self.urls.pick()
        payload = {"input_ids": ids, "sampling_params": sampling, "return_hidden_states": rid is None,
                   **({"rid": rid} if rid is not None else {})}
        with self.transport_errors(url):
            async with self._get_session().post(url + "/generate", json=payload) as response:
                status, body = response.status, await response.read()
        self.urls.mark_up(url)
        if status != 200:
            message = f"{url}: HTTP {status}: {error_text(json_or_text(body))}"
            if is_transient_status(status):
                raise TransientEngineError(message)
            raise EngineError(f"a prefill of {len(ids)} tokens failed: {message}")
        return prefill_hidden_states(orjson.loads(body), url, rid)

    async def _prefill_one(self, ids: list[int], sampling: dict[str, Any], rid: str | None) -> Any:
        try:
            return await retry_async(lambda attempt: self._post_states(ids, sampling, rid), self.retry,
                                     describe=f"a prefill of {len(ids)} tokens")
        except ConnectionFailure as exc:
            raise EngineDied(f"no SGLang server could be reached ({exc}). Files written so far stay: start the "
                              "server(s) again and rerun the same command to continue.") from exc


# The `--url`s of the sglang-http engine: checked base URLs, used in turn, skipping one that is down.

URL_COOLDOWN_S = 10.0


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


log = logging.getLogger(__name__)

DEFAULT_MAX_IN_FLIGHT = 256
# `Authorization: Bearer KEY` for a server with --api-key (sglang 0.5.23 auth.py add_api_key_middleware); not in argv.
API_KEY_VARIABLE = "EAGLE3_SYNTH_SGLANG_API_KEY"
CONNECT_TIMEOUT_S = 30.0
HEALTH_TIMEOUT_S = 600.0  # how long to wait for a starting server's /health to answer 200
HEALTH_POLL_S = 2.0
# Tokens per streamed chunk after the first (sent at once): sglang 0.5.23
# srt/managers/scheduler_components/output_streamer.py `_GenerationStreamAccumulator.accept` sends a stream's
# first token at once, then whenever `sampling_params.stream_interval` tokens are unsent (the request's value
# over the server's --stream-interval). Large, because the default (cumulative) chunks repeat
# every id so far; small enough that a chunk comes well within any sane idle timeout.
STREAM_INTERVAL = 1024
# Statuses that say the URL or the key is wrong, not the prompt: they stop the run.
MISCONFIGURED_STATUS = frozenset({401, 403, 404, 405})


class NotListening(ConnectionFailure):
    """Connection refused: nothing listens at the URL (yet: a server loading its model binds its port last)."""


class MisconfiguredServer(EngineError):
    """The server refused the request itself (wrong path, method or API key): no prompt can succeed."""


def misconfigured(status: int, url: str, detail: str) -> str:
    return (f"{url} answered HTTP {status} ({detail}): check --url (the base URL of an SGLang server or "
            f"router) and the server's API key (${API_KEY_VARIABLE}); no prompt was marked failed because of it")


class SGLangHTTPEngine(HTTPPrefill, WindowedEngine):
    def __init__(
        self,
        urls: tuple[str, ...],
        *,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        request_timeout_s: float = 3600.0,
        retry: RetryPolicy = RetryPolicy(),
        model: str | None = None,
        health_timeout_s: float = HEALTH_TIMEOUT_S,
        health_poll_s: float = HEALTH_POLL_S,
        load_driven: bool = False,
        priority: bool = False,
        api_key: str | None = None,
    ):
        check_range("request_timeout", request_timeout_s)
        self.urls = UrlPool(normalize_urls(urls))
        check_window_size(max_in_flight)  # before an event loop exists to leak
        self.request_timeout_s = request_timeout_s
        self.retry = retry
        self._loop = asyncio.new_event_loop()
        self._window = InFlightWindow(self._loop, max_in_flight)
        self._session: Any = None
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._rids = RequestIds()
        self.model = model
        self.health_timeout_s = health_timeout_s
        self.health_poll_s = health_poll_s
        self.limits = ContextLimits()  # set from the servers' info by check_servers()
        # With no --max-in-flight the window follows the servers' /v1/loads (window.py), from check_servers().
        self.load_driven = load_driven
        self.priority = priority
        self.low_priority_first = False  # the servers' schedule_low_priority_values_first (check_server_info)
        self._capacities: list[int | None] = []
        self._priority_servers = 0  # servers with priority scheduling seen (check_priority_scheduling)
        self._ranks = 0

    # -- session ---------------------------------------------------------------------------
    def _get_session(self) -> Any:
        import aiohttp

        if self._session is None:
            # Created inside a coroutine on self._loop, so aiohttp binds it to that loop.
            self._session = aiohttp.ClientSession(
                headers=self._headers,
                connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=4.0),  # the window bounds it
                # An idle timeout, not a total one: each read waits at most request_timeout_s.
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S,
                                              sock_read=self.request_timeout_s),
            )
        return self._session

    # -- one attempt ----------------------------------------------------------------------
    async def _post_stream(self, url: str, payload: dict[str, Any]) -> tuple[int, Any]:
        """POST a streaming /generate; (200, the reassembled result or a stream's error chunk),
        or (status, body) of a non-200 answer. Every transport failure is transient."""
        session = self._get_session()
        with self.transport_errors(url):
            async with session.post(url + "/generate", json=payload) as response:
                if response.status != 200 or response.content_type != "text/event-stream":
                    return response.status, json_or_text(await response.read())
                return 200, await self._read_stream(url, response)

    @staticmethod
    async def _read_stream(url: str, response: Any) -> dict[str, Any]:
        """SGLang's SSE: `data: <json>\\n\\n` per chunk, then `data: [DONE]\\n\\n`; an error is a
        `data: {"error": {...}}` chunk before [DONE] (sglang 0.5.23 `serve_generate_request`)."""
        buffer = b""
        output: list[int] = []
        last: dict[str, Any] | None = None
        async for data in response.content.iter_any():
            buffer += data
            *events, buffer = buffer.split(b"\n\n")
            for event in events:
                event = event.strip()
                if not event.startswith(b"data:"):
                    continue  # SSE comments / keep-alives
                event = event[len(b"data:"):].strip()
                if event == b"[DONE]":
                    if last is None:
                        raise TransientEngineError(f"{url}: stream ended with [DONE] and no result")
                    return last if "error" in last else {**last, "output_ids": output}
                try:
                    chunk = json.loads(event)
                except ValueError:
                    raise TransientEngineError(f"{url}: a stream chunk that is not JSON: {error_text(event.decode('utf-8', 'replace'))}") from None
                if not isinstance(chunk, dict):
                    raise TransientEngineError(f"{url}: a stream chunk that is not an object: {error_text(chunk)}")
                if "error" not in chunk:
                    output = merge_chunk(output, chunk)
                last = chunk
        raise TransientEngineError(f"{url}: the stream ended before [DONE]")

    async def _attempt(self, request: GenerationRequest, params: SamplingParams, sampling: dict[str, Any],
                       attempt: int) -> GenerationResult:
        url = self.urls.pick()
        rid = self._rids(request.sample_id, attempt)
        payload = {"input_ids": request.prompt_ids, "sampling_params": {**sampling, "stream_interval": STREAM_INTERVAL},
                   "rid": rid, "stream": True, **sent_priority(request.priority, self.low_priority_first)}
        status, data = await self._post_stream(url, payload)
        self.urls.mark_up(url)
        if status == 200:
            status, data = stream_status(data)
        if status == 200:
            if not isinstance(data, dict):
                raise TransientEngineError(f"{url}: HTTP 200 with a body that is not a result: {error_text(data)}")
            return check_result(request, data, url, params)
        text = error_text(data)
        message = f"{url}: HTTP {status}: {text}"
        if status in MISCONFIGURED_STATUS:
            raise MisconfiguredServer(misconfigured(status, url + "/generate", text))
        if is_transient_status(status):
            raise TransientEngineError(message)
        if is_duplicate_rid(status, text):
            log.info("sample_id %d: %s (a router retry of an aborted request); retrying with a new id",
                     request.sample_id, message)
            raise TransientEngineError(message)
        return abort_result(request, message)

    async def _generate_one(self, request: GenerationRequest, run: SamplingParams) -> GenerationResult:
        params = request.params(run)
        sampling = sglang_sampling_params(params)
        try:
            return await result_with_retries(request, lambda attempt: self._attempt(request, params, sampling, attempt),
                                             self.retry, fatal=(ConnectionFailure,))
        except ConnectionFailure as exc:
            raise EngineDied(f"no SGLang server could be reached ({exc}). Results so far are journaled: "
                              "start the server(s) again and rerun the same command to continue.") from exc

    # -- the Engine interface ---------------------------------------------------------------
    async def _get(self, url: str, path: str, timeout_s: float = 30.0) -> tuple[int, bytes]:
        import aiohttp

        try:
            async with self._get_session().get(url + path, timeout=aiohttp.ClientTimeout(total=timeout_s)) as r:
                return r.status, await r.read()
        except aiohttp.ClientConnectorError as exc:  # several addresses refused: that errno too (aiohappyeyeballs 2.7)
            failure = NotListening if exc.os_error.errno == errno.ECONNREFUSED else ConnectionFailure
            raise failure(f"{type(exc).__name__}: {exc}") from exc
        except (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError) as exc:
            raise ConnectionFailure(f"{type(exc).__name__}: {exc}") from exc

    def _get_reachable(self, url: str, path: str) -> tuple[int, bytes]:
        """GET, retrying a connection failure a few times; a server that never answers is a ConfigError."""
        try:
            return self._loop.run_until_complete(retry_async(
                lambda attempt: self._get(url, path), RetryPolicy(max_retries=min(self.retry.max_retries, 3)),
                describe=f"GET {path}"))
        except ConnectionFailure as exc:
            raise ConfigError(f"--url {url}: no SGLang server answers ({exc})") from None

    def wait_healthy(self, url: str) -> None:
        """Wait for `/health` to answer 200 (see the module's docstring); said once, when the wait starts."""
        limit = self.health_timeout_s
        deadline, waited = time.monotonic() + limit, False
        while True:
            try:
                status, body = self._loop.run_until_complete(self._get(url, "/health"))
                why = f"/health answers HTTP {status}"
            except NotListening as exc:
                status, body, why = None, b"", f"nothing listens: {exc}"
            except ConnectionFailure:  # a few retries, then "no SGLang server answers"
                status, body = self._get_reachable(url, "/health")
                why = f"/health answers HTTP {status}"
            if status == 200:
                return
            if status in MISCONFIGURED_STATUS:
                raise ConfigError(misconfigured(status, url + "/health", error_text(json_or_text(body))))
            if time.monotonic() + self.health_poll_s > deadline:
                raise ConfigError(f"--url {url}: no SGLang server ready there after {limit:g}s ({why}): not started, "
                                  "another port, or still loading the model? Rerun when its /health answers 200")
            if not waited:
                log.info("waiting for the SGLang server at %s to start (%s), at most %gs", url, why, limit)
                waited = True
            time.sleep(self.health_poll_s)

    def resolved_server_args(self) -> dict[str, Any] | None:
        return self.server_info(self.urls.urls[0])  # the first server's, as the in-process engine's

    def server_info(self, url: str) -> dict[str, Any] | None:
        """`/server_info`, else the deprecated `/get_server_info` (both in 0.5.23,
        http_server.py `server_info`); None when neither is served (e.g. some router versions)."""
        for path in ("/server_info", "/get_server_info"):
            status, body = self._get_reachable(url, path)
            if status == 404:
                continue
            if status in MISCONFIGURED_STATUS:
                raise ConfigError(misconfigured(status, url + path, error_text(json_or_text(body))))
            info = json_or_text(body)
            if status == 200 and isinstance(info, dict):
                return info
            log.warning("%s%s answered HTTP %d; server settings not checked", url, path, status)
            return None
        log.warning("%s serves neither /server_info nor /get_server_info; server settings not checked", url)
        return None

    def model_context(self, url: str) -> int | None:
        """The served model's context: `/v1/models`' `max_model_len` (sglang 0.5.23
        srt/entrypoints/http_server.py `available_models`, `model_config.context_len`). The server info's
        `context_length` is only the server argument, None unless the server was started with one."""
        try:
            status, body = self._get_reachable(url, "/v1/models")
        except ConfigError:
            return None
        data = json_or_text(body)
        cards = data.get("data") if status == 200 and isinstance(data, dict) else None
        lengths = [card.get("max_model_len") for card in cards or [] if isinstance(card, dict)]
        return next((n for n in lengths if isinstance(n, int) and not isinstance(n, bool) and n > 0), None)

    def check_server_info(self, url: str, info: dict[str, Any]) -> None:
        """Refuse a server whose settings would corrupt rows; keep its context limits."""
        if "skip_tokenizer_init" not in info:
            # e.g. a router answering with its own info rather than a worker's server args
            log.warning("%s: server info without skip_tokenizer_init; its settings were not checked "
                        "(start every server with --skip-tokenizer-init)", url)
        elif info.get("skip_tokenizer_init") is not True:
            raise ConfigError(f"--url {url}: the server runs with skip_tokenizer_init={info.get('skip_tokenizer_init')!r}; "
                              "restart it with --skip-tokenizer-init (prompts go in as token ids, output ids come back untouched)")
        if self.priority:
            self.check_priority_scheduling(url, info)
        if info.get("allow_auto_truncate"):
            raise ConfigError(f"--url {url}: the server runs with --allow-auto-truncate: {AUTO_TRUNCATE_REFUSED}; restart it without")
        served = info.get("model_path")
        if self.model and isinstance(served, str) and _folder_name(served) != _folder_name(self.model):
            log.warning("%s serves %s, but this run's model is %s; the outputs are that server's model's",
                        url, served, self.model)
        if info.get("context_length") is None:  # the server argument; the model's is in /v1/models
            info = {**info, "context_length": self.model_context(url)}
        self.limits = self.limits.combine(ContextLimits.from_server_info(info))
        self._capacities.append(running_capacity(info))
        self._ranks += running_ranks(info)
        log.info("%s serves %s (context %s, max input %s)", url, served or "an unnamed model",
                 info.get("context_length"), info.get("max_req_input_len"))

    def check_priority_scheduling(self, url: str, info: dict[str, Any]) -> None:
        """What `--priority` does on this server (protocol.priority_order); every server must order alike."""
        low_first = priority_order(url, info)
        if low_first is None:
            return
        if self._priority_servers and low_first != self.low_priority_first:
            raise ConfigError(f"--url {url}: schedule_low_priority_values_first={low_first}, unlike the other "
                              "servers: --priority needs them all to order priorities the same way")
        self.low_priority_first = low_first
        self._priority_servers += 1

    def check_servers(self) -> None:
        """Before any prompt is sent: wait for each URL's /health, then check its server info; a
        load-driven window starts at what the servers run, its ceiling twice that (else the default)."""
        for url in self.urls.urls:
            self.wait_healthy(url)
            info = self.server_info(url)
            if info is not None:
                self.check_server_info(url, info)
        if self.load_driven:
            known = len(self._capacities) == len(self.urls.urls) and None not in self._capacities
            ceiling = 2 * sum(self._capacities) if known else self._window.size
            self._window.size = start_size(sum(self._capacities) if known else None, self._ranks or 1, ceiling)
            self._window.sizer = LoadDrivenSize(self.read_loads, ceiling)

    def read_loads(self) -> EngineLoad | None:
        """Every URL's `/v1/loads?include=core` summed (srt/entrypoints/v1_loads.py `get_loads`); None
        when one does not serve it (a router)."""
        total = None
        for url in self.urls.urls:
            status, body = self._loop.run_until_complete(self._get(url, "/v1/loads?include=core", timeout_s=5.0))
            data = json_or_text(body)
            load = EngineLoad.from_snapshots(data.get("loads") or []) if status == 200 and isinstance(data, dict) else None
            if load is None:
                return None
            total = load if total is None else total.combine(load)
        return total

    def close(self) -> None:
        if self._loop.is_closed():
            return
        if self._session is not None:
            self._loop.run_until_complete(self._session.close())
            self._session = None
        self._loop.close()


def _folder_name(path: str) -> str:
    return os.path.basename(path.rstrip("/\\")) or path


def create(options: EngineOptions) -> SGLangHTTPEngine:
    if "allow_auto_truncate" in options.engine_args:
        raise ConfigError(f"--engine-arg {AUTO_TRUNCATE_REFUSED}")
    engine = SGLangHTTPEngine(
        options.urls,
        health_timeout_s=HEALTH_TIMEOUT_S,
        max_in_flight=DEFAULT_MAX_IN_FLIGHT if options.max_in_flight is None else options.max_in_flight,
        load_driven=options.max_in_flight is None,
        priority=options.priority,
        api_key=os.environ.get(API_KEY_VARIABLE) or None,
        request_timeout_s=options.request_timeout_s,
        retry=RetryPolicy(max_retries=options.max_retries),
        model=options.model,
    )
    try:
        engine.check_servers()
    except BaseException:
        engine.close()
        raise
    return engine
