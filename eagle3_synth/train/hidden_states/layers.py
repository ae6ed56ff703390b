"""Which layers' hidden states a drafter trains on, and capturing them from a transformers model.

Layer ids follow vLLM (what speculators 0.9.0 reads, `speculators/models/utils.py:
resolve_target_layer_ids`): 0 = the embeddings, i = the residual stream entering decoder layer i,
n = the last layer's output BEFORE the final norm (n = the model's `num_hidden_layers`). SGLang, hence
SpecForge, counts "after layer k" and adds one before capturing (SGLang
`set_eagle3_layers_to_capture`: `val + 1`), so SpecForge's EAGLE-3 default `[1, n//2 - 1, n - 4]`
(SpecForge 0.2.0 `specforge/algorithms/model_providers.py: resolve_eagle_capture_layers`) is vLLM's
`[2, n//2, n - 3]`: every trainer's default is the same three layers.

Capture uses forward pre-hooks: the input of decoder layer i is exactly vLLM's id i, and the input
of the final norm is id n. `output_hidden_states=True` would not do for id n: transformers 5.x
replaces its last entry with the normed `last_hidden_state` (`utils/output_capturing.py`,
`tie_last_hidden_states`). The normed state (SpecForge's target) is the base model's own output.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from eagle3_synth.errors import ConfigError

# Drafter -> its trainers' default layer ids for a model of n decoder layers. speculators 0.9.0
# resolves EAGLE-3, DFlash (and DFlash2) and DSpark through the same `resolve_target_layer_ids`
# (`models/eagle3/core.py: Eagle3DraftModel.from_training_args`, `models/dflash/core.py:
# DFlashDraftModel._build_base_config_kwargs`; DSpark subclasses DFlash), and every file also holds the
# final pre-norm state (`train/data.py: ArrowDataset._get_raw_data`, DSpark's `verifier_last_hidden_states`).
DRAFTER_DEFAULTS = {
    "eagle3": lambda n: [2, n // 2, n - 3],
    "dflash": lambda n: [2, n // 2, n - 3],
    "dspark": lambda n: [2, n // 2, n - 3],
}
DRAFTERS = tuple(DRAFTER_DEFAULTS)
MEANING = "0 = embeddings, i = the input of decoder layer i, {n} = the last layer's output before the final norm"


def num_decoder_layers(config: Any) -> int:
    """`num_hidden_layers` of the text model (a multimodal config keeps it in `text_config`), as
    speculators reads it (`models/utils.py: get_verifier_config`)."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    n = getattr(text, "num_hidden_layers", None)
    if not isinstance(n, int) or n < 1:
        raise ConfigError(f"the model's config has no num_hidden_layers ({type(config).__name__})")
    return n


def resolve_layers(layers: Sequence[int] | None, num_layers: int, drafter: str) -> list[int]:
    """The aux layer ids: `layers` if given, else the drafter's default, refused where invalid for
    the model by speculators' own rule (distinct, within [0, n], `models/utils.py: resolve_target_layer_ids`)."""
    if drafter not in DRAFTER_DEFAULTS:
        raise ConfigError(f"--drafter must be one of {', '.join(DRAFTERS)}, got {drafter!r}")
    explicit = layers is not None
    ids = list(layers) if explicit else DRAFTER_DEFAULTS[drafter](num_layers)
    meaning = MEANING.format(n=num_layers)
    if not ids or min(ids) < 0 or max(ids) > num_layers or len(set(ids)) != len(ids):
        if explicit:
            raise ConfigError(f"--layers {' '.join(map(str, ids))}: layer ids must be distinct and within 0..{num_layers} "
                              f"for a model with {num_layers} decoder layers ({meaning})")
        raise ConfigError(f"the default layers of --drafter {drafter} ([2, n//2, n-3] = {ids}) are invalid for a model "
                          f"with {num_layers} decoder layers: pass --layers with distinct ids in 0..{num_layers} "
                          f"({meaning})")
    return ids


@dataclass
class Parts:
    """The modules of a causal LM that capture needs."""

    base: Any  # the decoder stack: its output is the final normed state
    layers: Any  # the decoder layers, in order
    norm: Any  # the final norm
    lm_head: Any


def model_parts(model: Any) -> Parts:
    """Decoder stack, layers, final norm and head of a transformers causal LM (Llama, Qwen, Mistral,
    DeepSeek, Kimi, gpt-oss ... all name them `layers` and `norm`)."""
    base = model.get_decoder() if hasattr(model, "get_decoder") else getattr(model, "model", None)
    layers, norm = getattr(base, "layers", None), getattr(base, "norm", None)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if layers is None or norm is None or head is None:
        raise ConfigError(f"{type(model).__name__}: cannot find its decoder layers, final norm and lm_head "
                          "(expected model.get_decoder().layers / .norm and get_output_embeddings())")
    return Parts(base=base, layers=layers, norm=norm, lm_head=head)


class LayerCapture:
    """Forward pre-hooks keeping the residual stream at the given vLLM layer ids (and id n, the final
    pre-norm state) during one forward of `parts.base`. Use as a context manager; `states()` returns
    the captured tensors in the order asked, then the pre-norm final state."""

    def __init__(self, parts: Parts, layer_ids: Sequence[int], num_layers: int):
        self.parts, self.layer_ids, self.num_layers = parts, list(layer_ids), num_layers
        self._seen: dict[int, Any] = {}
        self._handles: list[Any] = []

    def _keep(self, layer_id: int):
        def hook(module: Any, args: tuple, kwargs: dict) -> None:
            self._seen[layer_id] = args[0] if args else kwargs["hidden_states"]
        return hook

    def __enter__(self) -> "LayerCapture":
        for layer_id in sorted(set(self.layer_ids) | {self.num_layers}):
            module = self.parts.norm if layer_id == self.num_layers else self.parts.layers[layer_id]
            self._handles.append(module.register_forward_pre_hook(self._keep(layer_id), with_kwargs=True))
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def run(self, input_ids: Any, attention_mask: Any) -> tuple[list[Any], Any]:
        """One forward: ([aux states in order..., pre-norm final state], normed final state), each
        [batch, T, H]."""
        self._seen.clear()
        out = self.parts.base(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
        missing = [i for i in [*self.layer_ids, self.num_layers] if i not in self._seen]
        if missing:
            raise ConfigError(f"layer ids {missing} were not reached in the forward pass (does the model run all "
                              f"{self.num_layers} layers?)")
        return [self._seen[i] for i in self.layer_ids] + [self._seen[self.num_layers]], out.last_hidden_state
