"""SpecForge 0.2.0's own CLI, on a machine with no accelerator: one module stood in for, nothing copied.

Run with the interpreter of SpecForge's virtual environment (`make specforge-venv`: `.venv-specforge`),
exactly as the `specforge` command (its console script is `specforge.cli:main`, the wheel's
entry_points.txt):

    .venv-specforge/bin/python -m examples.specforge_cpu train --config run.yaml [section.field=value ...]

An offline EAGLE-3 run (`data.hidden_states_path`) with `training.attention_backend: sdpa` and
`training.fsdp_sharding: NO_SHARD` needs no accelerator anywhere but in its loss (as read in
SpecForge 0.2.0's wheel):

- the device: `utils.py: get_device_type` picks `SPECFORGE_DEVICE`, else cuda/npu when available,
  else "cpu"; for "cpu" `distributed.py` starts gloo (`_DISTRIBUTED_BACKENDS`) and
  `_bind_local_device` binds no device. Set here to "cpu" when unset, so the choice is SpecForge's
  own CPU path by name;
- `NO_SHARD` wraps the draft in plain DDP, with no device ids for a CPU model
  (`training/backend.py: FSDPTrainingBackend.prepare_model`); the sharded strategies use FSDP with
  bf16 mixed precision;
- the draft is built in `model.torch_dtype` (bfloat16 by default, `config/schema.py: ModelConfig`;
  `algorithms/model_providers.py: build_eagle3_draft`), which matches the bf16 `.ckpt` features it
  reads.

The one patch: the EAGLE-3 objective calls `LogSoftmaxLoss.apply(logits, target_p, position_mask)`
(`algorithms/eagle3/model.py: _compute_loss_and_acceptance_rate`, imported at module level), an
autograd function whose forward and backward are triton kernels (`core/loss.py:
log_softmax_forward_kernel`, `LogSoftmaxLoss`), and `core/loss.py` imports triton at module level.
Triton kernels need a GPU, and SpecForge has no other path. Before SpecForge is imported, the module
name `specforge.core.loss` is bound to a module of this file's whose `LogSoftmaxLoss.apply` computes
the same quantity in plain torch (`eagle3_kl_loss` below); `core/loss.py` itself is then never
executed, so triton need not be installed. Nothing else SpecForge runs is changed.

The kernel's quantity, read from `core/loss.py`: for each of the B*T rows of `logits` [B, T, V],
`-sum_v target[v] * log_softmax(logits)[v]` in float32 (`log_softmax_forward_kernel`), 0 for a row
whose `position_mask` is 0 (the loss buffer starts at zero in `LogSoftmaxLoss.forward`, and the
kernel returns early; the mask is taken as a bool), then the mean over all B*T rows (the end of
`forward`). Its backward (`LogSoftmaxLoss.backward`) is the gradient of that expression: `-(target -
softmax * sum(target)) * grad / (B*T)` on unmasked rows, 0 on masked ones, which torch's autograd
gives here. The same file's own "Reference implementation" `_compute_loss` (what
`benchmarks/benchmark_loss.py: benchmark_loss_method` compares the kernel with) computes
`-sum(position_mask * target * log_softmax(logits.float()), -1).mean()`;
tests/examples/test_specforge_cpu.py checks `eagle3_kl_loss` and its gradient against that function,
run from the installed wheel's source.

With an accelerator (a CUDA build of torch that sees a GPU) nothing is patched: SpecForge's own
kernel runs. SpecForge's logger prints one `step N: {metrics}` line per logged step and per
evaluation (`training/assembly.py: _logger`, `training/controller.py: TrainerController._fit`); the
demo reads those lines. Nothing here is imported by eagle3_synth (the package never imports
SpecForge).

`draft-config` is this file's own subcommand, not SpecForge's: the draft config SpecForge itself
derives from the target (`training/model_loading.py: _generate_draft_config`, through its public
`resolve_draft_config`) with `draft_vocab_size` set to ours (the derived one is 32000,
`algorithms/eagle3/providers.py: algorithm_providers`), written as JSON for
`model.draft_model_config` (`config/schema.py: ModelConfig`; read back by
`training/model_loading.py: load_draft_config_source`). Where the run config names
`model.aux_hidden_state_layer_ids` (the same `ModelConfig`), the draft config carries them as
`eagle_config.eagle_aux_hidden_state_layer_ids`, the key both SpecForge
(`algorithms/model_providers.py: resolve_eagle_capture_layers`) and SGLang 0.5.23's EAGLE-3 drafter
(srt/models/llama_eagle3.py `LlamaModel.__init__`) read the target's layers from: the drafter
SpecForge exports then names the layers it trained on, and SGLang captures those, not its default.
"""

from __future__ import annotations

import os
import sys
import types

import torch

SPECFORGE_VERSION = "0.2.0"
LOSS_MODULE = "specforge.core.loss"


def eagle3_kl_loss(logits: torch.Tensor, target: torch.Tensor, position_mask: torch.Tensor) -> torch.Tensor:
    """SpecForge's EAGLE-3 KL term in plain torch: mean over the B*T rows of the masked cross-entropy
    `-sum_v target * log_softmax(logits)` (see the module docstring for the kernel it follows)."""
    batch, length, vocab = logits.shape
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    per_row = -(target.float() * log_probs).sum(dim=-1)  # [B, T]
    keep = position_mask.reshape(batch, length).bool()
    return torch.where(keep, per_row, torch.zeros_like(per_row)).mean()


class PlainLogSoftmaxLoss:
    """Stands in for `core/loss.py: LogSoftmaxLoss`; only its `apply` is called
    (`eagle3/model.py: _compute_loss_and_acceptance_rate`)."""

    @staticmethod
    def apply(logits: torch.Tensor, target: torch.Tensor, position_mask: torch.Tensor) -> torch.Tensor:
        return eagle3_kl_loss(logits, target, position_mask)


def _check_version() -> None:
    from importlib.metadata import version

    found = version("specforge")
    if found != SPECFORGE_VERSION:
        raise SystemExit(f"examples/specforge_cpu.py: error: patch read from SpecForge {SPECFORGE_VERSION}, "
                         f"found {found}; check core/loss.py and algorithms/eagle3/model.py again before running")


def patch() -> None:
    """Bind `specforge.core.loss` to the plain-torch loss (idempotent); refuse another SpecForge release."""
    _check_version()
    if torch.cuda.is_available():
        return  # a GPU: SpecForge's own triton kernel
    os.environ.setdefault("SPECFORGE_DEVICE", "cpu")
    current = sys.modules.get(LOSS_MODULE)
    if current is not None and getattr(current, "LogSoftmaxLoss", None) is PlainLogSoftmaxLoss:
        return
    if current is not None:
        raise SystemExit(f"examples/specforge_cpu.py: error: {LOSS_MODULE} was imported before the patch")
    module = types.ModuleType(LOSS_MODULE, "EAGLE-3 loss in plain torch (examples/specforge_cpu.py)")
    module.LogSoftmaxLoss = PlainLogSoftmaxLoss  # type: ignore[attr-defined]
    sys.modules[LOSS_MODULE] = module


def write_draft_config(run_config: str, draft_vocab_size: int, out: str) -> None:
    """SpecForge's own target-derived draft config for `run_config`, with our draft vocabulary size."""
    from specforge.application import resolve_run
    from specforge.config import load_config
    from specforge.training.model_loading import resolve_draft_config

    cfg = load_config(run_config, [])
    if cfg.model.draft_model_config:
        raise SystemExit(f"examples/specforge_cpu.py draft-config: error: {run_config} already names "
                         "model.draft_model_config; give a run config without it")
    provider = resolve_run(cfg).algorithm.providers.model.draft_config
    draft = resolve_draft_config(cfg, provider=provider)
    draft.draft_vocab_size = draft_vocab_size
    if cfg.model.aux_hidden_state_layer_ids is not None:
        eagle_config = dict(getattr(draft, "eagle_config", None) or {})
        eagle_config["eagle_aux_hidden_state_layer_ids"] = list(cfg.model.aux_hidden_state_layer_ids)
        draft.eagle_config = eagle_config
    draft.to_json_file(out)


def main(argv: list[str]) -> int:
    patch()
    if argv[:1] == ["draft-config"]:
        if len(argv) != 4:
            raise SystemExit("usage: specforge_cpu.py draft-config RUN_YAML DRAFT_VOCAB_SIZE OUT_JSON")
        write_draft_config(argv[1], int(argv[2]), argv[3])
        return 0
    from specforge.cli import main as specforge_main

    return specforge_main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
