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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eagle3_synth.errors import ConfigError
from eagle3_synth.files import temporary_name, written_whole
from eagle3_synth.run.kill_points import kill_point

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
