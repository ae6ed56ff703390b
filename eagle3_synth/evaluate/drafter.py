"""An EAGLE-3 drafter as SGLang 0.5.23 serves it: read from its folder, checked against its target.

Two layouts are read:
- "sglang": SGLang's own `LlamaForCausalLMEagle3` (srt/models/llama_eagle3.py), which SpecForge
  0.2.0's `export --to sglang` writes: config.json with that architecture, weights `midlayer.*` or
  `layers.0.*`, `fc`, `norm`, `lm_head`, `d2t`, `t2d` (`LlamaForCausalLMEagle3.load_weights`).
- "speculators": speculators 0.9.0's save (`speculators_model_type: "eagle3"`, the decoder layer's
  settings in `transformer_layer_config`: models/eagle3/config.py `Eagle3SpeculatorConfig`). SGLang cannot load it (its
  config has no `model_type`), so `sglang_config` rewrites the config for SGLang and `write_sglang`
  puts it beside links to the same weights, whose names SGLang reads as they are.

SGLang skips a weight whose name it does not know without a word (llama_eagle3.py
`LlamaForCausalLMEagle3.load_weights`) and serves a drafter with that part random, and a drafter
that does not fit its target fails in the scheduler after minutes of loading; `fit_problems` finds
both before the engine starts.
"""

from __future__ import annotations

import json
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eagle3_synth.engines.sglang.aux_layers import capture_problem, captured_layers, sglang_ids_for
from eagle3_synth.errors import ConfigError

SGLANG_ARCHITECTURE = "LlamaForCausalLMEagle3"
# Weight names SGLang's loader places (after its `midlayer` -> `layers.0` rename, `model.` optional).
_KNOWN = re.compile(
    r"(model\.)?(layers\.\d+\.(self_attn\.[qkvo]_proj|mlp\.(gate|up|down)_proj|input_layernorm|post_attention_layernorm"
    r"|hidden_norm)\.weight|fc\.weight|norm\.weight|lm_head\.weight|embed_tokens\.weight|input_norm\.weight"
    r"|fc_norm\.\d+\.weight|d2t|t2d)")
_LEGACY = {"midlayer": "layers.0", "aux_norm_low": "fc_norm.0", "aux_norm_mid": "fc_norm.1", "aux_norm_high": "fc_norm.2"}


@dataclass(frozen=True)
class Drafter:
    path: Path
    layout: str  # "sglang" | "speculators"
    config: dict[str, Any]  # config.json as written
    shapes: dict[str, tuple[int, ...]]  # every weight's name -> shape (from the safetensors headers)

    @property
    def layer_config(self) -> dict[str, Any]:
        """The decoder layer's settings (speculators keeps them apart, SGLang's layout at the top)."""
        return self.config.get("transformer_layer_config") or {} if self.layout == "speculators" else self.config

    @property
    def hidden_size(self) -> int | None:
        return self.layer_config.get("hidden_size")

    @property
    def target_hidden_size(self) -> int | None:
        return self.config.get("target_hidden_size") or self.hidden_size

    @property
    def vocab_size(self) -> int | None:
        return self.layer_config.get("vocab_size")

    @property
    def draft_vocab_size(self) -> int | None:
        return self.config.get("draft_vocab_size") or self.vocab_size

    @property
    def sliding_window(self) -> int | None:
        """The attention window the drafter layer was trained with (speculators writes a Llama layer
        config with `layer_types` ["sliding_attention"] and `sliding_window`, speculators 0.9.0
        models/eagle3/core.py `Eagle3DraftModel.__init__`),
        None for full attention. SGLang serves it only when told: `speculative_draft_window_size`
        (llama_eagle3.py `LlamaForCausalLMEagle3.__init__`)."""
        layer = self.layer_config
        sliding = layer.get("use_sliding_window") or "sliding_attention" in (layer.get("layer_types") or [])
        window = layer.get("sliding_window")
        return window if sliding and isinstance(window, int) and window > 0 else None

    def sglang_layer_ids(self, architecture: str, num_layers: int) -> list[int] | None:
        """The aux layer ids in SGLang's numbering (None: its default). speculators records vLLM's."""
        if self.layout == "speculators":
            ids = self.config.get("eagle_aux_hidden_state_layer_ids")
            return None if ids is None else sglang_ids_for(architecture, num_layers, ids)
        return (self.config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")

    def weight(self, name: str) -> tuple[int, ...] | None:
        for key in (name, f"model.{name}"):
            if key in self.shapes:
                return self.shapes[key]
        return None


def read_drafter(path: str | Path) -> Drafter:
    """The drafter in folder `path`: its config and its weights' shapes (no tensor is loaded)."""
    folder = Path(path)
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise ConfigError(f"--drafter {folder}: no config.json there (a drafter folder: SpecForge's `export --to sglang` "
                          "output, or the checkpoint folder speculators saved)")
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--drafter {config_file}: not a JSON config ({exc})") from None
    if config.get("speculators_model_type") == "eagle3":
        layout = "speculators"
    elif SGLANG_ARCHITECTURE in (config.get("architectures") or []):
        layout = "sglang"
    else:
        raise ConfigError(f"--drafter {config_file}: neither an SGLang EAGLE-3 drafter (architectures "
                          f"[{SGLANG_ARCHITECTURE!r}]) nor a speculators one (speculators_model_type 'eagle3'); "
                          f"it has architectures {config.get('architectures')}, "
                          f"speculators_model_type {config.get('speculators_model_type')!r}")
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ConfigError(f"--drafter {folder}: no .safetensors weights there")
    shapes: dict[str, tuple[int, ...]] = {}
    for file in files:
        shapes.update(safetensors_shapes(file))
    return Drafter(folder, layout, config, shapes)


def safetensors_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Each tensor's shape from a .safetensors file's JSON header (8-byte length, then the header)."""
    with open(path, "rb") as handle:
        try:
            (length,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(length))
        except (struct.error, ValueError) as exc:
            raise ConfigError(f"--drafter {path}: not a safetensors file ({exc})") from None
    return {name: tuple(entry["shape"]) for name, entry in header.items() if name != "__metadata__"}


def sglang_name(name: str) -> str:
    for legacy, new in _LEGACY.items():
        name = name.replace(legacy, new)
    return name


def fit_problems(drafter: Drafter, target: dict[str, Any], architecture: str) -> list[str]:
    """Every way `drafter` does not fit the target (its config.json as a dict), or SGLang would
    serve it other than trained; [] when it fits."""
    problems = []
    text = target.get("text_config") or target
    hidden, vocab, layers = text.get("hidden_size"), text.get("vocab_size"), text.get("num_hidden_layers")
    if drafter.target_hidden_size != hidden:
        problems.append(f"it takes the target's states of size {drafter.target_hidden_size}, the target's hidden size is {hidden}")
    if drafter.vocab_size != vocab:
        problems.append(f"its vocabulary is {drafter.vocab_size} ids, the target's {vocab}")
    unknown = sorted(n for n in drafter.shapes if not _KNOWN.fullmatch(sglang_name(n)))
    if unknown:
        problems.append(f"SGLang would skip its weights {', '.join(unknown[:4])}{' ...' if len(unknown) > 4 else ''} "
                        "without a word and serve those parts random (llama_eagle3.py:371-378)")
    if drafter.layout == "speculators":
        problems += _speculators_problems(drafter)
    if isinstance(layers, int):
        problems += _layer_problems(drafter, architecture, layers, hidden)
    draft_vocab = drafter.draft_vocab_size
    for name, expected in (("lm_head.weight", (draft_vocab, drafter.hidden_size)), ("d2t", (draft_vocab,)), ("t2d", (vocab,))):
        shape = drafter.weight(name)
        if shape is not None and shape != expected:
            problems.append(f"its {name} has shape {list(shape)}, expected {list(expected)}")
    if draft_vocab != vocab and drafter.weight("d2t") is None:
        problems.append(f"its draft vocabulary ({draft_vocab}) differs from the target's ({vocab}) but it has no d2t mapping")
    return problems


def _layer_problems(drafter: Drafter, architecture: str, num_layers: int, hidden: int | None) -> list[str]:
    """Whether SGLang can hand the drafter the layers it was trained on, as many as its fc takes."""
    named = drafter.sglang_layer_ids(architecture, num_layers)
    trained = drafter.config.get("eagle_aux_hidden_state_layer_ids")
    if drafter.layout == "speculators" and trained is not None and named is None:
        return [f"SGLang's {architecture} cannot capture its layers {trained} (aux_layers.py)"]
    problems = []
    captured = captured_layers(architecture, num_layers, named)
    problem = capture_problem(num_layers, captured)
    if problem:
        problems.append(f"its aux layers (vLLM's numbering) are {captured}: {problem}")
    fc = drafter.weight("fc.weight")
    if fc is not None and hidden and fc[-1] != len(captured) * hidden:
        problems.append(f"its fc takes {fc[-1]} features, SGLang hands it {len(captured)} layers x {hidden}")
    return problems


def _speculators_problems(drafter: Drafter) -> list[str]:
    """What of a speculators drafter SGLang's LlamaForCausalLMEagle3 has no counterpart for."""
    problems = []
    layer_type = drafter.layer_config.get("model_type")
    if layer_type != "llama":
        problems.append(f"its decoder layer is {layer_type!r} (transformer_layer_config.model_type): SGLang's EAGLE-3 "
                        "drafter is a Llama layer (llama_eagle3.py:46-120; a qwen3 layer's q/k norms would be skipped)")
    if drafter.config.get("norm_before_residual"):
        problems.append("it was trained with norm_before_residual=true (speculators' default: train/config/schema.py:145), "
                        "which SGLang's drafter layer does not do (residual = the state before hidden_norm, "
                        "llama_eagle3.py:98-101); train it with --no-norm-before-residual")
    return problems


def sglang_config(drafter: Drafter, architecture: str, num_layers: int) -> dict[str, Any]:
    """A speculators drafter's config as SGLang's LlamaForCausalLMEagle3 reads it.

    speculators 0.9.0 (models/eagle3/config.py) -> SGLang 0.5.23 (srt/models/llama_eagle3.py):
    transformer_layer_config.* -> the top level (a LlamaConfig: hidden_size, heads, rms_norm_eps, ...);
    draft_vocab_size -> draft_vocab_size (`LlamaForCausalLMEagle3.__init__`); target_hidden_size ->
    target_hidden_size when set; eagle_aux_hidden_state_layer_ids (vLLM's numbering) -> eagle_config.
    eagle_aux_hidden_state_layer_ids in SGLang's (aux_layers.py); norm_before_fc ->
    eagle_config.norm_before_fc; fc_norm -> fc_norm; norm_output -> norm_output (all read in
    `LlamaModel.__init__`; with norm_output, `LlamaModel.forward` feeds the normed state back between
    draft steps). tie_word_embeddings is false: the drafter's lm_head is its own, of
    draft_vocab_size rows (`LlamaForCausalLMEagle3.__init__`)."""
    config = {key: value for key, value in drafter.layer_config.items() if key not in ("architectures", "auto_map")}
    eagle_config: dict[str, Any] = {}
    named = drafter.sglang_layer_ids(architecture, num_layers)
    if named is not None:
        eagle_config["eagle_aux_hidden_state_layer_ids"] = named
    if drafter.config.get("norm_before_fc"):
        eagle_config["norm_before_fc"] = True
    config.update(architectures=[SGLANG_ARCHITECTURE], model_type="llama", tie_word_embeddings=False,
                  draft_vocab_size=drafter.draft_vocab_size, eagle_config=eagle_config)
    if drafter.config.get("target_hidden_size"):
        config["target_hidden_size"] = drafter.config["target_hidden_size"]
    for flag in ("fc_norm", "norm_output"):
        if drafter.config.get(flag):
            config[flag] = True
    return config


def write_sglang(drafter: Drafter, out: Path, architecture: str, num_layers: int) -> Path:
    """`out` holding the speculators drafter in SGLang's layout: the rewritten config.json and a
    link to each weights file (the tensors are not copied)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(sglang_config(drafter, architecture, num_layers), indent=2) + "\n",
                                     encoding="utf-8")
    for file in sorted(drafter.path.glob("*.safetensors")):
        link = out / file.name
        if link.is_symlink() or link.exists():
            link.unlink()
        os.symlink(file.resolve(), link)
    return out
