"""`hidden-states`: the target's hidden states for the rows of a built dataset, in a trainer's layout.

The rows are chosen and masked exactly as `export --format ids` does (`train/export.py:
ids_record`, the same `--train-on`, `--max-length`, `--overlong`), so the ids, the masks and the
states cannot disagree. Files go where each trainer reads them (`train/hidden_states/layouts.py`):

- speculators: one file per row of the dataset its `prepare-data` saved, which it shuffles
  (`data_generation/preprocessing.py: load_and_preprocess_dataset`, `.shuffle(seed)`); each
  prepared row is matched to one of ours by its `input_ids`, and one that is none of ours is an
  error. Reading prepare-data's own output (rather than writing a prepared dataset ourselves)
  leaves its shuffle, `--seq-length` cut, row filters and token frequencies to speculators.
- specforge: one file per row of ours (rows with no token under the loss mask left out: neither
  trainer learns from them).

States come from one forward of the model's decoder stack per batch of rows (sorted by length,
right-padded: a causal model's state at a real position never sees the padding), captured by
forward pre-hooks (`train/hidden_states/layers.py`). A file is written under a temporary name and renamed,
so a rerun skips finished files, redoes torn ones, and any number of shards (`--num-shards`) can
share a folder.
"""

from __future__ import annotations

import hashlib
import logging
import sys
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from eagle3_synth.contract.ranges import check_ranges
from eagle3_synth.engines import check_options_used, options_given, DTYPES
from eagle3_synth.errors import ConfigError
from eagle3_synth.run.shards import Shard
from eagle3_synth.train.export import OVERLONG, ExportOptions, ids_record, too_few_loss_tokens
from eagle3_synth.train.hidden_states.layers import LayerCapture, model_parts, num_decoder_layers, resolve_layers
from eagle3_synth.train.hidden_states.layouts import LAYOUTS, Item, check_manifest
from eagle3_synth.train.hidden_states.sglang_capture import CapturePlan, plan_capture

log = logging.getLogger(__name__)
NO_LOSS = "have no token under the loss mask"
ENGINES = ("transformers", "sglang", "sglang-http")
STATES_VIA = ("files", "response")
STAGING = ".sglang-states"


@dataclass(frozen=True)
class HiddenStatesOptions:
    # One or more configs of the source, together: speculators' prepare-data may be given several
    # `export --format ids` files at once (`cli/prepare_data.py`, `--data` repeatable), and its
    # trainer reads one prepared folder (`--data-path`), so the states of a mix are written at once.
    configs: tuple[str, ...]
    fmt: str  # a key of LAYOUTS
    # speculators: the folder prepare-data saved (states go to its hidden_states/); specforge: --out.
    folder: Path
    model: str
    drafter: str = "eagle3"
    # vLLM layer ids; None = the drafter's default (train/hidden_states/layers.py).
    layers: tuple[int, ...] | None = None
    train_on: str = "output"
    max_length: int | None = None
    overlong: str = "drop"
    # Rows with fewer tokens under the loss mask are left out (as `export --min-loss-tokens`).
    min_loss_tokens: int = 0
    device: str = "cpu"
    device_map: str | None = None
    dtype: str = "bfloat16"
    # Padded tokens per forward: rows of one batch are padded to its longest.
    batch_tokens: int = 16384
    shard: Shard = field(default_factory=Shard)
    trust_remote_code: bool = False
    # Which split of the data (`--split`): its states go to a folder of their own (the manifest says).
    split: str = "train"
    # Who computes the states: transformers (here, `device`/`device_map`), or SGLang in this process
    # (`sglang`, with `engine_args`) or the servers at `urls` (`sglang-http`): sglang_capture.py.
    engine: str = "transformers"
    urls: tuple[str, ...] = field(default=(), metadata={"option": {"name": "--url"}})
    engine_args: dict[str, Any] = field(default_factory=dict, metadata={"option": {"name": "--engine-arg"}})
    # sglang engines: rows in flight at once (each holds its states until written).
    max_in_flight: int = 32
    # sglang engines: how the states reach this process: "files" SGLang's hook writes into
    # `states_dir` (default: .sglang-states in the layout's folder; it must be the same path for the
    # server), or "response" (in SGLang's result, as lists: no shared folder needed, far slower).
    states_via: str = "files"
    states_dir: Path | None = None

    def __post_init__(self) -> None:
        if not self.configs:
            raise ConfigError("name at least one CONFIG")
        if self.fmt not in LAYOUTS:
            raise ConfigError(f"--format must be one of {', '.join(LAYOUTS)}, got {self.fmt!r}")
        if self.dtype not in DTYPES:
            raise ConfigError(f"--dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.overlong not in OVERLONG:
            raise ConfigError(f"--overlong must be one of {', '.join(OVERLONG)}, got {self.overlong!r}")
        check_ranges({"max_length": self.max_length, "batch_tokens": self.batch_tokens, "max_in_flight": self.max_in_flight})
        if self.engine not in ENGINES:
            raise ConfigError(f"--engine must be one of {', '.join(ENGINES)}, got {self.engine!r}")
        if self.engine == "sglang-http" and not self.urls:
            raise ConfigError("--engine sglang-http needs --url: a server started with the flags --dry-run prints")
        if self.states_via not in STATES_VIA:
            raise ConfigError(f"--states-via must be one of {', '.join(STATES_VIA)}, got {self.states_via!r}")
        check_options_used(self.engine, options_given(self))
        if self.fmt == "specforge" and self.drafter != "eagle3":
            raise ConfigError(f"--format specforge writes SpecForge's offline EAGLE-3 files only; for --drafter "
                              f"{self.drafter} use --format speculators")

    def export_options(self, config: str) -> ExportOptions:
        return ExportOptions(config=config, text=False, train_on=self.train_on,  # type: ignore[arg-type]
                             max_length=self.max_length, overlong=self.overlong, min_loss_tokens=self.min_loss_tokens)

    def selection(self) -> dict[str, Any]:
        return {"train_on": self.train_on, "max_length": self.max_length, "overlong": self.overlong, "split": self.split,
                **({"min_loss_tokens": self.min_loss_tokens} if self.min_loss_tokens else {})}


@dataclass
class FilePlan:
    """What a run will do, printed before any file is written (and all `--dry-run` prints)."""

    items: list[Item]  # this shard's files, in dataset order
    pending: list[Item]  # of those, the ones not yet written whole
    layers: list[int]
    hidden_size: int
    bytes_per_token: int
    counts: Counter  # rows left out, by reason
    capture: CapturePlan | None = None  # sglang engines: what SGLang is asked for

    @property
    def pending_tokens(self) -> int:
        return sum(len(item.input_ids) for item in self.pending)

    @property
    def pending_bytes(self) -> int:
        return self.pending_tokens * self.bytes_per_token

    def lines(self) -> list[str]:
        total = sum(len(item.input_ids) for item in self.items)
        done = len(self.items) - len(self.pending)
        out = [f"{len(self.items)} rows, {total} tokens; to write: {len(self.pending)} rows, {self.pending_tokens} tokens, "
               f"about {self.pending_bytes} bytes ({self.bytes_per_token} bytes per token; {done} rows already written)",
               f"layers {self.layers} + the final state, hidden size {self.hidden_size}"]
        out += [f"  left out {n} row{'s' if n != 1 else ''} that {reason}" for reason, n in sorted(self.counts.items())]
        if self.capture is not None:
            out.append(f"SGLang server flags for these states: {self.capture.server_flags()}")
        return out


def _digest(ids: Sequence[int] | np.ndarray) -> bytes:
    return hashlib.blake2b(np.asarray(ids, dtype=np.int64).tobytes(), digest_size=16).digest()


def our_rows(batches: Iterable[tuple[str, Iterable[Iterable[dict[str, Any]]]]], options: HiddenStatesOptions,
             counts: Counter) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(row, its `export --format ids` record) for every row that export would write, config by config."""
    for config, config_batches in batches:
        export = options.export_options(config)
        for batch in config_batches:
            for row in batch:
                record = ids_record(row, export, counts)
                if record is not None and not too_few_loss_tokens(row, export, counts):
                    yield row, record


def specforge_items(batches: Iterable[tuple[str, Iterable[Iterable[dict[str, Any]]]]], options: HiddenStatesOptions,
                    counts: Counter) -> list[Item]:
    layout = LAYOUTS["specforge"]
    items = []
    for row, record in our_rows(batches, options, counts):
        if not any(record["loss_mask"]):
            counts[NO_LOSS] += 1
            continue
        items.append(Item(name=layout.file_name(record["id"], row["sample_id"]),
                          input_ids=np.asarray(record["input_ids"], dtype=np.int64),
                          loss_mask=np.asarray(record["loss_mask"], dtype=np.int64),
                          row_id=record["id"], prompt_tokens=row["prompt_tokens"]))
    return items


def speculators_items(batches: Iterable[tuple[str, Iterable[Iterable[dict[str, Any]]]]], options: HiddenStatesOptions,
                      counts: Counter) -> list[Item]:
    """One item per row of the prepared dataset, matched to ours by `input_ids` (only digests of
    ours are held; the ids come from the prepared dataset, read through Arrow)."""
    ours: dict[bytes, tuple[str, int]] = {}
    for row, record in our_rows(batches, options, counts):
        ours.setdefault(_digest(record["input_ids"]), (record["id"], row["prompt_tokens"]))
    prepared = load_prepared(options.folder)
    items: list[Item] = []
    for index, ids in enumerate(_prepared_ids(prepared)):
        match = ours.get(_digest(ids))
        if match is None:
            raise ConfigError(
                f"row {index} of the prepared dataset {options.folder} ({len(ids)} tokens) is not a row of "
                f"{' '.join(options.configs)} as selected here ({_selection_text(options)}): prepare it from this dataset's "
                "`export --format ids` with the same options (prepare-data's --seq-length cuts rows: pass "
                "--max-length L --overlong truncate here and to export)")
        items.append(Item(name=LAYOUTS["speculators"].file_name(index), input_ids=ids, loss_mask=None,
                          row_id=match[0], prompt_tokens=match[1]))
    return items


def _prepared_ids(prepared: Any, batch_size: int = 1024) -> Iterator[np.ndarray]:
    """The prepared rows' ids in the dataset's order (through Arrow, honouring any indices mapping)."""
    for table in prepared.with_format("arrow").iter(batch_size=batch_size):
        for ids in table.column("input_ids").to_pylist():
            yield np.asarray(ids, dtype=np.int64)


def _selection_text(options: HiddenStatesOptions) -> str:
    cut = "no --max-length" if options.max_length is None else f"--max-length {options.max_length} --overlong {options.overlong}"
    return f"--train-on {options.train_on}, {cut}"


def load_prepared(folder: Path) -> Any:
    """The dataset speculators' `prepare-data` saved (speculators 0.9.0 `cli/prepare_data.py:
    prepare_data`, `save_to_disk`), the same way its trainer opens it (`train/data.py: ArrowDataset`,
    `load_from_disk`)."""
    from datasets import load_from_disk

    if not (Path(folder) / "dataset_info.json").is_file():
        raise ConfigError(f"--prepared {folder} is not a dataset speculators' prepare-data saved "
                          "(no dataset_info.json); run `speculators prepare-data ... --output DIR` first")
    dataset = load_from_disk(str(folder))
    if "input_ids" not in dataset.column_names:
        raise ConfigError(f"--prepared {folder} has no input_ids column (it has {dataset.column_names})")
    return dataset.with_format(None)


def plan_files(items: list[Item], layout: Any, options: HiddenStatesOptions, model_config: Any,
               counts: Counter) -> FilePlan:
    """This shard's items, which are still to write, the layers and the bytes it will take."""
    n = num_decoder_layers(model_config)
    layers = resolve_layers(options.layers, n, options.drafter)
    if options.fmt == "specforge" and len(layers) != 3:
        # SpecForge's EAGLE-3 draft takes exactly three aux states (SpecForge 0.2.0 algorithms/model_providers.py
        # `resolve_eagle_capture_layers`).
        raise ConfigError(f"--format specforge (EAGLE-3) takes exactly 3 --layers, got {layers}")
    hidden = int(model_config.get_text_config().hidden_size)
    itemsize = {"bfloat16": 2, "float16": 2, "float32": 4}[options.dtype]
    mine = [item for position, item in enumerate(items) if options.shard.owns(position)]
    pending = [item for item in mine if not (layout.path(item).is_file() and layout.is_whole(layout.path(item), item))]
    capture = None
    if options.engine != "transformers":
        staging = None
        if options.states_via == "files":
            staging = str(Path(options.states_dir or layout.folder / STAGING).resolve())
        longest = max((len(item.input_ids) for item in pending), default=None)
        capture = plan_capture(layers, model_config, staging, longest)
    return FilePlan(items=mine, pending=pending, layers=layers, hidden_size=hidden,
                    bytes_per_token=layout.bytes_per_token(len(layers), hidden, itemsize), counts=counts, capture=capture)


def batches_by_length(items: list[Item], batch_tokens: int) -> Iterator[list[Item]]:
    """Longest first (an out-of-memory shows at once), each batch at most `batch_tokens` padded
    tokens (one row alone may exceed it)."""
    batch: list[Item] = []
    for item in sorted(items, key=lambda it: -len(it.input_ids)):
        width = len(batch[0].input_ids) if batch else len(item.input_ids)
        if batch and width * (len(batch) + 1) > batch_tokens:
            yield batch
            batch = []
        batch.append(item)
    if batch:
        yield batch


def load_model(options: HiddenStatesOptions) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    kwargs: dict[str, Any] = {"dtype": getattr(torch, options.dtype), "trust_remote_code": options.trust_remote_code}
    if options.device_map:
        kwargs["device_map"] = options.device_map
    try:
        model = AutoModelForCausalLM.from_pretrained(options.model, **kwargs)
    except (OSError, ValueError, ImportError) as exc:
        raise ConfigError(f"cannot load the model {options.model!r}: {exc}") from exc
    if not options.device_map:
        model.to(options.device)
    return model.eval()


def input_device(model: Any) -> Any:
    return model.get_input_embeddings().weight.device


def padded_batch(batch: list[Item]) -> tuple[Any, Any]:
    """`batch`'s ids right-padded into one [B, T] tensor, with its attention mask."""
    import torch

    width = max(len(item.input_ids) for item in batch)
    ids = torch.zeros((len(batch), width), dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for row, item in enumerate(batch):
        ids[row, : len(item.input_ids)] = torch.from_numpy(item.input_ids)
        mask[row, : len(item.input_ids)] = 1
    return ids, mask


def compute_batch(capture: LayerCapture, batch: list[Item], device: Any) -> tuple[list[Any], Any]:
    """One forward over `batch`, right-padded: ([states per layer, each [B, T, H]], normed [B, T, H]) on the CPU."""
    import torch

    ids, mask = padded_batch(batch)
    with torch.inference_mode():
        states, normed = capture.run(ids.to(device), mask.to(device))
    return [s.cpu() for s in states], normed.cpu()


@contextmanager
def one_thread() -> Iterator[None]:
    """Per-row copies are small, memory-bound ops: with several intra-op threads each one waits for
    every thread to join, which on a shared machine costs a scheduler slice per op: far more than
    the copy itself."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def transformers_states(model: Any, plan: FilePlan, options: HiddenStatesOptions) -> Iterator[tuple[Item, list[Any], Any]]:
    """(item, [aux states in order..., pre-norm], normed), each [T, H], for every pending item: one
    forward per batch of rows of like length."""
    parts = model_parts(model)
    device = input_device(model)
    with LayerCapture(parts, plan.layers, num_decoder_layers(model.config)) as capture:
        for batch in batches_by_length(plan.pending, options.batch_tokens):
            states, normed = compute_batch(capture, batch, device)
            for row, item in enumerate(batch):
                t = len(item.input_ids)
                yield item, [s[row, :t] for s in states], normed[row, :t]


def write_states(rows: Iterable[tuple[Item, list[Any], Any]], plan: FilePlan, layout: Any,
                 progress: bool | None = None) -> int:
    """Write every row's file as its states arrive; returns how many were written."""
    from tqdm import tqdm

    layout.folder.mkdir(parents=True, exist_ok=True)
    written = 0
    show = sys.stderr.isatty() if progress is None else progress
    with tqdm(total=plan.pending_tokens, unit="tok", unit_scale=True, disable=not show, file=sys.stderr) as bar:
        for item, states, normed in rows:
            with one_thread():
                layout.write(layout.path(item), item, states, normed)
            written += 1
            bar.update(len(item.input_ids))
    return written


def prepare(source: Any, options: HiddenStatesOptions, model_config: Any) -> tuple[FilePlan, Any]:
    """Select the rows, match them to the layout's files and plan the run (no model loaded)."""
    layout = LAYOUTS[options.fmt](options.folder)
    counts: Counter = Counter()
    batches = ((config, source.iter_batches(config)) for config in options.configs)
    items = (speculators_items if options.fmt == "speculators" else specforge_items)(batches, options, counts)
    return plan_files(items, layout, options, model_config, counts), layout


def manifest_settings(plan: FilePlan, options: HiddenStatesOptions) -> dict[str, Any]:
    # One config is recorded as its name (as before several could be given), several as a list.
    config: str | list[str] = options.configs[0] if len(options.configs) == 1 else list(options.configs)
    return {"format": options.fmt, "config": config, "model": str(options.model), "layers": plan.layers,
            "dtype": options.dtype, "stored_dtype": LAYOUTS[options.fmt].fixed_dtype or options.dtype,
            **options.selection()}


def record_manifest(plan: FilePlan, layout: Any, options: HiddenStatesOptions) -> None:
    check_manifest(layout.folder, manifest_settings(plan, options))


def greedy(source: Any, configs: Sequence[str]) -> bool:
    """Whether every config's rows were sampled greedily (then `--check` also compares argmaxes)."""
    return all(recorded_temperature(source, config) == 0 for config in configs)


def recorded_temperature(source: Any, config: str) -> float | None:
    """The sampling temperature recorded with the data (`fields.sampling.temperature` of its run
    info), None where nothing is recorded: only then does `--check` know a row is greedy."""
    from eagle3_synth.dataset.folder import read_run_info
    from eagle3_synth.dataset.stores import FolderSource, RunSource

    info = None
    if isinstance(source, RunSource):
        info = source.run_info.get(config)
    elif isinstance(source, FolderSource) or Path(source.location).is_dir():
        info = read_run_info(Path(source.location), config)
    sampling = ((info or {}).get("fields") or {}).get("sampling") or {}
    value = sampling.get("temperature")
    return float(value) if isinstance(value, (int, float)) else None
