"""What SpecForge 0.2.0's offline route reads from the target model folder, beyond the `.ckpt` files.

Its target head opens the ONE `*.index.json` of `model.target_model_path` and loads
`weight_map["lm_head.weight"]` from the file named there (`modeling/target/target_head.py: TargetHead.load_weights`,
no fallback); the draft's embedding is loaded the same way when there is an index
(`modeling/draft/base.py: Eagle3DraftModel.load_embedding`, key `model.embed_tokens.weight`). A single-file model has no
index, and a model with tied embeddings stores no `lm_head.weight`: for those we write a small
folder beside the states, the model's config and tokenizer files (copied) plus one safetensors
file holding the head and the embedding, and an index naming both.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

LM_HEAD_KEY = "lm_head.weight"
EMBEDDING_KEY = "model.embed_tokens.weight"  # SpecForge's default `model.embedding_key` (config/schema.py: ModelConfig)
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
HEAD_FILE = "head.safetensors"
INDEX_FILE = "model.safetensors.index.json"


def usable_as_is(model_path: Path) -> bool:
    """A local folder with exactly one index that maps both keys SpecForge reads."""
    indexes = list(Path(model_path).glob("*.index.json"))
    if len(indexes) != 1:
        return False
    weight_map = json.loads(indexes[0].read_text(encoding="utf-8")).get("weight_map", {})
    return LM_HEAD_KEY in weight_map and EMBEDDING_KEY in weight_map


def write_target_folder(model: Any, model_path: Path, out: Path) -> Path:
    """`out` made into a folder SpecForge can take as `model.target_model_path` (offline)."""
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    for path in Path(model_path).iterdir():
        if path.is_file() and not path.name.endswith(WEIGHT_SUFFIXES) and not path.name.endswith(".index.json"):
            shutil.copy2(path, out / path.name)
    tensors = {LM_HEAD_KEY: model.get_output_embeddings().weight.detach().to("cpu").clone(),
               EMBEDDING_KEY: model.get_input_embeddings().weight.detach().to("cpu").clone()}
    tmp = out / f".{HEAD_FILE}.partial"
    save_file(tensors, str(tmp))
    tmp.replace(out / HEAD_FILE)
    index = {"metadata": {"note": "written by eagle3-synth hidden-states for SpecForge's offline target head"},
             "weight_map": {key: HEAD_FILE for key in tensors}}
    (out / INDEX_FILE).write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
    return out
