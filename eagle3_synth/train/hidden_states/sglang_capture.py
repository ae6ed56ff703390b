"""`hidden-states --engine sglang|sglang-http`: the target's states captured by a stock SGLang 0.5.23.

One prefill per row (`max_new_tokens` 1), the rows sent longest first through the adapter's
in-flight window so SGLang batches rows of like length. A row's states are [T, width], each
position [aux_1 .. aux_k, pre-norm, normed]:

- the aux layers by SGLang's own capture, without a draft: `enable_return_aux_hidden_states` with
  `speculative_algorithm=EAGLE3` (the validation hook keeps the capture and drops the algorithm,
  `arg_groups/validation_hook.py` `handle_aux_hidden_state_capture`) and
  `return_aux_hidden_state_layer_ids` in the family's numbering (`engines/sglang/aux_layers.py`);
  SGLang captures them in layer order, whatever order they are named in (`models/llama.py`
  `LlamaModel.forward`, the decoder loop);
- the last layer's output before the final norm and the state after it, appended by our forward
  hooks (`engines/sglang/state_hooks.py`, the `forward_hooks` server argument): no file of SGLang's
  is changed, and what the trainers store last is SGLang's own final residual sum.

No row can come back short: the prefix cache is off (`disable_radix_cache`: a cached prefix is not
recomputed, so its states are not returned) and chunked prefill is off (`chunked_prefill_size` -1:
`batch_result_processor.py` `SchedulerBatchResultProcessor.process_batch_result_prefill` drops the
states of a row's middle chunks); and every row's count is checked against its ids anyway
(`ShortRow`, naming the row), as is the width.

With chunked prefill off, SGLang sizes its activation reserve from `max_prefill_tokens` (sglang
0.5.23 srt/arg_groups/memory_hook.py `handle_gpu_memory_settings`: 512 MB + 1.5 MB a token of
max(max_prefill_tokens, 2048), taken off the device's memory to give `mem_fraction_static`); its
default, 16,384 tokens, reserves ~25 GB, more than a 24 GB CPU machine has, and the engine cannot
start. So the capture sets `max_prefill_tokens` to the longest row it will prefill (at least 2,048,
the reserve's own floor): what one prefill really holds, since SGLang still admits a longer row
alone when nothing else is batched (srt/managers/schedule_policy.py `PrefillAdder`, "Without
chunking, allow the first request even above the input cap"). An `--engine-arg max_prefill_tokens`
of the user's wins; a server started otherwise is not refused for it.

Transport, two ways (`--states-via`):
- files (the default): our logits-processor hook writes each row's states, in the model's dtype,
  from the scheduler to `<folder>/<rid>.safetensors` (the request carries that id and asks for no
  states back), and this process reads the file, checks it, writes the trainer's file and removes
  it. 2 bytes a value, read as they were written: the states cost about what their bytes do;
- the response (`return_hidden_states`: one entry of [T, width] lists,
  `managers/scheduler_components/batch_result_processor.py`
  `SchedulerBatchResultProcessor._append_prefill_hidden_states`): SGLang's `.tolist()` in the
  scheduler, a pickle to the tokenizer manager, JSON over HTTP: about 11 bytes a value, each value
  converted three times, a cost that grows with the model's width (benchmarks/README.md). Only for a
  server whose folder this machine cannot see.
Either way the values are the model dtype's own, so the cast back is exact.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from eagle3_synth.engines.base import StatesEngine
from eagle3_synth.engines.sglang.aux_layers import capture_problem, rule_for, sglang_ids_for
from eagle3_synth.engines.sglang.state_hooks import RID_PREFIX, forward_hooks
from eagle3_synth.errors import ConfigError, EngineError
from eagle3_synth.train.hidden_states.layouts import Item

# The states each position carries after the aux layers: the pre-norm and the normed final state.
FINAL_STATES = 2
# One prefill: the first output token is sampled from it, and the request ends there.
PREFILL_ONLY = {"max_new_tokens": 1, "temperature": 0.0}
# SGLang's floor of the tokens its activation reserve is sized for (memory_hook.py, above): fewer
# would save no memory, only batch fewer rows.
MIN_PREFILL_TOKENS = 2048
# Server arguments the capture sets for SGLang's sizing, not for what comes back: a user's own wins.
SIZING = frozenset({"max_prefill_tokens"})


class ShortRow(EngineError):
    """SGLang returned fewer positions (or another width) than the row has: never written."""


@dataclass(frozen=True)
class CapturePlan:
    """Which states SGLang is asked for, and where each requested layer sits in what comes back."""

    layers: tuple[int, ...]  # vLLM ids, in the order the files store them (the final pre-norm state follows)
    num_layers: int
    hidden_size: int
    architecture: str
    sglang_ids: tuple[int, ...] | None  # return_aux_hidden_state_layer_ids; None: no aux capture
    captured: tuple[int, ...]  # the aux layers SGLang returns, in vLLM ids, in the order returned
    # Where SGLang's hooks write each row's states (absolute; seen by SGLang and by this process);
    # None: they come back in the response.
    folder: str | None = None
    longest: int | None = None  # tokens of the longest row to prefill (None: none left)

    @property
    def width(self) -> int:
        """Values per position in a response: the aux layers (or, without aux capture, SGLang's
        normed state), then the two final states."""
        return (max(len(self.captured), 1) + FINAL_STATES) * self.hidden_size

    def server_args(self) -> dict[str, Any]:
        """The SGLang server arguments this capture needs (engine kwargs, or a server's flags)."""
        args: dict[str, Any] = {"enable_return_hidden_states": True, "disable_radix_cache": True,
                                "chunked_prefill_size": -1, "forward_hooks": forward_hooks(self.folder)}
        if self.longest is not None:
            args["max_prefill_tokens"] = max(self.longest, MIN_PREFILL_TOKENS)
        if self.sglang_ids is not None:
            args.update(enable_return_aux_hidden_states=True, speculative_algorithm="EAGLE3",
                        return_aux_hidden_state_layer_ids=list(self.sglang_ids))
        return args

    def server_flags(self) -> str:
        """`python -m sglang.launch_server` flags for a server this command can read states from."""
        import json
        import shlex

        flags = []
        for key, value in self.server_args().items():
            flag = "--" + key.replace("_", "-")
            if value is True:
                flags.append(flag)
            elif isinstance(value, list) and key != "forward_hooks":
                flags.append(f"{flag} {' '.join(map(str, value))}")
            else:
                flags.append(f"{flag} {shlex.quote(json.dumps(value) if isinstance(value, list) else str(value))}")
        return " ".join(flags)

    def split(self, values: Any, item: Item, dtype: str) -> tuple[list[Any], Any]:
        """One row's response ([T, width] floats) as ([the layers' states in order..., pre-norm], normed),
        each [T, H] in `dtype` (the engine's: the values are its own, so the cast is exact); a short
        or misshapen answer raises ShortRow."""
        import torch

        array = values if isinstance(values, torch.Tensor) else torch.from_numpy(np.asarray(values, dtype=np.float32))
        t, h = len(item.input_ids), self.hidden_size
        if array.ndim != 2 or array.shape[0] != t:
            got = array.shape[0] if array.ndim == 2 else f"an array of shape {tuple(array.shape)}"
            raise ShortRow(f"row {item.row_id}: SGLang returned {got} positions of its {t} (a server with the prefix "
                           "cache or chunked prefill on returns only some; start it with the flags "
                           f"`hidden-states --dry-run` prints); nothing written for it")
        if array.shape[1] != self.width:
            raise ShortRow(f"row {item.row_id}: SGLang returned {array.shape[1]} values per position, not {self.width} "
                           f"({max(len(self.captured), 1)} states + pre-norm + normed, hidden size {h}): "
                           "a server without our forward hooks (eagle3_synth.engines.sglang.state_hooks, importable "
                           "where the server runs) or with other aux layers")
        states = array.to(getattr(torch, dtype)).view(t, -1, h)
        by_layer = {layer: states[:, column] for column, layer in enumerate(self.captured)}
        prenorm, normed = states[:, -2], states[:, -1]
        by_layer[self.num_layers] = prenorm
        return [by_layer[layer] for layer in self.layers] + [prenorm], normed


def plan_capture(layers: Sequence[int], model_config: Any, folder: str | None = None,
                 longest: int | None = None) -> CapturePlan:
    """Map vLLM layer ids to what SGLang captures for this model's family, or refuse naming why;
    `folder`: the states go through files there (`states_of_rows`); `longest`: the longest row's tokens."""
    text = model_config.get_text_config()
    num_layers, hidden = int(text.num_hidden_layers), int(text.hidden_size)
    architecture = (getattr(model_config, "architectures", None) or ["?"])[0]
    aux = sorted(layer for layer in layers if layer != num_layers)  # id n is the pre-norm state we append
    if not aux:
        return CapturePlan(tuple(layers), num_layers, hidden, architecture, None, (), folder, longest)
    problem = capture_problem(num_layers, aux)
    named = sglang_ids_for(architecture, num_layers, aux)
    if problem is None and (named is None or min(named) < 0):
        rule, read = rule_for(architecture)
        problem = (f"{architecture} numbers layers by SGLang's {rule!r} rule{'' if read else ' (assumed)'} "
                   f"(engines/sglang/aux_layers.py), under which no return_aux_hidden_state_layer_ids captures "
                   f"layers {aux}")
    if problem is not None:
        raise ConfigError(f"--engine sglang: --layers {' '.join(map(str, layers))}: {problem}; the transformers "
                          "engine captures any layer")
    return CapturePlan(tuple(layers), num_layers, hidden, architecture, tuple(named), tuple(aux), folder, longest)


def check_server_args(plan: CapturePlan, url: str, info: dict[str, Any]) -> CapturePlan:
    """A server the user started must run with the capture's arguments (its /get_server_info),
    checked before any row is sent; the message names each difference and the flags to use. Its
    hooks' folder is the server's to choose: the plan returned uses it (files there), or the
    response where the server's hooks have none."""
    wanted = plan.server_args()
    diffs = []
    for key, value in wanted.items():
        have = info.get(key)
        if key == "chunked_prefill_size":
            ok = have is not None and int(have) <= 0
        elif key == "speculative_algorithm" or key in SIZING:
            continue  # dropped by SGLang's validation hook once it has turned on the capture; the server's to size
        elif key == "forward_hooks":
            ok = _without_folder(have) == _without_folder(value)
        else:
            ok = have == value
        if not ok:
            diffs.append(f"{key} is {have!r}, not {value!r}")
    if diffs:
        raise ConfigError(f"--url {url}: this server cannot return the states asked for ({'; '.join(diffs)}); start it "
                          f"as: python -m sglang.launch_server --model-path MODEL {plan.server_flags()}")
    return replace(plan, folder=hooks_folder(info.get("forward_hooks")))


def _without_folder(hooks: Any) -> Any:
    if not isinstance(hooks, list):
        return hooks
    return [{**hook, "config": {k: v for k, v in (hook.get("config") or {}).items() if k != "dir"}}
            if isinstance(hook, dict) else hook for hook in hooks]


def hooks_folder(hooks: Any) -> str | None:
    """The folder a server's `forward_hooks` have our hook write states to (None: the response)."""
    for hook in hooks if isinstance(hooks, list) else ():
        if isinstance(hook, dict) and str(hook.get("hook_factory", "")).endswith(":append_final_states"):
            return (hook.get("config") or {}).get("dir") or None
    return None


def states_of_rows(engine: StatesEngine, plan: CapturePlan, items: Iterable[Item], dtype: str
                   ) -> Iterator[tuple[Item, list[Any], Any]]:
    """(item, [states in order..., pre-norm], normed) for every item, in the order SGLang finishes them:
    from the file SGLang's hook wrote for the row (read, then removed) or from the response."""
    folder = Path(plan.folder) if plan.folder is not None else None
    run = secrets.token_hex(4)
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)

    def request(index: int, item: Item) -> tuple[tuple[Item, str | None], list[int], str | None]:
        """(key, ids, rid): keyed by the item and the id its states file is named by (None: the response)."""
        rid = None if folder is None else f"{RID_PREFIX}{run}-{index}"
        return (item, rid), item.input_ids.tolist(), rid

    requests = (request(index, item) for index, item in enumerate(items))
    for (item, rid), values in engine.prefill_states(requests, PREFILL_ONLY):
        if rid is not None:
            values = _take_states_file(folder / f"{rid}.safetensors", item)
        yield (item, *plan.split(values, item, dtype))
    if folder is not None:
        try:
            folder.rmdir()  # when empty: a folder of our own making, left only with a file in it
        except OSError:
            pass


def _take_states_file(path: Path, item: Item) -> Any:
    """The states SGLang's hook wrote for `item`, read and the file removed."""
    from safetensors.torch import load_file

    if not path.is_file():
        raise ShortRow(f"row {item.row_id}: SGLang finished its prefill but wrote no states to {path} (a server "
                       "started without the forward hooks `--dry-run` prints, with another --states-dir, or on "
                       "another machine: give --states-via response there); nothing written for it")
    values = load_file(str(path))["states"]
    path.unlink()
    return values


@contextmanager
def sglang_engine(options: Any, capture: CapturePlan) -> Iterator[tuple[StatesEngine, CapturePlan]]:
    """The SGLang adapter `options.engine` names, started (`sglang`: the Engine in this process with
    the capture's arguments added to `--engine-arg`s) or checked (`sglang-http`: each server's
    arguments), with the capture as it runs (over HTTP the servers' hooks say where the states go);
    closed on the way out."""
    from eagle3_synth.engines import EngineOptions, create_engine

    wanted = capture.server_args()
    if options.engine == "sglang":
        clash = sorted(key for key in wanted if key in options.engine_args and key not in SIZING)
        if clash:
            raise ConfigError(f"--engine-arg {', '.join(clash)}: set by hidden-states itself (the capture runs SGLang "
                              f"with {plan_text(wanted)})")
        engine_args = {**wanted, **options.engine_args}
    else:
        engine_args = dict(options.engine_args)
    engine_options = EngineOptions(model=options.model, dtype=options.dtype, urls=tuple(options.urls),
                                   trust_remote_code=options.trust_remote_code, engine_args=engine_args,
                                   max_in_flight=options.max_in_flight)
    engine = create_engine(options.engine, engine_options)
    try:
        if options.engine == "sglang-http":
            folders = {url: check_server_args(capture, url, engine.server_info(url) or {}).folder for url in engine.urls.urls}
            if len(set(folders.values())) > 1:
                places = ", ".join(f"{url}: {folder or 'the response'}" for url, folder in folders.items())
                raise ConfigError(f"the servers' hooks write states to different places ({places}): start them with "
                                  "one --forward-hooks")
            capture = replace(capture, folder=next(iter(folders.values())))
        yield engine, capture
    finally:
        engine.close()


def plan_text(args: dict[str, Any]) -> str:
    return ", ".join(f"{key}={value!r}" for key, value in args.items() if key != "forward_hooks") + " and its forward_hooks"
