"""What `SGLangHTTPEngine` sends for `hidden-states --engine sglang-http`: one prefill per row.

A non-streaming `/generate` of the row's ids with `max_new_tokens` 1: with `return_hidden_states`
(the states in the answer, `protocol.prefill_hidden_states`), or with an `rid` the server's hook
names the row's states file by (train/hidden_states/sglang_capture.py). Retried as every request
is (`engines/retry.py`); a server no longer reachable ends the run with `EngineDied` (exit 75).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from eagle3_synth.errors import EngineDied, EngineError, TransientEngineError
from eagle3_synth.engines.retry import retry_async
from eagle3_synth.engines.sglang.protocol import error_text, is_transient_status, prefill_hidden_states


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
