"""The reduced draft vocabulary of an EAGLE-3 drafter, from token counts under the loss mask.

EAGLE-3 trains its draft head on the `draft_vocab_size` target tokens seen most often where the
loss is taken; a position whose target token is outside that vocabulary is dropped from training,
so the report says how many are kept (coverage). The mapping has two halves, in every trainer:

- `d2t` (draft -> target): `target_id = i + d2t[i]` for draft id `i` (an offset, int64);
- `t2d` (target -> draft): a bool mask over the whole target vocabulary, True where kept.

What is counted: the ids of `output_ids` under the loss mask of `eagle3_synth.train.export`
(`train_on="output"`: every generated token; `"response"`: from `response_start` on, nothing when
reasoning never ended), for whole columns at once (`training.masked_output_starts`). Ids are never
decoded.

Which tokens: by count, most frequent first; **a tie goes to the lower token id** (speculators'
`sorted(key=(-count, id))`, `speculators/train/vocab_mapping.py` line 81), so the same data gives
the same files whatever the row order. SpecForge's own `Counter.most_common` would keep the
tokens seen first at a tie. With fewer distinct tokens than the draft size, the vocabulary is
padded with the lowest ids not yet in it, ascending (count 0), as SpecForge
(`specforge/data/preprocessing.py` lines 738-744) and speculators (`vocab_mapping.py` lines
88-94) both pad; ModelOpt asserts instead (`modelopt/torch/speculative/utils.py` line 67).

The target size is the model config's `vocab_size` (embedding rows, 151,936 for Qwen3), not the
tokenizer's length: `t2d` must have one entry per row of the target's embedding.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from eagle3_synth.dataset.stores import RowSource
from eagle3_synth.contract.ranges import check_range
from eagle3_synth.errors import ConfigError
from eagle3_synth.prompts.prepare import model_config_value
from eagle3_synth.files import written_whole
from eagle3_synth.train.export import TRAIN_ON, TrainOn, masked_output_starts


def model_vocab_size(folder: str | Path) -> int | None:
    """`vocab_size` (embedding rows) of a model folder's config.json; None without one."""
    return model_config_value(folder, "vocab_size", "--target-vocab-size N")


def recorded_model(source: RowSource, config: str) -> str | None:
    """The model folder the config was generated with, as its run recorded it (None where
    nothing is recorded here: a repo on the Hub, pass --model)."""
    return source.provenance(config).model


def target_vocab_size(
    source: RowSource, configs: Sequence[str], *, given: int | None = None, model: str | None = None
) -> tuple[int, str]:
    """The target's vocabulary size and where it was read: `given` > `model`'s config.json > the
    config.json of the model each config records (all must agree)."""
    if given is not None:
        check_range("target_vocab_size", given)
        return given, "--target-vocab-size"
    if model:
        size = model_vocab_size(model)
        if size is None:
            raise ConfigError(f"{model} has no config.json with a vocab_size; pass --target-vocab-size N")
        return size, f"vocab_size in {Path(model) / 'config.json'}"
    found: dict[int, list[tuple[str, str]]] = {}
    unknown = []
    for config in configs:
        folder = recorded_model(source, config)
        size = model_vocab_size(folder) if folder and Path(folder).is_dir() else None
        if size is None:
            here = "" if not folder or Path(folder).is_dir() else " (not here)"
            unknown.append(f"{config}: {folder or 'no model recorded'}{here}")
        else:
            found.setdefault(size, []).append((config, folder))
    if len(found) > 1:
        made = "; ".join(f"{size} ({', '.join(c for c, _ in users)})" for size, users in sorted(found.items()))
        raise ConfigError(f"the configs were made with models of different vocabulary sizes: {made}; "
                          "count each model's configs on their own")
    if not found:
        raise ConfigError(f"the target vocabulary size is unknown (no config.json with vocab_size for "
                          f"{'; '.join(unknown)}): pass --target-vocab-size N (the model config's vocab_size) "
                          "or --model PATH")
    size, users = next(iter(found.items()))
    return size, f"vocab_size in {Path(users[0][1]) / 'config.json'}, the model recorded with {', '.join(c for c, _ in users)}"


@dataclass(frozen=True)
class ConfigCounts:
    """Token counts under the loss mask of one config; `counts[t]` is how often target id t occurs."""

    config: str
    rows: int
    counts: np.ndarray
    # Rows with no position under the mask (with --train-on response: reasoning never ended).
    empty_rows: int = 0

    @property
    def positions(self) -> int:
        return int(self.counts.sum())

    @property
    def distinct(self) -> int:
        return int(np.count_nonzero(self.counts))


def count_tokens(table: pa.Table, config: str, target_vocab_size: int, train_on: TrainOn = "output") -> ConfigCounts:
    """Count the ids under the loss mask of a table with `output_ids` (and, for `response`,
    `response_start`), one record batch at a time: np.bincount over the flattened lists."""
    counts = np.zeros(target_vocab_size, dtype=np.int64)
    empty = 0
    for batch in table.to_batches():
        outputs = batch.column("output_ids")
        lengths = pc.fill_null(pc.list_value_length(outputs), 0).to_numpy().astype(np.int64)
        ids = outputs.flatten().to_numpy(zero_copy_only=False)
        rs = batch.column("response_start").to_numpy(zero_copy_only=False) if train_on == "response" else None
        first = masked_output_starts(lengths, rs, train_on)
        empty += int(np.count_nonzero(first >= lengths))
        if train_on != "output":
            row_start = np.concatenate(([0], np.cumsum(lengths)[:-1]))
            ids = ids[np.arange(len(ids)) >= np.repeat(row_start + first, lengths)]
        if not len(ids):
            continue
        low, high = int(ids.min()), int(ids.max())
        if low < 0 or high >= target_vocab_size:
            bad = low if low < 0 else high
            raise ConfigError(f"{config}: token id {bad} is outside the target vocabulary of {target_vocab_size} "
                              "ids: wrong --model or --target-vocab-size for this data")
        counts += np.bincount(ids, minlength=target_vocab_size)
    return ConfigCounts(config=config, rows=table.num_rows, counts=counts, empty_rows=empty)


@dataclass(frozen=True)
class DraftVocab:
    """The chosen draft vocabulary: `order` holds its target ids, most frequent first."""

    target_vocab_size: int
    order: np.ndarray  # int64, (draft_vocab_size,): count desc, then id asc; padding (count 0) last
    padded: int  # how many ids at the end of `order` are padding, never seen under the mask
    distinct: int  # distinct ids seen under the mask
    cut_count: int  # count of the least frequent id kept (0 when padded)
    tied_out: int  # ids with exactly `cut_count` occurrences left out by the tie-break

    @property
    def draft_vocab_size(self) -> int:
        return len(self.order)

    def selected(self) -> np.ndarray:
        """The kept target ids, ascending: draft id i is `selected()[i]` (SpecForge, speculators)."""
        return np.sort(self.order)

    def d2t(self) -> np.ndarray:
        """Offsets in ascending target-id order: `d2t[i] = selected()[i] - i`, int64."""
        return self.selected() - np.arange(self.draft_vocab_size, dtype=np.int64)

    def t2d(self) -> np.ndarray:
        mask = np.zeros(self.target_vocab_size, dtype=bool)
        mask[self.order] = True
        return mask

    def d2t_by_frequency(self) -> np.ndarray:
        """Offsets in frequency order, ModelOpt's layout: `order[i] - i`, int64."""
        return self.order - np.arange(self.draft_vocab_size, dtype=np.int64)


def check_draft_size(draft_vocab_size: int, target_vocab_size: int) -> None:
    check_range("draft_vocab_size", draft_vocab_size)
    if draft_vocab_size > target_vocab_size:
        raise ConfigError(f"--draft-vocab-size {draft_vocab_size} is larger than the target vocabulary "
                          f"({target_vocab_size})")


def select_draft_vocab(counts: np.ndarray, draft_vocab_size: int) -> DraftVocab:
    """The `draft_vocab_size` most frequent ids of `counts` (ties: lower id first), padded with
    the lowest unused ids when fewer were seen."""
    target = len(counts)
    check_draft_size(draft_vocab_size, target)
    seen = np.flatnonzero(counts)
    ranked = seen[np.lexsort((seen, -counts[seen]))]  # last key first: count desc, then id asc
    kept = ranked[:draft_vocab_size].astype(np.int64)
    padded = draft_vocab_size - len(kept)
    if padded:
        # range(draft_vocab_size) holds at least `padded` ids not seen: SpecForge pads from it too.
        kept = np.concatenate((kept, np.setdiff1d(np.arange(draft_vocab_size, dtype=np.int64), kept)[:padded]))
    cut = int(counts[kept[-1]]) if not padded else 0
    tied_out = int(np.count_nonzero(counts[ranked[draft_vocab_size:]] == cut)) if cut else 0
    return DraftVocab(target_vocab_size=target, order=kept, padded=padded, distinct=len(seen),
                      cut_count=cut, tied_out=tied_out)


def _save(path: Path, write: Callable[[Path], None]) -> Path:
    """Write through a temporary file, so a failed write leaves no half file under the real name."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with written_whole(path) as tmp:
        write(tmp)
    return path


def _save_npy(path: Path, array: np.ndarray) -> None:
    with open(path, "wb") as handle:  # a file object: np.save would add ".npy" to the temporary name
        np.save(handle, array)


def mapping_paths(out: Path, target: int, draft: int) -> dict[str, list[Path]]:
    """Where each trainer's files go: named by target and draft size, in the trainer's own names."""
    return {
        # SpecForge has no name of its own (its cache is `<sha256>.pt`); pass it as --vocab-mapping.
        "specforge": [out / f"specforge-vocab-{target}-{draft}.pt"],
        # speculators looks for `d2t-{N}.npy`/`t2d-{N}.npy`/`token_freq.pt` (train/cli.py 361, 387-388, 413-414).
        "speculators": [out / f"speculators-{target}-{draft}" / name
                        for name in (f"d2t-{draft}.npy", f"t2d-{draft}.npy", "token_freq.pt")],
        # ModelOpt's calibrate_draft_vocab.py saves `{save_dir}/{model_name}/d2t.pt`.
        "modelopt": [out / f"modelopt-{target}-{draft}" / "d2t.pt"],
    }


def write_mappings(vocab: DraftVocab, counts: np.ndarray, out: str | Path) -> dict[str, list[Path]]:
    """Write the mapping in each trainer's layout (dtypes and shapes as each computes them)."""
    import torch

    paths = mapping_paths(Path(out), vocab.target_vocab_size, vocab.draft_vocab_size)
    d2t, t2d = vocab.d2t(), vocab.t2d()
    # SpecForge process_token_dict_to_mappings (specforge/data/preprocessing.py 760-766): ids sorted
    # ascending, d2t = torch.tensor([id_i - i]) (int64), t2d = torch.tensor([bool]) of the target
    # size; torch.save({"d2t", "t2d"}) (line 634-638), read by load_vocab_mapping
    # (modeling/draft/base.py 203-205) into int64/bool buffers (llama3_eagle.py 1696-1697).
    (specforge,) = paths["specforge"]
    _save(specforge, lambda p: torch.save({"d2t": torch.from_numpy(d2t), "t2d": torch.from_numpy(t2d)}, p))
    # speculators build_vocab_mappings_from_distribution (train/vocab_mapping.py 96-104): sorted
    # ids minus arange (torch.long), t2d torch.zeros(target, bool) set True; cli.py 391-392 saves
    # them with np.save(tensor.numpy()), and save_token_frequency_distribution (vocab_mapping.py
    # 54-56) a plain {token_id: count} dict with torch.save.
    d2t_npy, t2d_npy, freq = paths["speculators"]
    _save(d2t_npy, lambda p: _save_npy(p, d2t))
    _save(t2d_npy, lambda p: _save_npy(p, t2d))
    seen = np.flatnonzero(counts)
    _save(freq, lambda p: torch.save(dict(zip(seen.tolist(), counts[seen].tolist())), p))
    # ModelOpt calibrate_frequent_vocab (modelopt/torch/speculative/utils.py 62-74): a bare int64
    # tensor, mapping[i] = vocab[i] - i in most_common order (not sorted); load_draft_vocab_cache
    # (plugins/hf_eagle.py 330-335) checks shape (draft,) and dtype int64.
    (modelopt,) = paths["modelopt"]
    _save(modelopt, lambda p: torch.save(torch.from_numpy(vocab.d2t_by_frequency()), p))
    return paths


@dataclass
class VocabReport:
    """Counts, the choice and its coverage per config and overall; `lines()` prints it."""

    train_on: str
    target_vocab_size: int
    target_origin: str
    vocab: DraftVocab
    configs: list[ConfigCounts]
    files: dict[str, list[Path]] = field(default_factory=dict)

    def _covered(self, counts: np.ndarray) -> int:
        return int(counts[self.vocab.order].sum())

    def _row(self, name: str, rows: int, counts: np.ndarray, empty: int) -> dict[str, Any]:
        positions = int(counts.sum())
        covered = self._covered(counts)
        return {"config": name, "rows": rows, "rows_without_loss": empty, "masked_positions": positions,
                "distinct_tokens": int(np.count_nonzero(counts)), "covered_positions": covered,
                "coverage": covered / positions if positions else None}

    def rows(self) -> list[dict[str, Any]]:
        per = [self._row(c.config, c.rows, c.counts, c.empty_rows) for c in self.configs]
        total = np.sum([c.counts for c in self.configs], axis=0)
        return [*per, self._row("all", sum(c.rows for c in self.configs), total,
                                sum(c.empty_rows for c in self.configs))]

    def warnings(self) -> list[str]:
        v = self.vocab
        if not v.padded:
            return []
        return [f"only {v.distinct:,} distinct tokens under the loss mask, fewer than --draft-vocab-size "
                f"{v.draft_vocab_size:,}: padded with the {v.padded:,} lowest unused ids "
                f"({_ids_preview(v.order[-v.padded:])}), count 0; more data, or a smaller draft vocabulary, "
                "would train every draft id"]

    def as_dict(self) -> dict[str, Any]:
        v = self.vocab
        return {"train_on": self.train_on, "target_vocab_size": self.target_vocab_size,
                "target_vocab_size_from": self.target_origin, "draft_vocab_size": v.draft_vocab_size,
                "distinct_tokens": v.distinct, "padded": v.padded, "cut_count": v.cut_count,
                "tied_left_out": v.tied_out, "tie_break": "count descending, then token id ascending",
                "configs": self.rows(), "warnings": self.warnings(),
                "files": {k: [str(p) for p in paths] for k, paths in self.files.items()}}

    def lines(self) -> list[str]:
        v = self.vocab
        out = [f"target vocabulary: {self.target_vocab_size:,} ids ({self.target_origin}); "
               f"draft vocabulary: {v.draft_vocab_size:,}; loss mask: --train-on {self.train_on}"]
        out += [f"warning: {w}" for w in self.warnings()]
        table = [("config", "rows", "masked positions", "distinct tokens", "in draft vocab")]
        for r in self.rows():
            share = "-" if r["coverage"] is None else f"{100 * r['coverage']:.2f}%"
            table.append((r["config"], f"{r['rows']:,}", f"{r['masked_positions']:,}", f"{r['distinct_tokens']:,}", share))
        widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
        out += ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths)))
                for row in table]
        empty = sum(c.empty_rows for c in self.configs)
        if empty:
            out.append(f"{empty:,} row(s) have no position under the loss mask (--train-on {self.train_on})")
        if v.cut_count:
            times = "once" if v.cut_count == 1 else f"{v.cut_count:,} times"
            out.append(f"cut: the least frequent token kept occurs {times}; "
                       f"{v.tied_out:,} more with that count left out (ties go to the lower token id)")
        for trainer, paths in self.files.items():
            out += [f"wrote {p} ({trainer})" for p in paths]
        return out


def _ids_preview(ids: Sequence[int] | np.ndarray, limit: int = 5) -> str:
    shown = ", ".join(str(int(i)) for i in list(ids)[:limit])
    return shown + (", ..." if len(ids) > limit else "")


def draft_vocab(
    source: RowSource, configs: Sequence[str], *, draft_vocab_size: int, target_vocab_size: int,
    target_origin: str, train_on: TrainOn = "output", out: str | Path | None = None,
) -> VocabReport:
    """Count the configs together (the final mix), choose the draft vocabulary, write the files
    into `out` (none without it) and report coverage per config and overall."""
    if train_on not in TRAIN_ON:
        raise ConfigError(f"train_on must be one of {TRAIN_ON}, got {train_on!r}")
    check_draft_size(draft_vocab_size, target_vocab_size)  # before reading any data
    columns = ["output_ids", *(["response_start"] if train_on == "response" else [])]
    counted = [count_tokens(source.table(config, columns), config, target_vocab_size, train_on) for config in configs]
    total = np.sum([c.counts for c in counted], axis=0)
    vocab = select_draft_vocab(total, draft_vocab_size)
    files = write_mappings(vocab, total, out) if out is not None else {}
    return VocabReport(train_on=train_on, target_vocab_size=target_vocab_size, target_origin=target_origin,
                       vocab=vocab, configs=counted, files=files)
