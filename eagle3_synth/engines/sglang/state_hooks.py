"""Forward hooks that make a stock SGLang return the final state before and after the norm.

SGLang 0.5.23 returns, for a request with `return_hidden_states`, the hidden states its logits processor
stores: with aux capture on (`--enable-return-aux-hidden-states`), the aux layers concatenated and
nothing else (`layers/logits_processor.py` `LogitsProcessor._get_hidden_states_to_store`,
`pack_aux_hidden_states`). A speculators file also needs the last layer's output before the final norm,
and a SpecForge file the state after it. Both are reached through SGLang's own extension point, the
`forward_hooks` server argument (`model_executor/hook_manager.py` `register_forward_hooks`: a JSON list
of {name, target_modules, hook_factory, config}, each factory called with its config and the hook
registered with `register_forward_hook` on every module whose name matches; registered after any graph
capture, `model_runner_components/cuda_graph_setup.py` `finalize_cuda_graph_capture`, so they run on the
eager forward path):

- on the final norm: the decoder stack ends in `residual_batch.final_norm`, which calls the norm
  as `norm(hidden_states, residual)` and gets `(normed, hidden_states + residual)`
  (`layers/layer_boundary/residual/access.py` `final_norm_pair`): the second is the pre-norm state, kept here
  (copied: its storage is borrowed, `residual/batch.py` `final_norm`);
- on the logits processor: its input is the normed state and its output's `hidden_states` what
  the request gets back; the hook appends [pre-norm, normed] to every stored row, so each position
  comes back as [aux_1 .. aux_k, pre-norm, normed] (k+2 states, or 2 without aux capture).

The hooks run in SGLang's scheduler process, which imports this module by name (so this package
must be importable where the server runs) and nothing but torch from it. Nothing changes when a
batch stores no states (`hidden_states` None). A norm that was not hooked (a model whose final
norm has another name) leaves the width at k states, which the caller checks
(`train/hidden_states/sglang_capture.py`), naming this module.
"""

from __future__ import annotations

from typing import Any

_FACTORY_PREFIX = "eagle3_synth.engines.sglang.state_hooks:"
# The pre-norm state of the forward in progress, from the final norm to the logits processor (one
# forward at a time in a scheduler process).
_pending: dict[str, Any] = {}


def keep_prenorm(config: dict[str, Any]) -> Any:
    """Hook factory for the final norm: keep the pre-norm state of this forward."""
    def hook(module: Any, args: tuple, output: Any) -> None:
        if isinstance(output, tuple) and len(output) == 2:
            _pending["prenorm"] = output[1].clone()
        else:  # called without a residual: its input is the pre-norm state
            _pending["prenorm"] = args[0].clone()
    return hook


def append_final_states(config: dict[str, Any]) -> Any:
    """Hook factory for the logits processor: append [pre-norm, normed] to the stored states, or,
    with `config["dir"]`, write each of our requests' states to a file there (`write_files`)."""
    folder = config.get("dir")

    def hook(module: Any, args: tuple, output: Any) -> None:
        import torch

        prenorm = _pending.pop("prenorm", None)
        if folder:
            if prenorm is not None:
                write_files(folder, args, prenorm)
            return
        stored = getattr(output, "hidden_states", None)
        if stored is None or prenorm is None or len(args) < 2:
            return
        normed = args[1]
        if stored.shape[0] != normed.shape[0] or prenorm.shape[0] != normed.shape[0]:
            return  # pruned rows (not a full capture): left as SGLang made them; the caller's width check names it
        output.hidden_states = torch.cat([stored, prenorm.to(stored.dtype), normed.to(stored.dtype)], dim=-1)
    return hook


# Requests whose states `write_files` writes: ids the caller gives them (`rid`), so that a warm-up or
# another client's request writes nothing.
RID_PREFIX = "eagle3-synth-states-"


def write_files(folder: str, args: tuple, prenorm: Any) -> None:
    """Write [T, width] states ([aux_1 .. aux_k (or the normed state without aux capture), pre-norm,
    normed]) of every request of an extend batch whose id starts with RID_PREFIX to
    `folder/<rid>.safetensors` (a temporary name, then a rename: a file that is there is whole).

    The logits processor is called as `logits_processor(input_ids, hidden_states, lm_head,
    forward_batch, aux_hidden_states)` (sglang 0.5.23 `models/llama.py` `LlamaForCausalLM.forward`,
    `models/deepseek_v2.py` `DeepseekV2ForCausalLM.forward`); the batch's rows are its requests' extend
    tokens in order (`forward_batch.rids`,
    `extend_seq_lens_cpu`). The aux states are there whenever the model captures them, whether or not
    the request asked for states back, so nothing crosses SGLang's result path: the states go from
    the device to a file once. Under tensor parallelism every rank holds the same full states; only
    attention-TP rank 0 writes (`_attention_tp_rank`); under attention DP each DP rank's batch holds
    its own requests, each written by its group's rank 0 (not run here: one CPU rank).
    """
    import os

    import torch
    from safetensors.torch import save_file

    batch = args[3] if len(args) > 3 else None
    rids, lengths = getattr(batch, "rids", None), getattr(batch, "extend_seq_lens_cpu", None)
    mode = getattr(batch, "forward_mode", None)
    if not rids or lengths is None or mode is None or not mode.is_extend():
        return
    if not any(rid.startswith(RID_PREFIX) for rid in rids) or _attention_tp_rank() != 0:
        return
    normed = args[1]
    aux = args[4] if len(args) > 4 else None
    if aux is not None and not isinstance(aux, torch.Tensor):
        aux = torch.cat(list(aux), dim=-1)
    first = aux if aux is not None else normed
    states = torch.cat([first, prenorm.to(first.dtype), normed.to(first.dtype)], dim=-1)
    if states.shape[0] != sum(lengths):
        return  # not one row per extend token (padding, a graph replay): nothing written, the caller names the row
    os.makedirs(folder, exist_ok=True)
    offset = 0
    for rid, length in zip(rids, lengths):
        if rid.startswith(RID_PREFIX):
            path = os.path.join(folder, rid + ".safetensors")
            save_file({"states": states[offset:offset + length].to("cpu").contiguous()}, path + ".partial")
            os.replace(path + ".partial", path)
        offset += length


def _attention_tp_rank() -> int:
    """This rank's place in its attention-TP group (`runtime_context.py: get_parallel().attn_tp_rank`,
    what sglang 0.5.23 `layers/dp_attention.py` `_dp_gather_via_all_reduce` tests before its own rank-0
    writes); 0 without parallel state."""
    try:
        from sglang.srt.runtime_context import get_parallel

        return int(get_parallel().attn_tp_rank)
    except Exception:  # noqa: BLE001 - no parallel context (one rank)
        return 0


# Where a model keeps its final norm and logits processor: the text model's own names (`model.norm`,
# `logits_processor`: sglang 0.5.23 srt/models/llama.py, qwen3.py, deepseek_v2.py, gpt_oss.py, in each
# `...Model.__init__` and `...ForCausalLM.__init__`; each ends its stack in `residual_batch.final_norm`,
# e.g. deepseek_v2.py `DeepseekV2Model.forward`) and under `language_model.` for the multimodal wrappers
# that hand the text to it (Kimi-K2.5: kimi_k25.py `KimiK25ForConditionalGeneration.__init__`, a
# DeepseekV3ForCausalLM). A stack that ends in a fused MoE handoff (`residual/batch.py` `final_norm`,
# its `finalize_norm` branch) does not call the norm module: no pre-norm state is kept, no file
# written, and the caller names the row.
NORM_MODULES = ["model.norm", "language_model.model.norm"]
LOGITS_MODULES = ["logits_processor", "language_model.logits_processor"]


def forward_hooks(folder: str | None = None) -> list[dict[str, Any]]:
    """The `forward_hooks` server argument that installs both hooks (`folder`: states to files there)."""
    return [
        {"name": "eagle3_synth_prenorm", "target_modules": NORM_MODULES,
         "hook_factory": _FACTORY_PREFIX + "keep_prenorm", "config": {}},
        {"name": "eagle3_synth_final_states", "target_modules": LOGITS_MODULES,
         "hook_factory": _FACTORY_PREFIX + "append_final_states", "config": {"dir": folder} if folder else {}},
    ]
