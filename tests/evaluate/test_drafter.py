"""Drafters read from their folders and checked against the target before any engine starts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from eagle3_synth.engines.sglang.aux_layers import capture_problem, captured_layers, sglang_ids_for
from eagle3_synth.errors import ConfigError
from eagle3_synth.evaluate import fit_problems, read_drafter, sglang_config, write_sglang, check_drafter

from ..conftest import TINY_MODEL

TARGET = json.loads((TINY_MODEL / "config.json").read_text())  # 2 layers, hidden 128, vocabulary 2048
H, V, DRAFT_V = 128, 2048, 256
LAYER = {"hidden_size": H, "intermediate_size": 352, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
         "num_hidden_layers": 1, "vocab_size": V, "rms_norm_eps": 1e-6, "model_type": "llama"}


def weights(aux: int = 2, extra: tuple[str, ...] = (), prefix: str = "layers.0") -> dict[str, np.ndarray]:
    f = np.float32
    tensors = {f"{prefix}.self_attn.q_proj.weight": np.zeros((128, 2 * H), f), f"{prefix}.self_attn.k_proj.weight": np.zeros((64, 2 * H), f),
               f"{prefix}.self_attn.v_proj.weight": np.zeros((64, 2 * H), f), f"{prefix}.self_attn.o_proj.weight": np.zeros((H, 128), f),
               f"{prefix}.mlp.gate_proj.weight": np.zeros((352, H), f), f"{prefix}.mlp.up_proj.weight": np.zeros((352, H), f),
               f"{prefix}.mlp.down_proj.weight": np.zeros((H, 352), f), f"{prefix}.input_layernorm.weight": np.ones(H, f),
               f"{prefix}.post_attention_layernorm.weight": np.ones(H, f), f"{prefix}.hidden_norm.weight": np.ones(H, f),
               "norm.weight": np.ones(H, f), "fc.weight": np.zeros((H, aux * H), f), "lm_head.weight": np.zeros((DRAFT_V, H), f),
               "d2t": np.zeros(DRAFT_V, np.int64), "t2d": np.zeros(V, bool)}
    tensors.update({name: np.zeros(1, f) for name in extra})
    return tensors


def speculators_drafter(folder: Path, **config) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    base = {"speculators_model_type": "eagle3", "architectures": ["Eagle3Speculator"], "transformer_layer_config": dict(LAYER),
            "draft_vocab_size": DRAFT_V, "norm_before_residual": False, "eagle_aux_hidden_state_layer_ids": [0, 1]}
    base.update(config)
    (folder / "config.json").write_text(json.dumps(base))
    save_file(weights(aux=len(base["eagle_aux_hidden_state_layer_ids"] or [0, 0, 0])), str(folder / "model.safetensors"))
    return folder


def sglang_drafter(folder: Path, layer_ids=(-1, 0), **config) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    base = {"architectures": ["LlamaForCausalLMEagle3"], **LAYER, "draft_vocab_size": DRAFT_V,
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(layer_ids)}}
    base.update(config)
    (folder / "config.json").write_text(json.dumps(base))
    save_file(weights(aux=len(layer_ids), prefix="midlayer"), str(folder / "model.safetensors"))
    return folder


def test_a_fitting_drafter_of_either_layout_has_no_problem(tmp_path):
    for folder in (speculators_drafter(tmp_path / "spec"), sglang_drafter(tmp_path / "sgl")):
        drafter = read_drafter(folder)
        assert fit_problems(drafter, TARGET, "LlamaForCausalLM") == [], folder
    assert read_drafter(tmp_path / "spec").layout == "speculators"
    assert read_drafter(tmp_path / "sgl").layout == "sglang"
    assert read_drafter(tmp_path / "sgl").shapes["fc.weight"] == (H, 2 * H)  # read from the header alone


@pytest.mark.parametrize("change, message", [
    (dict(transformer_layer_config={**LAYER, "vocab_size": 4096}), "its vocabulary is 4096 ids, the target's 2048"),
    (dict(target_hidden_size=256), "it takes the target's states of size 256, the target's hidden size is 128"),
    (dict(eagle_aux_hidden_state_layer_ids=[0, 1, 2]), "layer 2 cannot be captured by SGLang"),
    (dict(norm_before_residual=True), "norm_before_residual=true"),
    (dict(transformer_layer_config={**LAYER, "model_type": "qwen3"}), "its decoder layer is 'qwen3'"),
])
def test_a_misfit_speculators_drafter_is_named(tmp_path, change, message):
    drafter = read_drafter(speculators_drafter(tmp_path / "d", **change))
    problems = fit_problems(drafter, TARGET, "LlamaForCausalLM")
    assert any(message in p for p in problems), problems


def test_a_weight_sglang_would_skip_and_a_repeated_layer_are_refused(tmp_path):
    folder = sglang_drafter(tmp_path / "d", layer_ids=(0, 0))
    save_file(weights(aux=2, extra=("layers.0.self_attn.q_norm.weight",), prefix="midlayer"), str(folder / "model.safetensors"))
    problems = fit_problems(read_drafter(folder), TARGET, "LlamaForCausalLM")
    assert any("SGLang would skip its weights layers.0.self_attn.q_norm.weight" in p for p in problems), problems
    assert any("repeat a layer" in p for p in problems), problems


def test_check_drafter_refuses_with_every_problem_in_one_line(tmp_path):
    folder = speculators_drafter(tmp_path / "d", norm_before_residual=True, eagle_aux_hidden_state_layer_ids=[1, 2])
    with pytest.raises(ConfigError) as caught:
        check_drafter(folder, str(TINY_MODEL))
    message = str(caught.value)
    assert message.startswith(f"--drafter {folder} does not fit the target {TINY_MODEL} (LlamaForCausalLM): ")
    assert "norm_before_residual=true" in message and "layer 2 cannot be captured" in message and "\n" not in message


def test_not_a_drafter_folder_is_named(tmp_path):
    with pytest.raises(ConfigError, match="no config.json there"):
        read_drafter(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    with pytest.raises(ConfigError, match=r"neither an SGLang EAGLE-3 drafter .* it has architectures \['LlamaForCausalLM'\]"):
        read_drafter(tmp_path)


def test_a_speculators_drafter_in_sglang_layout(tmp_path):
    drafter = read_drafter(speculators_drafter(tmp_path / "d", norm_output=True))
    config = sglang_config(drafter, "LlamaForCausalLM", num_layers=2)
    assert config["architectures"] == ["LlamaForCausalLMEagle3"] and config["model_type"] == "llama"
    assert config["eagle_config"] == {"eagle_aux_hidden_state_layer_ids": [-1, 0]}  # vLLM's 0, 1 in SGLang's numbering
    assert (config["hidden_size"], config["vocab_size"], config["draft_vocab_size"]) == (H, V, DRAFT_V)
    assert config["tie_word_embeddings"] is False and config["norm_output"] is True
    out = write_sglang(drafter, tmp_path / "sgl", "LlamaForCausalLM", 2)
    assert (out / "model.safetensors").resolve() == (tmp_path / "d" / "model.safetensors").resolve()
    served = read_drafter(out)
    assert served.layout == "sglang" and fit_problems(served, TARGET, "LlamaForCausalLM") == []


@pytest.mark.parametrize("architecture, n, named, captured", [
    ("LlamaForCausalLM", 32, None, [2, 16, 29]),          # llama.py set_eagle3_layers_to_capture: the default, as it is
    ("LlamaForCausalLM", 32, [1, 15, 28], [2, 16, 29]),   # llama.py (the same): + 1
    ("Qwen3ForCausalLM", 36, [1, 17, 32], [2, 18, 33]),   # qwen3.py set_eagle3_layers_to_capture
    ("DeepseekV3ForCausalLM", 61, [1, 29, 57], [2, 30, 58]),  # deepseek_v2.py: + 1 when the first is 1
    ("DeepseekV3ForCausalLM", 61, [2, 30, 58], [2, 30, 58]),  # deepseek_v2.py: else as they are
    ("GptOssForCausalLM", 24, [1, 11, 24], [1, 11, 24]),  # gpt_oss.py: as they are when the last is n
    ("GptOssForCausalLM", 24, [1, 11, 20], [2, 12, 21]),  # gpt_oss.py: else + 1
])
def test_sglang_layer_numbering_per_family(architecture, n, named, captured):
    assert captured_layers(architecture, n, named) == captured
    if named is not None and capture_problem(n, captured) is None:
        assert captured_layers(architecture, n, sglang_ids_for(architecture, n, captured)) == captured


def test_what_sglang_cannot_capture():
    assert "the last layer's output (2) is never an aux state" in capture_problem(2, [0, 1, 2])
    assert sglang_ids_for("DeepseekV3ForCausalLM", 61, [1, 30, 58]) is None  # named 1 it adds one, named 0 it does not
