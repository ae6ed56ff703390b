"""Which of the target's hidden states SGLang 0.5.23 hands an EAGLE-3 drafter: its layer numbering.

Our layer ids follow vLLM (`train/hidden_states/layouts.py`): 0 = the embeddings, i = the input of
decoder layer i, n = the last layer's output before the final norm. SGLang's decoder loop captures the
input of layer i for each i in `model.layers_to_capture` (srt/models/llama.py `LlamaModel.forward`,
`capture_output` on layer i), so a captured id is vLLM's id, and only 0..n-1 can be captured: the last
layer's output (n) never is.

The drafter's config names the layers in SGLang's own numbering (`eagle_config.
eagle_aux_hidden_state_layer_ids`), which each model family turns into `layers_to_capture` in its
`set_eagle3_layers_to_capture`, differently:
- "plus one" (llama.py, qwen2.py, qwen3.py): explicit id k means "the output
  of layer k", captured as k + 1; no ids: [2, n//2, n-3] as they are;
- "deepseek" (deepseek_v2.py; kimi_k25.py hands its language model the ids): k + 1
  only when the first id is 1, else the ids as they are;
- "gpt-oss" (gpt_oss.py): the ids as they are when the largest is n, else k + 1.
"""

from __future__ import annotations

from collections.abc import Sequence

# SGLang architecture name -> its rule (the files above). Others are taken to follow "plus one",
# what llama.py does and most families copy; `rule_for` says when it guessed.
RULES = {
    "LlamaForCausalLM": "plus one", "Qwen2ForCausalLM": "plus one", "Qwen3ForCausalLM": "plus one",
    "DeepseekV2ForCausalLM": "deepseek", "DeepseekV3ForCausalLM": "deepseek",
    "KimiK25ForConditionalGeneration": "deepseek", "GptOssForCausalLM": "gpt-oss",
}
DEFAULT_RULE = "plus one"


def rule_for(architecture: str) -> tuple[str, bool]:
    """(the family's rule, whether it was read from SGLang's source for this architecture)."""
    return RULES.get(architecture, DEFAULT_RULE), architecture in RULES


def captured_layers(architecture: str, num_layers: int, sglang_ids: Sequence[int] | None) -> list[int]:
    """The layers SGLang captures for a drafter whose config names `sglang_ids` (None: none named),
    in vLLM's numbering (= SGLang's `layers_to_capture`)."""
    if sglang_ids is None:
        return [2, num_layers // 2, num_layers - 3]
    ids = list(sglang_ids)
    rule, _ = rule_for(architecture)
    if rule == "deepseek" and not (ids and ids[0] == 1):
        return ids
    if rule == "gpt-oss" and ids and max(ids) == num_layers:
        return ids
    return [k + 1 for k in ids]


def sglang_ids_for(architecture: str, num_layers: int, vllm_ids: Sequence[int]) -> list[int] | None:
    """The ids a drafter config must name for SGLang to capture `vllm_ids`; None when no naming
    does (the deepseek rule cannot capture a first layer of 1: named 1 it adds one, named 0 it does not)."""
    wanted = list(vllm_ids)
    for named in ([k - 1 for k in wanted], wanted):
        if captured_layers(architecture, num_layers, named) == wanted:
            return named
    return None


def capture_problem(num_layers: int, captured: Sequence[int]) -> str | None:
    """Why SGLang cannot hand a drafter these captured layers (vLLM ids), None when it can."""
    outside = [k for k in captured if not 0 <= k < num_layers]
    if outside:
        return (f"layer{'s' if len(outside) > 1 else ''} {', '.join(map(str, outside))} cannot be captured by SGLang: "
                f"it captures the inputs of decoder layers 0..{num_layers - 1} (`LlamaModel.forward`), so the last "
                f"layer's output ({num_layers}) is never an aux state")
    if len(set(captured)) != len(captured):
        return f"layers {list(captured)} repeat a layer, which SGLang captures once (fewer states than the drafter's fc takes)"
    return None
