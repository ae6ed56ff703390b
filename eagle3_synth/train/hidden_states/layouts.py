"""The files each trainer reads hidden states from, written atomically (a temporary name, then a
rename), so a killed run leaves either a whole file or none under the trainer's name.

- `speculators` (0.9.0): `<prepared>/hidden_states/hs_<i>.safetensors`, `i` the row of the dataset
  `prepare-data` saved (hs_connectors `transfer.py: FileTransfer.get_cached`), keys `token_ids` [T]
  int64 (compared with `torch.equal` to the prepared `input_ids`, `train/data.py: ArrowDataset._get_raw_data`) and
  `hidden_states` [T, n_aux + 1, H]: the aux layers, then the final pre-norm state
  (the same `_get_raw_data` slices `[:, :-1]` / `[:, -1]`; the verifier norm is applied by the
  drafter, `models/eagle3/core.py: Eagle3DraftModel.forward`). Any float dtype: the collator casts to
  `--hidden-states-dtype` (`train/data.py: CollateFn`).
- `specforge` (0.2.0): one `torch.save` file per row, `input_ids` [T], `loss_mask` [T],
  `hidden_state` [1, T, H] = the final state after the model's norm (its target head is the bare
  `lm_head`, `modeling/target/target_head.py: TargetHead.forward`) and `aux_hidden_state` [1, T, n_aux * H]
  (`algorithms/eagle3/data.py: normalize_offline_sample`), in bfloat16: the target head is built in
  bf16 (`TargetHead.from_pretrained`). The reader lists every `*.ckpt` under the folder, sorted
  (`runtime/data_plane/offline_reader.py: list_feature_files`); temporary names end otherwise.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eagle3_synth.errors import ConfigError
from eagle3_synth.files import temporary_name, written_whole
from eagle3_synth.run.kill_points import kill_point

# Which layers' hidden states a drafter trains on, and capturing them from a transformers model.
#
# Layer ids follow vLLM (what speculators 0.9.0 reads, `speculators/models/utils.py:
# resolve_target_layer_ids`): 0 = the embeddings, i = the residual stream entering decoder layer i,
# n = the last layer's output BEFORE the final norm (n = the model's `num_hidden_layers`). SGLang, hence
# SpecForge, counts "after layer k" and adds one before capturing (SGLang
# `set_eagle3_layers_to_capture`: `val + 1`), so SpecForge's EAGLE-3 default `[1, n//2 - 1, n - 4]`
# (SpecForge 0.2.0 `specforge/algorithms/model_providers.py: resolve_eagle_capture_layers`) is vLLM's
# `[2, n//2, n - 3]`: every trainer's default is the same three layers.
#
# Capture uses forward pre-hooks: the input of decoder layer i is exactly vLLM's id i, and the input
# of the final norm is id n. `output_hidden_states=True` would not do for id n: transformers 5.x
# replaces its last entry with the normed `last_hidden_state` (`utils/output_capturing.py`,
# `tie_last_hidden_states`). The normed state (SpecForge's target) is the base model's own output.

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


# What SpecForge 0.2.0's offline route reads from the target model folder, beyond the `.ckpt` files.
#
# Its target head opens the ONE `*.index.json` of `model.target_model_path` and loads
# `weight_map["lm_head.weight"]` from the file named there (`modeling/target/target_head.py: TargetHead.load_weights`,
# no fallback); the draft's embedding is loaded the same way when there is an index
# (`modeling/draft/base.py: Eagle3DraftModel.load_embedding`, key `model.embed_tokens.weight`). A single-file model has no
# index, and a model with tied embeddings stores no `lm_head.weight`: for those we write a small
# folder beside the states, the model's config and tokenizer files (copied) plus one safetensors
# file holding the head and the embedding, and an index naming both.

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


MANIFEST = "eagle3_synth_hidden_states.json"
TMP_SUFFIX = ".partial"


def temp_path(path: Path) -> Path:
    """A name no trainer lists (speculators wants `hs_*.safetensors`, SpecForge `*.ckpt`)."""
    return path.with_name(temporary_name(path.name, suffix=TMP_SUFFIX))


def clear_stale(path: Path) -> None:
    """Remove what a killed writer of this file left (any pid: each file belongs to one shard)."""
    for stale in path.parent.glob(f".{path.name}.*{TMP_SUFFIX}"):
        stale.unlink(missing_ok=True)


def written(path: Path):
    """`files.written_whole` under a name no trainer lists, the crash-test hook before the rename."""
    clear_stale(path)
    return written_whole(path, temporary=temp_path(path), before_rename=lambda: kill_point("hidden_states.before_rename"))


@dataclass(frozen=True)
class Item:
    """One file to write: its name, the ids (and mask) it holds, and the row it comes from."""

    name: str
    input_ids: Any  # np.ndarray int64 [T]
    loss_mask: Any  # np.ndarray [T] or None (speculators keeps the mask in its prepared dataset)
    row_id: str  # `<config>-<sample_id>`, as `export --format ids` names the row
    prompt_tokens: int


class SpeculatorsLayout:
    name = "speculators"
    fixed_dtype = None  # stored in the computation dtype

    def __init__(self, folder: Path):
        self.folder = Path(folder) / "hidden_states"

    def path(self, item: Item) -> Path:
        return self.folder / item.name

    @staticmethod
    def file_name(index: int) -> str:
        return f"hs_{index}.safetensors"

    def bytes_per_token(self, n_aux: int, hidden: int, itemsize: int) -> int:
        return (n_aux + 1) * hidden * itemsize + 8

    def write(self, path: Path, item: Item, states: list[Any], normed: Any) -> None:
        import torch
        from safetensors.torch import save_file

        tensors = {"token_ids": torch.from_numpy(item.input_ids).to(torch.int64),
                   "hidden_states": torch.stack(states, dim=1)}
        with written(path) as tmp:
            save_file(tensors, str(tmp))

    def is_whole(self, path: Path, item: Item) -> bool:
        """A finished file: safetensors' header and sizes check out, with this row's length."""
        from safetensors import safe_open

        try:
            with safe_open(str(path), framework="pt") as handle:
                return handle.get_slice("token_ids").get_shape() == [len(item.input_ids)]
        except Exception:  # noqa: BLE001 - any unreadable file is redone
            return False

    def last_state(self, path: Path) -> tuple[Any, Any, bool]:
        """(token ids, the stored final state, whether it still needs the model's norm)."""
        from safetensors.torch import load_file

        data = load_file(str(path))
        return data["token_ids"], data["hidden_states"][:, -1], True


class SpecForgeLayout:
    name = "specforge"
    fixed_dtype = "bfloat16"

    def __init__(self, folder: Path):
        self.folder = Path(folder)

    def path(self, item: Item) -> Path:
        return self.folder / item.name

    @staticmethod
    def file_name(row_id: str, sample_id: int) -> str:
        # Zero-padded, so SpecForge's sorted listing keeps the dataset's order.
        return f"{row_id.rsplit('-', 1)[0]}-{sample_id:09d}.ckpt"

    def bytes_per_token(self, n_aux: int, hidden: int, itemsize: int) -> int:
        return (n_aux + 1) * hidden * 2 + 16

    def write(self, path: Path, item: Item, states: list[Any], normed: Any) -> None:
        import torch

        data = {"input_ids": torch.from_numpy(item.input_ids).to(torch.int64),
                "loss_mask": torch.from_numpy(item.loss_mask).to(torch.int64),
                # A copy: torch.save writes a view's whole storage (here the batch's).
                "hidden_state": normed.to(torch.bfloat16, copy=True).unsqueeze(0),
                "aux_hidden_state": torch.cat(states[:-1], dim=-1).to(torch.bfloat16).unsqueeze(0)}
        with written(path) as tmp:
            torch.save(data, tmp)

    def is_whole(self, path: Path, item: Item) -> bool:
        import torch

        try:
            data = torch.load(path, mmap=True, weights_only=True)
            return tuple(data["input_ids"].shape) == (len(item.input_ids),) and "aux_hidden_state" in data
        except Exception:  # noqa: BLE001 - a torn zip or a wrong file is redone
            return False

    def last_state(self, path: Path) -> tuple[Any, Any, bool]:
        import torch

        data = torch.load(path, weights_only=True)
        return data["input_ids"], data["hidden_state"][0], False


LAYOUTS = {"speculators": SpeculatorsLayout, "specforge": SpecForgeLayout}


def check_manifest(folder: Path, settings: dict[str, Any]) -> None:
    """Record what the files hold; a rerun with other settings would mix two kinds of states in one
    folder, so it is refused, naming each difference."""
    path = Path(folder) / MANIFEST
    if path.is_file():
        recorded = json.loads(path.read_text(encoding="utf-8"))
        diffs = [f"{key}: written with {recorded.get(key)!r}, now {value!r}" for key, value in settings.items()
                 if recorded.get(key) != value]
        if diffs:
            raise ConfigError(f"{folder} already holds hidden states made otherwise ({'; '.join(diffs)}); "
                              "use another folder or the same options")
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with written_whole(path, temporary=temp_path(path)) as tmp:
        tmp.write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
