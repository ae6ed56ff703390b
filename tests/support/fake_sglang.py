"""A stand-in for `sglang.Engine` 0.5.23 (which needs a GPU), with its real surface and habits.

What it copies from the real class (sglang 0.5.23's srt/entrypoints/engine.py: `Engine.__init__` builds
its ServerArgs from the keywords and registers `shutdown` with atexit; `Engine.async_generate`;
`Engine.shutdown`):
- `Engine(**kwargs)`: an unknown keyword is `TypeError("Unexpected keyword argument 'x'")`, a
  missing `model_path` `TypeError("Missing required argument 'model_path'")`;
- `async_generate` with the real parameter list; a flat `input_ids` list is one request and returns one
  result dict (sglang_results.py shapes); an unknown sampling key is a `TypeError`; a duplicate
  in-flight `rid` a `ValueError` (srt/managers/tokenizer_manager.py `TokenizerManager._init_req_state`);
  stop strings with `skip_tokenizer_init` a `ValueError` (srt/sampling/sampling_params.py
  `raise_if_tokenizer_required`);
- request handling is bound to the loop running when the first request arrives (the real tokenizer
  manager's `auto_create_handle_loop`), which also installs SIGTERM/SIGQUIT handlers on it: using
  another loop later fails here (the real engine would hang);
- `__init__` starts a worker process and registers `shutdown` with `atexit`; `shutdown()` ends in
  `kill_process_tree(os.getpid(), include_parent=False)`, which kills *every* child of the caller;
- the tokenizer manager's length checks on the caller's own objects (sglang 0.5.23
  srt/managers/tokenizer_manager.py `TokenizerManager._validate_one_request`): without
  `allow_auto_truncate` a prompt of n ids is a ValueError when n >= context_len or n + max_new_tokens >
  context_len; with it, the caller's `input_ids` list is cut in place (`del input_ids[context_len:]`)
  and the caller's `sampling_params["max_new_tokens"]` lowered to fit;
- `get_server_info()` with `internal_states[0]["effective_max_running_requests_per_dp"]`, read
  through the tokenizer manager on `self.loop` (binding it, as the real call does),
  `get_all_child_pids()`, `loop`.

What each request does is the test's `plan(input_ids, sampling) -> Reply`.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import signal
import subprocess
import sys
import threading
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Dict, List, Optional, Union

from eagle3_synth.engines.sglang.args import FieldSpec
from stand_ins import sglang_results as R

SAMPLING_KEYS = set(R.SAMPLING_KEYS)


class Arg:
    """The shape of sglang.srt.arg_groups.arg_utils.Arg as it appears in ServerArgs annotations."""

    def __init__(self, help: str, choices: list | None = None):
        self.help = help
        self.choices = choices


# Real ServerArgs fields (0.5.23), annotations as msgspec.structs.fields reports them.
FIELDS = [
    FieldSpec("model_path", Annotated[str, Arg("The path of the model weights.")], required=True),
    FieldSpec("tokenizer_path", Annotated[Optional[str], "The path of the tokenizer."]),
    FieldSpec("skip_tokenizer_init", Annotated[bool, "If set, skip init tokenizer and pass input_ids in generate request."]),
    FieldSpec("trust_remote_code", Annotated[bool, "Whether or not to allow for custom models defined on the Hub."]),
    FieldSpec("dtype", Annotated[str, Arg("Data type for model weights and activations.", choices=[
        "auto", "half", "float16", "bfloat16", "float", "float32"])]),
    FieldSpec("log_level", Annotated[str, "The logging level of all loggers."]),
    FieldSpec("tp_size", Annotated[int, Arg("The tensor parallelism size.")]),
    FieldSpec("dp_size", Annotated[int, Arg("The data parallelism size.")]),
    FieldSpec("attn_dp_size", Annotated[int, Arg("The attention data parallelism size: the number of data-parallel "
                                                 "attention groups inside the TP group, one scheduler each, while the "
                                                 "FFN stays tensor parallel.")]),
    FieldSpec("nnodes", Annotated[int, Arg("The number of nodes.")]),
    FieldSpec("node_rank", Annotated[int, Arg("The node rank.")]),
    FieldSpec("mem_fraction_static", Annotated[Optional[float], "The fraction of the memory used for static allocation."]),
    FieldSpec("max_running_requests", Annotated[Optional[int], "The maximum number of running requests."]),
    FieldSpec("schedule_policy", Annotated[str, Arg("The scheduling policy of the requests.", choices=[
        "lpm", "random", "fcfs", "dfs-weight", "lof", "priority", "routing-key", "hrrn", "shortest-prefill-first"])]),
    FieldSpec("cuda_graph_bs_decode", Annotated[Optional[List[int]], "Explicit list of batch sizes to capture."]),
    FieldSpec("json_model_override_args", Annotated[str, "A dictionary in JSON string format."]),
    FieldSpec("enable_deterministic_inference", Annotated[bool, "Enable deterministic inference mode."]),
    FieldSpec("enable_priority_scheduling", Annotated[bool, "Enable priority scheduling. Requests with higher priority "
                                                            "integer values will be scheduled first by default."]),
]
FIELD_NAMES = {f.name for f in FIELDS}


def descendants(pid: int) -> list[int]:
    """All descendants of pid, via `ps` (independent of the code under test)."""
    out = subprocess.run(["ps", "-e", "-o", "pid=,ppid="], capture_output=True, text=True, check=True).stdout
    children: dict[int, list[int]] = {}
    for line in out.splitlines():
        child, parent = (int(x) for x in line.split())
        children.setdefault(parent, []).append(child)
    found, stack = [], [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def kill_process_tree(parent_pid, include_parent: bool = True, skip_pid: int = None, wait_timeout: Optional[float] = 60):
    """Like sglang.srt.utils.common.kill_process_tree: SIGKILL every descendant (and the parent)."""
    if parent_pid is None:
        parent_pid, include_parent = os.getpid(), False
    victims = [p for p in descendants(parent_pid) if p != skip_pid]
    if include_parent and parent_pid != os.getpid():
        victims.append(parent_pid)
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for pid in victims:  # reap our own children, as psutil.wait_procs does
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass


def is_alive(pid: int) -> bool:
    """Running, not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@dataclass
class Reply:
    """What one request does: wait `delay_s` and until `wait_until()` holds, then return `result`
    or raise `error`."""

    result: dict[str, Any] | None = None
    error: BaseException | None = None
    delay_s: float = 0.0
    wait_until: Callable[[], bool] | None = None


class HTTPException(Exception):
    """fastapi.HTTPException's shape: SGLang raises it for an abort with status 500..599."""

    def __init__(self, status_code: int, detail: str):
        super().__init__(status_code, detail)
        self.status_code = status_code
        self.detail = detail


class LoadSnapshot:
    """One DP rank's load, as `get_loads()` returns it (srt/managers/load_snapshot.py `LoadSnapshot`, `to_dict`: a
    msgspec struct whose `to_dict` gives the flat "core" fields)."""

    def __init__(self, **fields: Any):
        self.fields = fields

    def to_dict(self, include: Any = None) -> Dict[str, Any]:
        return dict(self.fields)


class FakeTokenizerManager:
    def __init__(self, engine: "Engine | None" = None) -> None:
        self.engine = engine
        self.load_reads = 0
        self.aborted: list[str] = []
        self.event_loop: asyncio.AbstractEventLoop | None = None
        self.gracefully_exit = False

    def abort_request(self, rid: str = "", abort_all: bool = False) -> None:
        self.aborted.append(rid)

    def auto_create_handle_loop(self) -> None:
        """As the real one: bind to the running loop (else a new one) and, in the main thread,
        install SIGTERM (drain, then kill the process tree) and SIGQUIT handlers on it."""
        if self.event_loop is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
        self.event_loop = loop
        if threading.current_thread() is threading.main_thread():
            loop.add_signal_handler(signal.SIGTERM, self.sigterm_handler)
            loop.add_signal_handler(signal.SIGQUIT, lambda: None)

    def sigterm_handler(self) -> None:
        self.gracefully_exit = True

    async def get_loads(self, include: Any = None, dp_rank: Any = None) -> List[LoadSnapshot]:
        """One snapshot per DP rank (tokenizer_control_mixin.py `TokenizerControlMixin.get_loads`): the requests inside
        async_generate, `capacity` of them running per rank, the rest waiting."""
        self.auto_create_handle_loop()
        self.load_reads += 1
        engine = self.engine
        ranks = engine.ranks
        running = min(engine.running, engine.capacity * ranks)
        waiting = engine.running - running
        return [LoadSnapshot(dp_rank=r, num_running_reqs=running // ranks + (r < running % ranks),
                             num_waiting_reqs=waiting // ranks + (r < waiting % ranks),
                             max_running_requests=engine.capacity, token_usage=running / (engine.capacity * ranks))
                for r in range(ranks)]


class Engine:
    """Configure with `Engine.configure(plan=..., fields=..., capacity=...)` in a subclass."""

    plan: Callable[[list[int], dict[str, Any]], Reply] = staticmethod(lambda ids, sampling: Reply())
    field_names: frozenset[str] = frozenset()
    capacity: int = 8
    context_len: int = 1 << 20

    @classmethod
    def configure(cls, plan: Callable[[list[int], dict[str, Any]], Reply], field_names: set[str],
                  capacity: int = 8, context_len: int = 1 << 20) -> type["Engine"]:
        return type("Engine", (cls,), {"plan": staticmethod(plan), "field_names": frozenset(field_names),
                                       "capacity": capacity, "context_len": context_len,
                                       "__module__": cls.__module__})

    def __init__(self, **kwargs):
        for key in kwargs:
            if key not in self.field_names:
                raise TypeError(f"Unexpected keyword argument '{key}'")
        if "model_path" not in kwargs:
            raise TypeError("Missing required argument 'model_path'")
        kwargs.setdefault("log_level", "error")
        self.server_args = kwargs
        self.tokenizer_manager = FakeTokenizerManager(self)
        self.tokenizer_manager.model_config = types.SimpleNamespace(context_len=self.context_len)
        atexit.register(self.shutdown)
        self._workers = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
        self.loop = asyncio.new_event_loop()
        self.calls: list[dict[str, Any]] = []
        self.running = 0
        self.max_running = 0
        self._live_rids: set[str] = set()

    @property
    def ranks(self) -> int:
        """DP ranks: `dp_size` replicas x `attn_dp_size` attention-DP workers (after parallel_hook.py
        `handle_deprecated_dp_attention`)."""
        return int(self.server_args.get("dp_size") or 1) * int(self.server_args.get("attn_dp_size") or 1)

    def get_all_child_pids(self) -> List[int]:
        return [p.pid for p in self._workers]

    def get_server_info(self) -> Dict[str, Any]:
        """As the real one: runs the tokenizer manager's get_internal_state on self.loop (which binds it)."""
        async def get_internal_state() -> List[Dict[str, Any]]:
            self.tokenizer_manager.auto_create_handle_loop()
            # One state per DP scheduler, each with its own running-request capacity (internal_state.py
            # `SchedulerInternalStateController._add_topology`).
            return [{"effective_max_running_requests_per_dp": self.capacity} for _ in range(self.ranks)]

        # context_length is the server argument (None unless given; the model's is
        # tokenizer_manager.model_config.context_len, seen on the real 0.5.23);
        # max_req_input_len = min(ctx-1, kv-1) - 5 (tp_worker.py `TpModelWorker.get_worker_info`)
        return {"context_length": None, "dp_size": 1, "attn_dp_size": 1, **self.server_args,
                "version": "0.5.23",
                "max_req_input_len": self.context_len - 1 - 5,
                "internal_states": self.loop.run_until_complete(get_internal_state())}

    async def async_generate(
        self,
        prompt: Optional[Union[List[str], str]] = None,
        sampling_params: Optional[Union[List[Dict], Dict]] = None,
        input_ids: Optional[Union[List[List[int]], List[int]]] = None,
        image_data: Optional[Any] = None,
        audio_data: Optional[Any] = None,
        video_data: Optional[Any] = None,
        mm_hashes: Optional[Union[List[str], List[List[str]]]] = None,
        mm_content_hashes: Optional[Union[List[Optional[str]], List[List[Optional[str]]]]] = None,
        return_logprob: Optional[Union[List[bool], bool]] = False,
        logprob_start_len: Optional[Union[List[int], int]] = None,
        top_logprobs_num: Optional[Union[List[int], int]] = None,
        token_ids_logprob: Optional[Union[List[List[int]], List[int]]] = None,
        lora_path: Optional[List[Optional[str]]] = None,
        custom_logit_processor: Optional[Union[List[str], str]] = None,
        require_reasoning: bool = False,
        return_hidden_states: Any = False,
        return_routed_experts: bool = False,
        routed_experts_start_len: int = 0,
        stream: bool = False,
        bootstrap_host: Optional[Union[List[str], str]] = None,
        bootstrap_port: Optional[Union[List[int], int]] = None,
        bootstrap_room: Optional[Union[List[int], int]] = None,
        routed_dp_rank: Optional[int] = None,
        disagg_prefill_dp_rank: Optional[int] = None,
        kv_hints: Optional[Dict] = None,
        data_parallel_rank: Optional[int] = None,
        external_trace_header: Optional[Dict] = None,
        rid: Optional[Union[List[str], str]] = None,
        session_params: Optional[Dict] = None,
        priority: Optional[int] = None,
        session_id: Optional[str] = None,
        *,
        cache_salt: Optional[Union[List[str], str]] = None,
    ) -> Union[Dict, Any]:
        self.tokenizer_manager.auto_create_handle_loop()
        if asyncio.get_running_loop() is not self.tokenizer_manager.event_loop:
            raise RuntimeError("request handling is bound to another event loop (the real engine would hang)")
        if prompt is not None:
            raise ValueError("The engine initialized with skip_tokenizer_init=True cannot accept text prompts.")
        if input_ids is None:
            raise ValueError("Either text, input_ids or input_embeds should be provided.")
        if not input_ids or not isinstance(input_ids[0], int):
            raise AssertionError("the adapter must send one flat prompt per request")
        self._check_lengths(input_ids, sampling_params)
        sampling = dict(sampling_params or {})
        for key in sampling:
            if key not in SAMPLING_KEYS:
                raise TypeError(f"Unexpected keyword argument '{key}'")
        if sampling.get("stop"):
            raise ValueError(f"stop={sampling['stop']!r} is unavailable when skip_tokenizer_init=True "
                             "(requires tokenizer to decode tokens to text for matching).")
        if rid in self._live_rids:
            raise ValueError(f"Duplicate request ID detected: {rid}")
        self._live_rids.add(rid)
        if (priority is not None and not self.server_args.get("enable_priority_scheduling")
                and self.server_args.get("abort_on_priority_when_disabled")):
            # srt/managers/scheduler.py `Scheduler._set_or_validate_priority`: without priority scheduling a
            # priority is ignored, unless abort_on_priority_when_disabled, which aborts the request with 503
            raise HTTPException(503, "Using priority is disabled for this server. Please send a new request without "
                                     "a priority.")
        self.calls.append({"input_ids": list(input_ids), "sampling_params": sampling, "rid": rid, "stream": stream,
                           "priority": priority})
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        try:
            reply = self.plan(list(input_ids), sampling)
            if reply.delay_s:
                await asyncio.sleep(reply.delay_s)
            for _ in range(10_000):  # bounded (~10 s): a wrong adapter fails the test instead of hanging it
                if reply.wait_until is None or reply.wait_until():
                    break
                await asyncio.sleep(0.001)
            if reply.error is not None:
                raise reply.error
            result = dict(reply.result)
            result["meta_info"] = {**result["meta_info"], "id": rid}
            return result
        finally:
            self.running -= 1
            self._live_rids.discard(rid)

    def _check_lengths(self, input_ids: List[int], sampling_params: Optional[Dict]) -> None:
        """`TokenizerManager._validate_one_request`, on the caller's own list and dict (as the real one)."""
        truncate = bool(self.server_args.get("allow_auto_truncate"))
        n = len(input_ids)
        if n >= self.context_len:
            if not truncate:
                raise ValueError(R.context_too_long(n, self.context_len))
            del input_ids[self.context_len:]
            n = len(input_ids)
        max_new_tokens = (sampling_params or {}).get("max_new_tokens")
        if max_new_tokens is not None and max_new_tokens + n > self.context_len:
            if not truncate:
                raise ValueError(R.total_too_long(n, max_new_tokens, self.context_len))
            sampling_params["max_new_tokens"] = max(0, self.context_len - n)

    def shutdown(self):
        """As the real one ends: kill every descendant of the calling process."""
        kill_process_tree(os.getpid(), include_parent=False, wait_timeout=60)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc_value, traceback):
        self.shutdown()
        return False
