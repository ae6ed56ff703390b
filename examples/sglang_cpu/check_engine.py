"""Check the SGLang venv: the CPU kernels load with 0.5.23's attention schemas, and the real
`sglang.Engine` generates on the bundled tiny model the greedy ids transformers does (bf16 both).

Run with the SGLang venv's interpreter (`make sglang-venv` runs it last). Prints one line; exit 1
with the reason otherwise.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

MODEL = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "models" / "tiny-kimi"
PROMPT = [2032, 5, 17, 99, 300, 41, 7, 8]  # any ids below the tiny model's 2048
NEW_TOKENS = 16


def check_kernels() -> None:
    import sgl_kernel  # noqa: F401 - registers torch.ops.sgl_kernel
    import torch

    for op, arguments in (("extend_attention_cpu", 22), ("decode_attention_cpu", 19)):
        schema = getattr(torch.ops.sgl_kernel, op).default._schema
        if len(schema.arguments) != arguments:
            sys.exit(f"sgl_kernel.{op} takes {len(schema.arguments)} arguments, sglang 0.5.23 passes {arguments}")


def transformers_greedy() -> list[int]:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.bfloat16)
    ids = list(PROMPT)
    with torch.no_grad():  # plain argmax steps: no stop token, as SGLang's ignore_eos
        for _ in range(NEW_TOKENS):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(PROMPT):]


def sglang_greedy() -> list[int]:
    import sglang

    from eagle3_synth.engines.sglang.processes import tree_segments, unlink_segments

    engine = sglang.Engine(model_path=str(MODEL), device="cpu", dtype="bfloat16", skip_tokenizer_init=True,
                           log_level="error", mem_fraction_static=0.3)
    # On an AMX CPU the engine's all-reduce segment (up to 258 MiB of /dev/shm) outlives it: removed
    # here as `SGLangEngine.close()` removes its own (read while the engine's processes live).
    segments = tree_segments(os.getpid())
    try:
        result = engine.generate(input_ids=PROMPT, sampling_params={
            "max_new_tokens": NEW_TOKENS, "temperature": 0, "ignore_eos": True})
    finally:
        engine.shutdown()
        unlink_segments(segments)
    return list(result["output_ids"])


def main() -> None:
    os.environ["SGLANG_USE_CPU_ENGINE"] = "1"
    check_kernels()
    expected = transformers_greedy()
    got = sglang_greedy()
    if got != expected:
        sys.exit(f"sglang.Engine (bf16, CPU) greedy ids {got} differ from transformers' (bf16) {expected}")
    print(f"sglang.Engine on the CPU: {len(got)} greedy ids equal to transformers' (bf16)")


if __name__ == "__main__":
    main()
