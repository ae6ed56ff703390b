"""`sglang` engine: SGLang's offline `sglang.Engine`, in this process, fed token ids.

- Started with `skip_tokenizer_init=True` (ids in, ids out, nothing decoded) and every
  `--engine-arg` typed by SGLang's own `ServerArgs` (args.py).
- One `async_generate` per prompt on the engine's own event loop (`Engine.loop`, to which SGLang
  binds its response handling), at most `max_in_flight` at once, each result handed on as soon as
  it completes (window.py), so the engine never drains between chunks.
- A request that raises is that sample's error (`abort`, with the message); 5xx-style errors
  (e.g. 503 "The request queue is full.") are retried first (protocol.py). Every result is checked
  (base.py).
- `close()` shuts the engine down without SGLang's kill of every child of this process, and the
  caller's SIGTERM handler stays in charge, then removes the shared-memory segments its processes
  had mapped, which SGLang's CPU all-reduce leaves behind (processes.py).
- An engine that dies (a scheduler exception, a killed child) ends the run with `EngineDied`
  (exit 75, resumable) naming the process and the engine's last log lines, instead of SGLang's
  SIGQUIT handler killing this process with it (processes.py). One that cannot
  start (a server argument SGLang refuses, weights that leave no memory for the KV cache, a child
  killed for memory while loading) fails the same way on every rerun: a `ConfigError` (exit 2)
  with SGLang's own reason in one line and what to change (`start_failure`).
- SGLang starts its workers with the `spawn` start method, which imports the main script again
  in each worker: a script that builds with this engine must guard its entry point with
  `if __name__ == "__main__":` (the `eagle3-synth` command does).

SGLang is an optional extra (`pip install 'eagle3-synth[sglang]'`), imported only here.
"""

from __future__ import annotations

import asyncio
import atexit
import copy
import logging
import os
import re
import sys
from typing import Any

from eagle3_synth.errors import ConfigError, EngineDied, EngineError, TransientEngineError
from eagle3_synth.engines.base import (EngineOptions, GenerationRequest, GenerationResult, SamplingParams, abort_result,
                                       check_result)
from eagle3_synth.engines.sglang.protocol import (RetryPolicy, ContextLimits, RequestIds, WindowedEngine,
                                                  is_transient_status, prefill_hidden_states, result_with_retries,
                                                  sent_priority, sglang_sampling_params)
from eagle3_synth.engines.sglang.args import CPU_ENGINE_VARIABLE, FieldSpec, engine_kwargs, language_model_only_hint, server_args_fields
from eagle3_synth.engines.sglang.processes import (bind_loop_keep_sigterm, callers_sigterm, exited, guarded_shutdown,
                                                   kill_trees, launch_died, mapped_shm_segments, on_sigquit,
                                                   owned_children, process_names, unlink_segments, without_ctrl_c,
                                                   StderrTail)
from eagle3_synth.engines.sglang.window import (EngineLoad, LoadDrivenSize, running_capacity, running_ranks, start_size,
                                                InFlightWindow, check_window_size)

log = logging.getLogger(__name__)

SOURCE = "sglang.Engine"
FALLBACK_MAX_IN_FLIGHT = 1024


def engine_info(engine: Any) -> dict[str, Any]:
    """`get_server_info()`, read once at launch: capacity, DP ranks and context limits come from it
    ({} when it fails: informational, never worth failing a run for). Its `context_length` is the
    server argument (None unless given); the model's is `tokenizer_manager.model_config.context_len`
    (what /v1/models reports as max_model_len, sglang 0.5.23 srt/entrypoints/http_server.py `available_models`)."""
    try:
        info = engine.get_server_info()
    except Exception as exc:
        log.debug("could not read the engine's server info: %s", exc)
        return {}
    if not isinstance(info, dict):
        return {}
    if info.get("context_length") is None:
        model_config = getattr(getattr(engine, "tokenizer_manager", None), "model_config", None)
        info = {**info, "context_length": getattr(model_config, "context_len", None)}
    return info


def default_max_in_flight(info: dict[str, Any]) -> int:
    """The window's ceiling: twice the requests the engine runs at once (FALLBACK_MAX_IN_FLIGHT
    when unknown); within it the window follows the engine's load (`window.py`)."""
    capacity = running_capacity(info)
    return FALLBACK_MAX_IN_FLIGHT if capacity is None else max(64, 2 * capacity)


def read_engine_load(engine: Any, loop: asyncio.AbstractEventLoop) -> EngineLoad | None:
    """`tokenizer_manager.get_loads()` (the coroutine behind /v1/loads, sglang 0.5.23
    srt/managers/tokenizer_control_mixin.py `TokenizerControlMixin.get_loads`), run on the engine's loop."""
    snapshots = loop.run_until_complete(engine.tokenizer_manager.get_loads())
    return EngineLoad.from_snapshots([s.to_dict() if hasattr(s, "to_dict") else s for s in snapshots])


class SGLangEngine(WindowedEngine):
    def __init__(self, engine: Any, *, loop: asyncio.AbstractEventLoop, owned_pids: set[int], max_in_flight: int,
                 retry: RetryPolicy = RetryPolicy(), load_driven: bool = False, info: dict[str, Any] | None = None,
                 stderr: StderrTail | None = None):
        self.engine = engine
        self.owned_pids = owned_pids
        self._names = process_names(owned_pids)
        self._stderr = stderr
        self.died: str | None = None  # why, once the engine died
        # The engine's schedule_low_priority_values_first (protocol.sent_priority).
        self.low_priority_first = (info or {}).get("schedule_low_priority_values_first") is True
        self.retry = retry
        self._loop = loop
        # Load-driven (the default): start at what the engine runs (its server `info`), follow its
        # load up to the ceiling `max_in_flight`.
        info = info or {}
        sizer = LoadDrivenSize(lambda: read_engine_load(engine, loop), max_in_flight) if load_driven else None
        start = (start_size(running_capacity(info), running_ranks(info), max_in_flight) if load_driven
                 else max_in_flight)
        self._window = InFlightWindow(loop, start, sizer)
        self._rids = RequestIds()
        self._closed = False
        self.limits = ContextLimits()  # set by launch() from get_server_info()

    def resolved_server_args(self) -> dict[str, Any] | None:
        """The server arguments SGLang resolved (`get_server_info()`), read now: what a report
        says the engine ran with (the speculative settings SGLang chose where none was given)."""
        return self.engine.get_server_info()

    async def _attempt(self, request: GenerationRequest, params: SamplingParams, sampling: dict[str, Any],
                       attempt: int) -> GenerationResult:
        try:
            # Copies: SGLang may edit both in place (sglang 0.5.23 `TokenizerManager._validate_one_request` truncates
            # `input_ids` with `del` and rewrites `sampling_params["max_new_tokens"]`), and the
            # same dict is reused for every retry of this sample.
            response = await self.engine.async_generate(
                input_ids=list(request.prompt_ids),
                sampling_params=copy.deepcopy(sampling),
                rid=self._rids(request.sample_id, attempt),
                **sent_priority(request.priority, self.low_priority_first),
            )
        except Exception as exc:
            # SGLang raises ValueError for a bad request (400) and fastapi.HTTPException for
            # other aborts with a status (e.g. 503 when the queue is full).
            status = getattr(exc, "status_code", None)
            message = f"{SOURCE}: {type(exc).__name__}: {getattr(exc, 'detail', None) or exc}"
            if isinstance(status, int) and is_transient_status(status):
                raise TransientEngineError(message) from exc
            return abort_result(request, message)
        return check_result(request, response, SOURCE, params)

    async def _generate_one(self, request: GenerationRequest, run: SamplingParams) -> GenerationResult:
        params = request.params(run)
        sampling = sglang_sampling_params(params)
        return await result_with_retries(request, lambda attempt: self._attempt(request, params, sampling, attempt), self.retry)

    async def _prefill_one(self, ids: list[int], sampling: dict[str, Any], rid: str | None) -> Any:
        try:
            response = await self.engine.async_generate(input_ids=list(ids), sampling_params=dict(sampling),
                                                        return_hidden_states=rid is None, rid=rid)
        except Exception as exc:
            raise EngineError(f"{SOURCE}: a prefill of {len(ids)} tokens failed: {type(exc).__name__}: "
                              f"{getattr(exc, 'detail', None) or exc}") from exc
        return prefill_hidden_states(response, SOURCE, rid)

    def on_death(self) -> None:
        """SIGQUIT from the engine's processes (processes.py): end the run with `EngineDied`."""
        watchdog = getattr(getattr(self.engine, "tokenizer_manager", None), "_subprocess_watchdog", None)
        if watchdog is not None:
            watchdog.stop()  # it would signal again for every process that goes down with the first
        ended = exited(self.owned_pids)
        # SGLang's watchdog has already collected the exit status of the child it saw die (`proc.is_alive()`,
        # sglang 0.5.23 srt/utils/watchdog.py `SubprocessWatchdog._check_processes`): read it from its Process
        # objects.
        for process in getattr(watchdog, "_processes", None) or ():
            if getattr(process, "exitcode", None) not in (None, 0) and ended.get(process.pid) is None:
                ended[process.pid] = process.exitcode
        which = ", ".join(f"{self._names.get(pid, pid)} (pid {pid}) {_ended(code)}" for pid, code in sorted(ended.items()))
        self.died = which or "one of its processes reported a failure (SIGQUIT)"
        tail = self._stderr.lines()[-12:] if self._stderr is not None else []
        self._window.stop_with(EngineDied(
            f"{SOURCE}: the engine died mid-run: {self.died}. Every result handed on is journaled; rerun the same "
            "command to continue" + ("; its last log lines:\n    " + "\n    ".join(tail) if tail else "")))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        segments = mapped_shm_segments(self.owned_pids)  # read while the processes live
        if self.died is not None:
            kill_trees(self.owned_pids)  # nothing left to shut down in order; shutdown() would wait on it
        else:
            guarded_shutdown(self.engine, self.owned_pids)
        unlink_segments(segments)
        if self._stderr is not None:
            self._stderr.close()
        if self._loop is not getattr(self.engine, "loop", None):
            self._loop.close()


def _ended(code: int | None) -> str:
    if code is None:
        return "ended"
    return f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"


def check_spawn_safe() -> None:
    """Refuse to start SGLang from a worker that `spawn` started by importing an unguarded script.

    SGLang's workers are spawned; each imports the main script as `__mp_main__`. A script that
    builds at import time would start another engine inside every worker.
    """
    main = sys.modules.get("__main__")
    if main is not None and getattr(main, "__name__", None) == "__mp_main__":
        raise ConfigError(
            "the sglang engine was started while a spawned worker process imported the main script; "
            "put the script's entry point under `if __name__ == \"__main__\":` (SGLang starts its "
            "workers with the spawn method, which imports the main script again in each)"
        )


def import_server_args() -> list[FieldSpec]:
    """The `ServerArgs` fields, or a ConfigError saying how to get SGLang; imports none of the engine's
    modules, which read the CPU backend's variable as they are imported (`use_cpu_backend`)."""
    try:
        from sglang.srt.server_args import ServerArgs
    except ImportError as exc:
        raise ConfigError(
            f"--engine sglang needs SGLang in this environment ({exc}). On a GPU node: "
            "pip install 'eagle3-synth[sglang]'; or start an SGLang server and use --engine sglang-http --url ..."
        ) from None
    return server_args_fields(ServerArgs)


def import_sglang() -> tuple[type, list[FieldSpec]]:
    """`sglang.Engine` (its processes leaving Ctrl-C to us) and the `ServerArgs` fields. The class
    itself, not `sglang.Engine`, a lazy import (sglang/__init__.py)."""
    fields = import_server_args()
    from sglang.srt.entrypoints.engine import Engine

    return without_ctrl_c(Engine), fields


def check_not_a_follower(kwargs: dict) -> None:
    """Refuse a multi-node follower: with nnodes > 1, a process with node_rank >= 1 waits inside
    `Engine()` for rank 0 and never generates (sglang 0.5.23 srt/entrypoints/engine.py `Engine._launch_subprocesses`,
    "Non-zero-rank nodes do not run tokenizer processes")."""
    node_rank = int(kwargs.get("node_rank") or 0)
    if int(kwargs.get("nnodes") or 1) > 1 and node_rank >= 1:
        raise ConfigError(
            f"--engine-arg node_rank={node_rank}: a follower node of a multi-node SGLang engine waits inside "
            "Engine() and never generates. On this node run SGLang itself with the same engine args "
            f"(python -m sglang.launch_server --model-path ... --nnodes {kwargs.get('nnodes')} --node-rank {node_rank} "
            "--dist-init-addr ...), and eagle3-synth on node 0 only (node_rank=0)")


def launch(engine_cls: type, fields: list[FieldSpec], options: EngineOptions) -> SGLangEngine:
    """Start `engine_cls(**kwargs)` and wrap it; the engine's processes are noted for shutdown."""
    check_spawn_safe()
    kwargs = engine_kwargs(options, fields)
    check_not_a_follower(kwargs)
    hint = language_model_only_hint(kwargs)
    if hint:
        log.warning("%s", hint)
    if options.max_in_flight is not None:
        check_window_size(options.max_in_flight)  # before minutes of model loading, not after
    retry = RetryPolicy(max_retries=options.max_retries)
    if any(f.name == "custom_sigquit_handler" for f in fields):
        kwargs["custom_sigquit_handler"] = launch_died  # instead of SGLang's kill of this process
    sigterm = callers_sigterm()
    stderr = StderrTail().start()
    try:
        with owned_children() as owned:
            engine = engine_cls(**kwargs)
    except BaseException as exc:
        kill_trees(owned)
        stderr.close()
        if isinstance(exc, Exception) and not isinstance(exc, ConfigError):
            raise ConfigError(start_failure(exc, stderr.lines())) from exc
        raise
    try:
        owned |= set(engine.get_all_child_pids())
    except Exception as exc:
        log.debug("get_all_child_pids() failed (%s); using the processes seen at launch", exc)
    # SGLang registers an unguarded shutdown at exit; ours replaces it.
    atexit.unregister(engine.shutdown)
    # The loop SGLang's own sync calls use (Engine.loop); requests must run on it too.
    loop = getattr(engine, "loop", None) or asyncio.new_event_loop()
    bind_loop_keep_sigterm(engine, loop, sigterm)
    info = engine_info(engine)
    ceiling = default_max_in_flight(info) if options.max_in_flight is None else options.max_in_flight
    wrapper = SGLangEngine(
        engine,
        loop=loop,
        owned_pids=owned,
        max_in_flight=ceiling,
        retry=retry,
        load_driven=options.max_in_flight is None,
        info=info,
        stderr=stderr,
    )
    on_sigquit(loop, wrapper.on_death)
    wrapper.limits = ContextLimits.from_server_info(info)
    atexit.register(wrapper.close)
    log.info("sglang engine started: %s (%s)", options.model,
             f"{wrapper.max_in_flight} requests in flight" if options.max_in_flight is not None else
             f"in-flight window following the engine's load, {wrapper.max_in_flight} to start, "
             f"{ceiling} at most")
    return wrapper


# The last line of a Python traceback, as SGLang's processes log one ("Scheduler hit an exception: ...").
_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception): \S")
_MEMORY = re.compile(r"memory|\bOOM\b|exit code: -9", re.IGNORECASE)


def start_failure(exc: Exception, log_lines: list[str]) -> str:
    """The one line for an engine that did not start: SGLang's own reason (the last exception its
    processes logged, else what `Engine()` raised) and what to change; a rerun as is fails the same way."""
    logged = [line.strip() for line in log_lines if _EXCEPTION_LINE.match(line.strip())]
    reason = logged[-1] if logged else _one_line(exc)
    memory = ", or free memory for it" if _MEMORY.search(reason) else ""
    return (f"--engine sglang: SGLang could not start: {reason} -- change what it names (SGLang's --flag-name is "
            f"--engine-arg flag_name=VALUE here){memory}; rerun as is and it fails the same way")


def _one_line(exc: Exception) -> str:
    if isinstance(exc, EngineDied):  # our SIGQUIT handler: a child failed, and its log (above) says why
        return "one of its processes failed (its log is above)"
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def use_cpu_backend(engine_args: dict[str, Any]) -> None:
    """`--engine-arg device=cpu`: SGLang's CPU backend, set as the engine is created, before its engine
    and model modules are imported (they read the variable at import time: `_is_cpu = is_cpu()`, sglang
    0.5.23 srt/layers/layernorm.py). A check before it (`check_options`) imports only `ServerArgs`,
    whose modules' own reading (srt/distributed/parallel_state.py) serves the spawned schedulers,
    which import SGLang afresh with the variable set."""
    if engine_args.get("device") == "cpu" and os.environ.get(CPU_ENGINE_VARIABLE) != "1":
        log.info("--engine-arg device=cpu: setting %s=1 (SGLang's CPU backend)", CPU_ENGINE_VARIABLE)
        os.environ[CPU_ENGINE_VARIABLE] = "1"


def check_options(options: EngineOptions) -> None:
    """Before anything loads (engines.ENGINE_CHECKS): every --engine-arg a field of the `ServerArgs`
    installed here and of its type, the reserved ones refused, the CPU dtype, no multi-node follower
    (`engine_kwargs`, as the engine's start checks them again). Without SGLang here there is
    nothing to check them against; starting the engine says how to get it."""
    try:
        fields = import_server_args()
    except ConfigError:
        return
    check_not_a_follower(engine_kwargs(options, fields))


def create(options: EngineOptions) -> SGLangEngine:
    use_cpu_backend(options.engine_args)
    engine_cls, fields = import_sglang()
    return launch(engine_cls, fields, options)
