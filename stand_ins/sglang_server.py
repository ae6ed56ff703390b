"""A loopback HTTP server speaking SGLang 0.5.23's native `/generate`, with fault injection.

It stands in for `python -m sglang.launch_server --skip-tokenizer-init` (or a router), which needs a
GPU. The HTTP surface follows sglang 0.5.23's srt/entrypoints/http_server.py: `POST /generate`
(`generate_request`, `serve_generate_request`) with `input_ids` (one prompt, or a list of prompts =
a batch that returns when all are done), `sampling_params` (unknown keys and bad values -> 400: its
schema check in `generate_request`, and a ValueError's `{"error": {"message": ...}}`,
`_create_error_response`), `rid`; results shaped as in sglang_results.py; `GET /health`
(`health_generate`), `/get_model_info` (`get_model_info`), `/model_info` (`model_info`).

What generates (a backend):
- `TinyModelBackend`: the tiny fixture model through transformers, one request at a time;
- `DeterministicBackend`: ids that depend only on the prompt (fast, for fault and load tests);
- `ContinuousBatchingModel`: a *model* of an engine's scheduler, for benchmarks: N slots, each
  request holds one for (output tokens x per-token time); lengths long-tailed. Not a real engine.

Faults (`Fault`), chosen per prompt (a digest of its ids) and attempt, so a retried request can
succeed: an HTTP status (500, 503, ...), a connection dropped before any response, a body cut off
mid-way, a slow response, a request held until its client gives up. Loopback only; every request is
counted, before the answer's last byte leaves (a client never sees an answer the counts lack).

No outcome waits on the wall clock: a fault that a client's timeout must end (`hang`, `stall`) holds
the request until the client went away, however long its timeout takes on a loaded machine; a
stream's queue and chunk gaps (`queue_s`, `chunk_s`) can advance a `ClientClock` -- the clock the
client's event loop reads -- instead of sleeping, each gap once the client read what came before it,
so whether an idle timeout fires follows from the gaps the server made, not from how busy the
machine is.

Run in a thread (`ServerThread`, for tests) or as a process (`python -m stand_ins.sglang_server`,
for benchmarks: prints its URL, serves until killed).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web

from . import sglang_results as R

HOST = "127.0.0.1"


def prompt_digest(input_ids: list[int]) -> int:
    """A stable 64-bit digest of a prompt's ids: faults and lengths follow the prompt, not arrival order."""
    raw = hashlib.blake2b(json.dumps(input_ids).encode(), digest_size=8).digest()
    return int.from_bytes(raw, "big")


class ClientClock:
    """The clock of a client's event loop (`new_event_loop`): real monotonic time plus what a fake
    server advanced it by. aiohttp's timeouts are timers on that loop (`sock_read`:
    client_proto.py `_reschedule_timeout`, `loop.call_later`), so a server that advances the clock
    S seconds before its next chunk made a gap of S seconds in the client's eyes, at once. One clock
    ages every timer of the loop: give it one request at a time.

    A gap starts only once the client read what the server sent on that connection before it
    (`gap(..., after=reads(port))`, `port` the client's end of the connection): the server runs in
    another thread, and one that advanced the clock for chunk after chunk while the client had not
    yet read the first (a loaded machine holding the client's thread between its `select` and its
    timer check) summed the gaps into one the client never saw data in -- its idle timeout fired and
    the request was restarted. The client's reads are counted per connection its loop creates
    (`create_connection`), after aiohttp handled them (its read timeout restarted).
    """

    def __init__(self) -> None:
        self.skew = 0.0
        self._reads: Counter[int] = Counter()  # the client's local port -> data received on it

    def advance(self, seconds: float) -> None:
        self.skew += seconds

    def reads(self, port: int) -> int:
        """Data received so far on the client's connection from `port` (the server's peer port)."""
        return self._reads[port]

    async def gap(self, seconds: float, port: int, after: int | None, gone: Callable[[], bool],
                  limit_s: float = 120.0) -> None:
        """Advance the client's clock by `seconds` once its connection from `port` read more than
        `after` times (None: nothing was sent that it must read first); ConnectionResetError if the
        client went away first. `limit_s` only ends a test whose client never reads."""
        deadline = time.monotonic() + limit_s
        while after is not None and self._reads[port] <= after:
            if gone():
                raise ConnectionResetError
            if time.monotonic() > deadline:
                raise RuntimeError(f"the client read nothing for {limit_s:g}s")
            await asyncio.sleep(0.002)
        self.advance(seconds)

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        clock = self

        def counting(protocol_factory: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
            def factory() -> asyncio.Protocol:
                protocol = protocol_factory()
                received = protocol.data_received

                def data_received(data: bytes) -> None:
                    received(data)
                    clock._reads[protocol.transport.get_extra_info("sockname")[1]] += 1

                protocol.data_received = data_received  # type: ignore[method-assign]
                return protocol

            return factory

        class Loop(asyncio.SelectorEventLoop):
            def time(self) -> float:
                return super().time() + clock.skew

            async def create_connection(self, protocol_factory: Any, *args: Any, **kwargs: Any) -> Any:
                return await super().create_connection(counting(protocol_factory), *args, **kwargs)

        return Loop()


async def until_gone(request: web.Request, limit_s: float = 120.0) -> None:
    """Return once the client closed the connection (its timeout fired, or it was cancelled);
    `limit_s` only ends a test whose client never gives up."""
    deadline = time.monotonic() + limit_s
    while request.transport is not None and not request.transport.is_closing() and time.monotonic() < deadline:
        await asyncio.sleep(0.005)


@dataclass
class Output:
    output_ids: list[int]
    finish_reason: dict[str, Any]


class Backend(Protocol):
    async def generate(self, input_ids: list[int], sampling: dict[str, Any]) -> Output: ...


def finish(output_ids: list[int], stop_ids: set[int], max_new_tokens: int) -> Output:
    """Cut after the first stop id (kept), or at max_new_tokens, as SGLang finishes a request."""
    for i, token in enumerate(output_ids[:max_new_tokens]):
        if token in stop_ids:
            return Output(output_ids[: i + 1], R.stop_reason(token))
    return Output(output_ids[:max_new_tokens], R.length_reason(max_new_tokens))


@dataclass
class DeterministicBackend:
    """Output ids that depend only on the prompt: `length_of(prompt)` ids, then the first stop id."""

    body_vocab: tuple[int, int] = (1000, 2000)  # ids drawn from this range, clear of marker ids
    min_len: int = 3
    max_len: int = 40

    def length_of(self, input_ids: list[int]) -> int:
        return self.min_len + prompt_digest(input_ids) % (self.max_len - self.min_len + 1)

    def expected(self, input_ids: list[int], stop_ids: list[int], max_new_tokens: int) -> Output:
        digest = prompt_digest(input_ids)
        low, high = self.body_vocab
        body = [low + (digest >> (i % 48)) % (high - low) for i in range(self.length_of(input_ids))]
        return finish(body + [stop_ids[0]], set(stop_ids), max_new_tokens)

    async def generate(self, input_ids: list[int], sampling: dict[str, Any]) -> Output:
        return self.expected(input_ids, list(sampling["stop_token_ids"]), sampling["max_new_tokens"])


class TinyModelBackend:
    """The tiny fixture model via eagle3_synth's transformers engine, one request at a time."""

    def __init__(self, model_path: str):
        from eagle3_synth.engines import EngineOptions, create_engine

        self.engine = create_engine("transformers", EngineOptions(model=model_path, batch_size=1))
        self._lock = threading.Lock()

    def _generate(self, input_ids: list[int], sampling: dict[str, Any]) -> Output:
        from eagle3_synth.engines import GenerationRequest, SamplingParams

        params = SamplingParams(
            max_new_tokens=sampling["max_new_tokens"],
            temperature=sampling.get("temperature", 1.0),
            stop_token_ids=tuple(sampling["stop_token_ids"]),
            top_p=sampling.get("top_p", 1.0),
            top_k=sampling.get("top_k", -1),
            min_p=sampling.get("min_p", 0.0),
            seed=sampling.get("sampling_seed"),
        )
        with self._lock:
            (result,) = self.engine.generate([GenerationRequest(0, input_ids)], params)
        if result.finish_reason == "stop":
            return Output(result.output_ids, R.stop_reason(result.output_ids[-1]))
        return Output(result.output_ids, R.length_reason(params.max_new_tokens))

    async def generate(self, input_ids: list[int], sampling: dict[str, Any]) -> Output:
        return await asyncio.get_running_loop().run_in_executor(None, self._generate, input_ids, sampling)


def occupancy_stats(events: list[tuple[float, int]], capacity: int, until: float | None = None) -> dict[str, float]:
    """Idle share of a capacity (slots, KV tokens) from (time, +held / -released) events: over the
    run, and up to the last admission (or `until`); the drain after it, and the admissions."""
    if not events:
        return {}
    events = sorted(events)
    start, end = events[0][0], events[-1][0]
    last_admit = max(t for t, amount in events if amount > 0) if until is None else until
    busy = busy_before = 0.0
    held, previous = 0, start
    for t, amount in events:
        busy += held * (t - previous)
        if t <= last_admit:
            busy_before += held * (t - previous)
        held += amount
        previous = t
    span, before = end - start, last_admit - start
    return {"wall_s": span, "idle_fraction": 1 - busy / (capacity * span) if span else 0.0,
            "idle_before_drain": 1 - busy_before / (capacity * before) if before else 0.0,
            "drain_s": end - last_admit, "requests": sum(1 for _, amount in events if amount > 0)}


@dataclass
class ContinuousBatchingModel:
    """A model of a continuous-batching engine (not a real one), for the scheduling benchmark.

    `slots` requests run at once; each holds its slot for (output tokens x `per_token_s`), with a
    constant per-token time whatever the batch size; the rest wait in FIFO order. Output lengths
    are long-tailed, fixed per prompt: log-normal with the given median and sigma, capped at
    max_new_tokens (so a few percent sit exactly at the cap).
    """

    slots: int = 256
    per_token_s: float = 0.001
    median_tokens: float = 500.0
    sigma: float = 1.2
    events: list[tuple[float, int]] = field(default_factory=list)  # (time, +1 admitted / -1 finished)
    _semaphore: asyncio.Semaphore | None = None

    def length_of(self, input_ids: list[int], cap: int) -> int:
        u = (prompt_digest(input_ids) + 0.5) / 2**64
        z = statistics.NormalDist().inv_cdf(u)
        return max(1, min(cap, round(self.median_tokens * math.exp(self.sigma * z))))

    async def generate(self, input_ids: list[int], sampling: dict[str, Any]) -> Output:
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self.slots)
        cap = sampling["max_new_tokens"]
        length = self.length_of(input_ids, cap)
        async with self._semaphore:
            self.events.append((time.monotonic(), +1))
            await asyncio.sleep(length * self.per_token_s)
            self.events.append((time.monotonic(), -1))
        ids = [1000 + (i % 1000) for i in range(length)]
        stop = sampling["stop_token_ids"][0]
        if length < cap:
            ids[-1] = stop
        return finish(ids, {stop}, cap)

    def stats(self) -> dict[str, float]:
        """Idle fraction of the slots, over the whole run and up to the last admission (before drain)."""
        return occupancy_stats(self.events, self.slots)


class KVBoundedModel:
    """A model of an engine whose running set is bounded by KV memory, with `ranks` attention-DP
    schedulers (not a real engine), for the scheduling benchmark.

    Requests go to the ranks in turn (round robin); a rank runs a request while its KV holds the
    request's prompt + output tokens (`kv_tokens` per rank; sglang reserves by its estimate and
    retracts when wrong, this model knows the length), the rest wait. Each request then takes
    (output tokens x `per_token_s`). Lengths as `ContinuousBatchingModel`. `reported_capacity` is
    what the server info says each rank runs at once (sglang's `effective_max_running_requests_per_dp`:
    `max_running_requests`, or 2,048-4,096 when unset, whatever KV memory really holds).
    """

    def __init__(self, ranks: int = 8, kv_tokens: int = 200_000, per_token_s: float = 0.001,
                 median_tokens: float = 500.0, sigma: float = 1.2, reported_capacity: int = 2048):
        self.ranks, self.kv_tokens, self.per_token_s = ranks, kv_tokens, per_token_s
        self.lengths = ContinuousBatchingModel(median_tokens=median_tokens, sigma=sigma)
        self.reported_capacity = reported_capacity
        self.used = [0] * ranks
        self.running = [0] * ranks
        self.waiting = [0] * ranks
        self.events: list[tuple[float, int]] = []  # (time, +tokens admitted / -tokens released)
        self._conditions: list[asyncio.Condition] | None = None
        self._next = 0

    def loads(self) -> list[dict[str, Any]]:
        """Per rank, the core fields of sglang's LoadSnapshot (srt/managers/load_snapshot.py)."""
        return [{"dp_rank": r, "num_running_reqs": self.running[r], "num_waiting_reqs": self.waiting[r],
                 "token_usage": self.used[r] / self.kv_tokens, "max_running_requests": self.reported_capacity}
                for r in range(self.ranks)]

    async def generate(self, input_ids: list[int], sampling: dict[str, Any]) -> Output:
        if self._conditions is None:
            self._conditions = [asyncio.Condition() for _ in range(self.ranks)]
        rank, self._next = self._next % self.ranks, self._next + 1
        cap = sampling["max_new_tokens"]
        length = self.lengths.length_of(input_ids, cap)
        need = min(len(input_ids) + length, self.kv_tokens)
        condition = self._conditions[rank]
        async with condition:
            self.waiting[rank] += 1
            await condition.wait_for(lambda: self.used[rank] + need <= self.kv_tokens)
            self.waiting[rank] -= 1
            self.used[rank] += need
            self.running[rank] += 1
            self.events.append((time.monotonic(), need))
        await asyncio.sleep(length * self.per_token_s)
        async with condition:
            self.used[rank] -= need
            self.running[rank] -= 1
            self.events.append((time.monotonic(), -need))
            condition.notify_all()
        ids = [1000 + (i % 1000) for i in range(length)]
        stop = sampling["stop_token_ids"][0]
        if length < cap:
            ids[-1] = stop
        return finish(ids, {stop}, cap)

    def stats(self, until: float | None = None) -> dict[str, float]:
        """Idle share of the KV memory (all ranks), over the run and up to the last admission (or
        `until`, a time.monotonic() of the client's); the drain after it."""
        return occupancy_stats(self.events, self.ranks * self.kv_tokens, until)


@dataclass(frozen=True)
class Fault:
    """Applied to prompts with digest % every == offset, on their first `attempts` attempts."""

    kind: str  # "status" | "drop" | "truncate" | "slow" (delay_s before answering) | "hang" (no answer
    # until the client went away: its timeout fired) | "nan" (a NaN-token stop) | "stall" (a stream that
    # stops sending after its first chunk until the client went away) | "abort" (a stream whose final
    # chunk is an abort with status_code=status)
    every: int
    offset: int = 0
    attempts: int = 1
    status: int = 500
    delay_s: float = 0.0

    def applies(self, digest: int, attempt: int) -> bool:
        return digest % self.every == self.offset and attempt < self.attempts


class SGLangLoopbackServer:
    """The aiohttp application: SGLang's request parsing, result shapes and errors, plus faults."""

    def __init__(self, backend: Backend, faults: tuple[Fault, ...] = (), context_length: int | None = None,
                 model_path: str = "loopback-model", cache: bool = True, kv_capacity: int | None = None,
                 api_key: str | None = None, server_args: dict[str, Any] | None = None,
                 queue_s: float = 0.0, chunk_s: float = 0.0, keep_aborted: bool = False,
                 capacity_per_rank: int = 256, serve_loads: bool = True, starting_polls: float = 0,
                 clock: ClientClock | None = None):
        """`queue_s`: a stream sends nothing for that long (queued: SGLang has no queue timeout,
        srt/environ.py), then a chunk every `chunk_s` (with a `clock`: the client's clock is advanced
        by them instead); `keep_aborted`: a request whose client went away keeps its rid (as until
        the scheduler confirms the abort) until one request reused it: a request reusing a live rid
        gets 400 "Duplicate request ID detected" (`TokenizerManager._init_req_state`);
        `server_args={"incremental_streaming_output": True}` streams deltas. `starting_polls`: /health
        answers 503 to that many requests first (`math.inf`: for ever; the real server's `ServerStatus.Starting`); `api_key`: requests without `Authorization:
        Bearer KEY` get SGLang's 401; `server_args`: overrides of the served /server_info fields."""
        self.backend = backend
        self.kv_capacity = kv_capacity
        self.api_key = api_key
        self.server_args = {"skip_tokenizer_init": True, "allow_auto_truncate": False, **(server_args or {})}
        self.health_requests = 0
        self.faults = faults
        self.context_length = context_length
        self.model_path = model_path
        self.cache = cache
        self.attempts: Counter[int] = Counter()  # prompt digest -> requests seen
        self.outcomes: Counter[str] = Counter()  # "ok", "400", "fault:drop", ...
        self.rids: list[str] = []
        self.running = 0  # requests being answered now
        self.max_running = 0
        self._seen_prompts: list[list[int]] = []
        self.queue_s = queue_s
        self.chunk_s = chunk_s
        self.keep_aborted = keep_aborted
        self.clock = clock
        self.starting_polls = starting_polls
        self.live_rids: set[str] = set()  # tokenizer_manager's rid_to_state
        self._reused: set[str] = set()  # live rids a duplicate request hit (the abort is then confirmed)
        self._kept: set[str] = set()  # aborted rids kept live until reused
        self.aborted = 0  # streams whose client went away
        self.stream_chunks: list[tuple[str, float]] = []  # (rid, time) of every chunk sent
        # `effective_max_running_requests_per_dp` of each DP rank (dp_size x attn_dp_size of them);
        # `serve_loads=False`: no /v1/loads (as a router may not serve it).
        self.capacity_per_rank = capacity_per_rank
        self.serve_loads = serve_loads
        self.load_reads = 0
        self.priorities: list[int | None] = []  # each /generate request's priority
        self.sent: list[dict[str, Any]] = []  # each /generate request's input_ids and sampling_params, as sent

    def app(self) -> web.Application:
        app = web.Application(client_max_size=1 << 30, middlewares=[self.auth])
        app.router.add_post("/generate", self.handle_generate)
        app.router.add_get("/health", self.handle_health)
        app.router.add_get("/get_model_info", self.handle_model_info)
        app.router.add_get("/model_info", self.handle_model_info)
        app.router.add_get("/server_info", self.handle_server_info)
        app.router.add_get("/v1/models", self.handle_models)
        app.router.add_get("/get_server_info", self.handle_server_info)
        if self.serve_loads:
            app.router.add_get("/v1/loads", self.handle_loads)
        return app

    @web.middleware
    async def auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """sglang 0.5.23 srt/utils/auth.py `add_api_key_middleware`: a missing or wrong key is 401
        {"error": "Unauthorized"}."""
        if self.api_key is not None and request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return self._respond(401, {"error": "Unauthorized"})
        return await handler(request)

    @property
    def context_len(self) -> int | None:
        return self.context_length

    @property
    def max_req_len(self) -> int | None:
        """min(context_len - 1, kv_capacity - 1) (srt/managers/tp_worker.py `TpModelWorker.get_worker_info`)."""
        limits = [n - 1 for n in (self.context_length, self.kv_capacity) if n is not None]
        return min(limits) if limits else None

    @property
    def max_req_input_len(self) -> int | None:
        """max_req_len - 5 (the same `get_worker_info`)."""
        return None if self.max_req_len is None else self.max_req_len - 5

    async def handle_health(self, request: web.Request) -> web.Response:
        """503 while starting (http_server.py `health_generate`: `ServerStatus.Starting`), then 200, empty body."""
        self.health_requests += 1
        if self.health_requests <= self.starting_polls:
            return web.Response(status=503)
        return web.Response(status=200)

    async def handle_server_info(self, request: web.Request) -> web.Response:
        """The real field names: resolved server args (srt/utils/common.py `build_server_info`) plus
        the scheduler's init info (`max_total_num_tokens`, `max_req_input_len`, scheduler.py
        `Scheduler.get_init_info`), `internal_states`, `version` (http_server.py `server_info`)."""
        # `context_length` is the server argument (None unless the server was started with one), not the
        # model's: the model's is /v1/models' max_model_len (srt/entrypoints/http_server.py `available_models`;
        # tests/engines/real/test_contract.py checks both on the real 0.5.23).
        info = {"model_path": self.model_path, "tokenizer_path": self.model_path, "context_length": None,
                "tp_size": 1, "dp_size": 1, "speculative_algorithm": None, **self.server_args,
                "status": "ready", "max_total_num_tokens": self.kv_capacity or 1 << 20,
                "max_req_input_len": self.max_req_input_len, "internal_states": [
                    {"effective_max_running_requests_per_dp": self.capacity_per_rank} for _ in range(self.ranks)],
                "version": "0.5.23", "frontend": "python"}
        return web.json_response(info)

    async def handle_models(self, request: web.Request) -> web.Response:
        """srt/entrypoints/http_server.py `available_models`: one ModelCard (openai/protocol.py) whose
        `max_model_len` is the model's context (`model_config.context_len`)."""
        return web.json_response({"object": "list", "data": [
            {"id": self.model_path, "object": "model", "created": 0, "owned_by": "sglang", "root": self.model_path,
             "parent": None, "max_model_len": self.context_length}]})

    @property
    def ranks(self) -> int:
        return int(self.server_args.get("dp_size") or 1) * int(self.server_args.get("attn_dp_size") or 1)

    async def handle_loads(self, request: web.Request) -> web.Response:
        """srt/entrypoints/v1_loads.py `get_loads`: per DP rank `LoadSnapshot.to_dict` ("core"
        fields); the requests being answered, `capacity_per_rank` running per rank."""
        self.load_reads += 1
        if hasattr(self.backend, "loads"):  # a model that knows what it runs and queues (KVBoundedModel)
            return web.json_response({"timestamp": "", "version": "0.5.23", "accelerator": None,
                                      "num_accelerators": 1, "loads": self.backend.loads()})
        ranks, capacity = self.ranks, self.capacity_per_rank
        running = min(self.running, capacity * ranks)
        waiting = self.running - running
        loads = [{"timestamp": time.time(), "dp_rank": r, "num_running_reqs": running // ranks + (r < running % ranks),
                  "num_waiting_reqs": waiting // ranks + (r < waiting % ranks), "max_running_requests": capacity,
                  "token_usage": running / (capacity * ranks)} for r in range(ranks)]
        return web.json_response({"timestamp": "", "version": "0.5.23", "accelerator": None, "num_accelerators": 1,
                                  "loads": loads})

    async def handle_model_info(self, request: web.Request) -> web.Response:
        return web.json_response({"model_path": self.model_path, "tokenizer_path": None, "is_generation": True,
                                  "weight_version": "default"})

    def _cached_tokens(self, input_ids: list[int]) -> int:
        """Longest prefix shared with an earlier prompt (a small stand-in for the radix cache)."""
        if not self.cache:
            return 0
        best = 0
        for seen in self._seen_prompts[-256:]:
            n = 0
            for a, b in zip(seen, input_ids):
                if a != b:
                    break
                n += 1
            best = max(best, n)
        self._seen_prompts.append(input_ids)
        return min(best, len(input_ids) - 1)

    async def _one(self, input_ids: Any, sampling: dict[str, Any], rid: str) -> tuple[int, dict[str, Any]]:
        if not isinstance(input_ids, list) or not input_ids or not all(isinstance(i, int) for i in input_ids):
            return 400, R.error_400("input_ids should be a list of lists of ints, or a list of ints")
        n = len(input_ids)
        if self.context_length is not None:
            # srt/managers/tokenizer_manager.py `_validate_one_request` (allow_auto_truncate off)
            if n >= self.context_length:
                return 400, R.error_400(R.context_too_long(n, self.context_length))
            if n + sampling["max_new_tokens"] > self.context_length:
                return 400, R.error_400(R.total_too_long(n, sampling["max_new_tokens"], self.context_length))
        if self.max_req_input_len is not None and n >= self.max_req_input_len:
            # srt/managers/utils.py `validate_input_length`, an abort the non-stream call raises as a 400
            return 400, R.error_400(R.input_too_long(n, self.max_req_input_len))
        if self.max_req_len is not None:
            # The scheduler lowers max_new_tokens to fit (srt/managers/scheduler.py
            # `Scheduler.init_req_max_new_tokens`;
            # the KV-memory cut after it is folded into kv_capacity here) and the length finish
            # reports the lowered value (schedule_batch.py `Req.update_finish_state`).
            sampling = {**sampling, "max_new_tokens": max(0, min(sampling["max_new_tokens"], self.max_req_len - n - 1))}
        cached = self._cached_tokens(input_ids)
        out = await self.backend.generate(input_ids, sampling)
        return 200, R.finished(rid, n, out.output_ids, out.finish_reason, cached_tokens=cached)

    async def handle_generate(self, request: web.Request) -> web.StreamResponse:
        try:
            body = json.loads(await request.read())
        except ValueError as exc:
            return self._respond(400, {"object": "error", "message": f"Invalid JSON: {exc}", "type": "Bad Request",
                                       "param": None, "code": 400})
        if "text" in body and "input_ids" not in body:
            return self._respond(400, R.error_400("The engine initialized with skip_tokenizer_init=True cannot accept "
                                                  "text prompts. Please provide input_ids or re-initialize the engine "
                                                  "with skip_tokenizer_init=False."))
        sampling = {"max_new_tokens": 128, "temperature": 1.0, **(body.get("sampling_params") or {})}
        problem = R.sampling_error(sampling)
        if problem is not None:
            return self._respond(400, problem)
        input_ids = body.get("input_ids")
        rid = str(body.get("rid") or f"loopback-{len(self.rids)}")
        self.rids.append(rid)
        self.priorities.append(body.get("priority"))
        self.sent.append({"input_ids": input_ids, "sampling_params": dict(body.get("sampling_params") or {})})
        if (body.get("priority") is not None and not self.server_args.get("enable_priority_scheduling")
                and self.server_args.get("abort_on_priority_when_disabled")):
            # srt/managers/scheduler.py `Scheduler._set_or_validate_priority`: without priority scheduling a
            # priority is ignored, unless abort_on_priority_when_disabled, which aborts the request with 503
            return self._respond(503, {"error": {"message": "Using priority is disabled for this server. Please "
                                                            "send a new request without a priority."}})
        if isinstance(input_ids, list) and input_ids and isinstance(input_ids[0], list):  # a batch
            results = await asyncio.gather(*(self._one(ids, sampling, f"{rid}_{i}") for i, ids in enumerate(input_ids)))
            bad = next((r for r in results if r[0] != 200), None)
            return self._respond(*bad) if bad else self._respond(200, [r[1] for r in results])

        stream = bool(body.get("stream"))
        if rid in self.live_rids:
            message = f"Duplicate request ID detected: {rid}"  # TokenizerManager._init_req_state
            self.outcomes["duplicate"] += 1
            self._reused.add(rid)
            if rid in self._kept:
                self._kept.discard(rid)
                self.live_rids.discard(rid)
            return await self._stream_error(request, message) if stream else self._respond(400, R.error_400(message))
        self.live_rids.add(rid)
        aborted = False
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        try:
            if stream:
                response, aborted = await self._answer_stream(request, input_ids, sampling, rid)
                return response
            return await self._answer(request, input_ids, sampling, rid)
        finally:
            self.running -= 1
            if aborted and self.keep_aborted and rid not in self._reused:
                self._kept.add(rid)
            else:
                self.live_rids.discard(rid)

    async def _stream_error(self, request: web.Request, message: str, code: int = 400) -> web.StreamResponse:
        """A ValueError in a stream: 200, an error chunk, [DONE] (http_server.py `serve_generate_request`)."""
        response = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        error = {"error": {"message": message, "type": "invalid_request_error", "code": code, "retryable": False}}
        await response.write(b"data: " + json.dumps(error).encode() + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        return response

    def _chunks(self, result: dict[str, Any], interval: int) -> list[dict[str, Any]]:
        """What a stream sends: the first token at once, then whenever `interval` ids are unsent
        (srt/managers/scheduler_components/output_streamer.py `_GenerationStreamAccumulator.accept`), then
        the finished result; `output_ids` cumulative, or new ids only under incremental_streaming_output
        (`TokenizerManager._handle_batch_output`); `completion_tokens` counts all ids so far (the same)."""
        ids = result["output_ids"]
        ends = list(range(1, len(ids), interval))
        incremental = bool(self.server_args.get("incremental_streaming_output"))
        chunks, sent = [], 0
        for end in ends + [len(ids)]:
            meta = dict(result["meta_info"], completion_tokens=end)
            if end < len(ids):
                meta["finish_reason"] = None
            chunks.append({"output_ids": ids[sent:end] if incremental else ids[:end], "meta_info": meta})
            sent = end
        return chunks

    def _fault_for(self, input_ids: Any) -> Fault | None:
        """This attempt's fault, if one applies (attempts counted per prompt), counted as an outcome."""
        digest = prompt_digest(input_ids) if isinstance(input_ids, list) else 0
        attempt = self.attempts[digest]
        self.attempts[digest] += 1
        fault = next((f for f in self.faults if f.applies(digest, attempt)), None)
        if fault is not None:
            self.outcomes[f"fault:{fault.kind}"] += 1
        return fault

    async def _answer_stream(self, request: web.Request, input_ids: Any, sampling: dict[str, Any],
                             rid: str) -> tuple[web.StreamResponse, bool]:
        """`stream: true` (http_server.py `serve_generate_request`): headers at once (Starlette sends them before the
        body), nothing while queued, then `data: <json>\\n\\n` chunks and `data: [DONE]\\n\\n`.
        Returns the response and whether the client went away (the request was aborted)."""
        fault = self._fault_for(input_ids)
        if fault is not None:
            if fault.kind == "status":  # as a proxy or router in front would answer
                return self._respond(fault.status, R.error_5xx(fault.status, "Internal server error"
                                                               if fault.status == 500 else "The request queue is full.")), False
            if fault.kind == "drop":
                request.transport.close()
                return web.Response(status=200), True
            if fault.kind == "hang":
                await until_gone(request)
                self.aborted += 1
                return web.Response(status=200), True
        status, result = await self._one(input_ids, sampling, rid)
        if status != 200:
            self.outcomes[str(status)] += 1
            return await self._stream_error(request, R.error_text(result)), False
        if fault is not None and fault.kind == "nan":
            result["output_ids"][-1] = sampling["stop_token_ids"][0]
            result["meta_info"]["finish_reason"] = R.nan_stop()
        if fault is not None and fault.kind == "abort":
            # An abort with a status ends a stream as its final chunk (`TokenizerManager._handle_abort_finish_reason`).
            result["meta_info"]["finish_reason"] = {"type": "abort", "message": "The request queue is full.",
                                                    "status_code": fault.status, "err_type": None}
        response = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)

        def gone() -> bool:
            return request.transport is None or request.transport.is_closing()

        port = request.transport.get_extra_info("peername")[1]  # the client's end of the connection
        try:
            read_mark = None  # nothing to read first: the client's read timeout started when it sent the request
            await self._wait(self.queue_s, port, read_mark, gone)
            if fault is not None and fault.kind == "slow":
                await asyncio.sleep(fault.delay_s)
            chunks = self._chunks(result, sampling.get("stream_interval") or 1)
            for i, chunk in enumerate(chunks):
                if gone():
                    raise ConnectionResetError
                if i:
                    await self._wait(self.chunk_s, port, read_mark, gone)
                self.stream_chunks.append((rid, time.monotonic()))
                read_mark = None if self.clock is None else self.clock.reads(port)
                await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                if fault is not None and fault.kind == "stall":
                    await until_gone(request)
                if fault is not None and fault.kind in ("stall", "truncate"):
                    request.transport.close()
                    self.aborted += 1
                    return response, True
            # Counted before [DONE] leaves: a client that has its result finds it counted.
            self.outcomes["ok"] += 1
            try:
                await response.write(b"data: [DONE]\n\n")
            except ConnectionError:
                self.outcomes["ok"] -= 1
                raise
        except ConnectionError:
            self.aborted += 1
            return response, True
        return response, False

    async def _wait(self, seconds: float, port: int, read_mark: int | None, gone: Callable[[], bool]) -> None:
        """A gap in a stream: on the client's `clock` when there is one (once the client's end
        `port` read more than `read_mark` times: what was sent before the gap), else slept."""
        if self.clock is None:
            await asyncio.sleep(seconds)
        elif seconds:
            await self.clock.gap(seconds, port, read_mark, gone)

    async def _answer(self, request: web.Request, input_ids: Any, sampling: dict[str, Any], rid: str) -> web.StreamResponse:
        fault = self._fault_for(input_ids)
        if fault is not None:
            if fault.kind == "status":
                return self._respond(fault.status, R.error_5xx(fault.status, "Internal server error"
                                                               if fault.status == 500 else "The request queue is full."))
            if fault.kind == "drop":
                request.transport.close()
                return web.Response(status=200)
            if fault.kind == "slow":
                await asyncio.sleep(fault.delay_s)
            if fault.kind == "hang":
                await until_gone(request)
                return web.Response(status=200)
        status, result = await self._one(input_ids, sampling, rid)
        self.outcomes["ok" if status == 200 else str(status)] += 1
        if fault is not None and fault.kind == "nan" and status == 200:
            # A NaN / out-of-range token: its slot gets a stop/EOS id and the finish is a string
            # match (srt/managers/schedule_batch.py `Req._check_vocab_boundary_finish`).
            result["output_ids"][-1] = sampling["stop_token_ids"][0]
            result["meta_info"]["finish_reason"] = R.nan_stop()
        if fault is not None and fault.kind == "truncate":
            payload = json.dumps(result).encode()
            response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
            response.content_length = len(payload)
            await response.prepare(request)
            await response.write(payload[: len(payload) // 2])
            request.transport.close()
            return response
        return self._respond(status, result)

    @staticmethod
    def _respond(status: int, body: Any) -> web.Response:
        return web.Response(status=status, body=json.dumps(body), content_type="application/json")


class RouterLoopback:
    """A stand-in for sglang-router 0.3.2 in front of one or more workers: `/generate` is forwarded with
    the same body (rid included) under a total timeout (`request_timeout_secs`, default 1800,
    sglang_router/router_args.py `RouterArgs`) and retried on 408/429/5xx or that timeout up to
    `max_retries` times (`retry_max_retries=5`; `--disable-retries`, `RouterArgs.add_cli_args`); each
    attempt picks a worker again, in turn (round robin), so a retry may land on another worker or on the
    one still holding the aborted id. The answer is buffered, then passed on with its status. GETs go to
    the first worker."""

    def __init__(self, worker_url: str | list[str], request_timeout_s: float = 1800.0, max_retries: int = 5):
        self.workers = [worker_url] if isinstance(worker_url, str) else list(worker_url)
        self.worker_url = self.workers[0]
        self._next = 0
        self.request_timeout_s = request_timeout_s
        self.max_retries = max_retries
        self.tries = 0

    def app(self) -> web.Application:
        app = web.Application(client_max_size=1 << 30)
        app.router.add_post("/generate", self.handle_generate)
        app.router.add_get("/{path:.*}", self.handle_get)
        return app

    async def handle_get(self, request: web.Request) -> web.Response:
        import aiohttp

        async with aiohttp.ClientSession() as session:
            async with session.get(self.worker_url + request.path) as r:
                return web.Response(status=r.status, body=await r.read(), content_type=r.content_type)

    async def handle_generate(self, request: web.Request) -> web.Response:
        import aiohttp

        body = await request.read()
        status, payload, content_type = 504, b'{"error": "timeout"}', "application/json"
        for _ in range(self.max_retries + 1):
            self.tries += 1
            try:
                async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.request_timeout_s)) as session:
                    worker, self._next = self.workers[self._next % len(self.workers)], self._next + 1
                    async with session.post(worker + "/generate", data=body,
                                            headers={"Content-Type": "application/json"}) as r:
                        status, payload, content_type = r.status, await r.read(), r.content_type
            except (asyncio.TimeoutError, aiohttp.ClientError):
                status, payload, content_type = 504, b'{"error": "timeout"}', "application/json"
            if not (status >= 500 or status in (408, 429)):
                break
        return web.Response(status=status, body=payload, content_type=content_type)


class ServerThread:
    """Serves an `SGLangLoopbackServer` on 127.0.0.1 (a free port) from a background thread."""

    def __init__(self, server: SGLangLoopbackServer, port: int = 0):
        self.server = server
        self.port = port
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sglang-loopback", daemon=True)
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._runner = web.AppRunner(self.server.app(), access_log=None)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, HOST, self.port)
        self._loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self._runner.cleanup())
        self._loop.close()

    def __enter__(self) -> "ServerThread":
        self._thread.start()
        if not self._ready.wait(timeout=30):
            raise RuntimeError("loopback SGLang server did not start within 30s")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30)


@contextmanager
def server_process(*args: str) -> Iterator[str]:
    """Run `python -m stand_ins.sglang_server ARGS` (its own process, so its own core); yield its URL."""
    root = Path(__file__).resolve().parents[1]
    process = subprocess.Popen([sys.executable, "-m", "stand_ins.sglang_server", *args], cwd=root,
                               stdout=subprocess.PIPE, text=True)
    try:
        url = process.stdout.readline().strip()
        if not url.startswith("http://"):
            raise RuntimeError(f"loopback server did not start (printed {url!r})")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description="loopback SGLang /generate server for benchmarks")
    parser.add_argument("--backend", choices=["instant", "batching", "kv"], default="instant")
    parser.add_argument("--ranks", type=int, default=8, help="kv: attention-DP ranks (schedulers)")
    parser.add_argument("--kv-tokens", type=int, default=200_000, help="kv: KV tokens per rank")
    parser.add_argument("--reported-capacity", type=int, default=2048,
                        help="kv: effective_max_running_requests_per_dp in the server info")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--slots", type=int, default=256)
    parser.add_argument("--per-token-ms", type=float, default=1.0)
    parser.add_argument("--median-tokens", type=float, default=500.0)
    parser.add_argument("--sigma", type=float, default=1.2)
    args = parser.parse_args()
    server_args: dict[str, Any] = {}
    capacity = 256
    if args.backend == "instant":
        backend: Any = DeterministicBackend(min_len=8, max_len=8)
    elif args.backend == "kv":
        backend = KVBoundedModel(ranks=args.ranks, kv_tokens=args.kv_tokens, per_token_s=args.per_token_ms / 1000,
                                 median_tokens=args.median_tokens, sigma=args.sigma,
                                 reported_capacity=args.reported_capacity)
        # As sglang 0.5.23 reports attention DP: attn_dp_size=N, dp_size=1 (srt/arg_groups/parallel_hook.py
        # `handle_deprecated_dp_attention`).
        server_args, capacity = {"attn_dp_size": args.ranks, "dp_size": 1}, args.reported_capacity
    else:
        backend = ContinuousBatchingModel(slots=args.slots, per_token_s=args.per_token_ms / 1000,
                                          median_tokens=args.median_tokens, sigma=args.sigma)
    server = SGLangLoopbackServer(backend, cache=False, server_args=server_args, capacity_per_rank=capacity)
    app = server.app()

    async def stats(request: web.Request) -> web.Response:
        until = request.query.get("until")  # KVBoundedModel: idle up to this time.monotonic()
        return web.json_response(backend.stats(**({"until": float(until)} if until else {}))
                                 if hasattr(backend, "stats") else {})

    async def reset(request: web.Request) -> web.Response:
        if hasattr(backend, "events"):
            backend.events.clear()
        return web.Response(status=200)

    app.router.add_get("/stats", stats)
    app.router.add_post("/reset", reset)

    async def serve() -> None:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, HOST, args.port)
        await site.start()
        print(f"http://{HOST}:{site._server.sockets[0].getsockname()[1]}", flush=True)
        await asyncio.Event().wait()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
