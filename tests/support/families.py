"""The fixture tokenizers that behave like real model families, with what each must resolve to."""

from __future__ import annotations

from ..conftest import FIXTURES

TOKENIZERS = FIXTURES / "tokenizers"
# folder -> (profile auto picks, message form probed: (call content, arguments), tools rendered)
EXPECTED = {
    "kimi_k25": ("kimi_k2", ("as_given", "as_given"), True),
    "kimi_k2_thinking": ("kimi_k2", ("as_given", "as_given"), True),
    "qwen3": ("qwen3", ("empty", "as_given"), True),
    "qwen3_coder": ("qwen3_coder", ("as_given", "object"), True),
    "deepseek_v31": ("deepseek", ("empty", "string"), False),
    "deepseek_r1": ("deepseek", ("empty", "string"), False),
    "deepseek_v31_tojson": ("deepseek", ("as_given", "object"), False),
    "deepseek_v4": ("deepseek_dsml", ("as_given", "object"), True),
    "gpt_oss": ("gpt_oss", ("as_given", "object"), True),
    "glm45": ("glm45", ("as_given", "object"), True),
    "minimax_m2": ("minimax_m2", ("as_given", "object"), True),
}
