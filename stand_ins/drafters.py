"""Drafters the real SGLang serves, for the tests (tests/engines/real/test_evaluate.py) and the
benchmark (benchmarks/bench_evaluate.py) that evaluate one."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file


def random_drafter(folder: Path) -> Path:
    """An SGLang-layout EAGLE-3 drafter for the tiny model with random weights (draft vocabulary 256)."""
    rng = np.random.default_rng(0)
    hidden, heads, kv_heads, head_dim, inter, vocab, draft = 128, 4, 2, 32, 352, 2048, 256

    def normal(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": hidden, "intermediate_size": inter,
        "num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": head_dim, "num_hidden_layers": 1,
        "vocab_size": vocab, "draft_vocab_size": draft, "rms_norm_eps": 1e-6, "max_position_embeddings": 32768,
        "rope_theta": 50000.0, "tie_word_embeddings": False, "hidden_act": "silu",
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [-1, 0]}}))  # captures layers 0 and 1
    ones = np.ones(hidden, np.float32)
    save_file({
        "midlayer.self_attn.q_proj.weight": normal(heads * head_dim, 2 * hidden),
        "midlayer.self_attn.k_proj.weight": normal(kv_heads * head_dim, 2 * hidden),
        "midlayer.self_attn.v_proj.weight": normal(kv_heads * head_dim, 2 * hidden),
        "midlayer.self_attn.o_proj.weight": normal(hidden, heads * head_dim),
        "midlayer.mlp.gate_proj.weight": normal(inter, hidden), "midlayer.mlp.up_proj.weight": normal(inter, hidden),
        "midlayer.mlp.down_proj.weight": normal(hidden, inter), "midlayer.input_layernorm.weight": ones,
        "midlayer.post_attention_layernorm.weight": ones, "midlayer.hidden_norm.weight": ones, "norm.weight": ones,
        "fc.weight": normal(hidden, 2 * hidden), "lm_head.weight": normal(draft, hidden),
        "d2t": rng.permutation(vocab)[:draft].astype(np.int64) - np.arange(draft), "t2d": np.zeros(vocab, bool),
    }, str(folder / "model.safetensors"))
    return folder
