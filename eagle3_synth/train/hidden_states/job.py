"""One `hidden-states` job from start to end: the target model, the plan printed, the files written,
the trainer's command, and `--check`. `cli/hidden_states.py` maps the options onto it."""

from __future__ import annotations

import hashlib
import logging
import sys
from collections import Counter
from collections.abc import Callable, Sequence, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from eagle3_synth.contract.ranges import check_range, check_ranges
from eagle3_synth.engines import EngineOptions, check_options_used, options_given, DTYPES
from eagle3_synth.errors import ConfigError
from eagle3_synth.run.preflight import check_model_and_engine
from eagle3_synth.train.hidden_states.sglang_capture import sglang_engine, states_of_rows, CapturePlan, plan_capture
from eagle3_synth.train.hidden_states.layouts import (INDEX_FILE, LAYOUTS, Item, model_parts, usable_as_is,
                                                      write_target_folder, LayerCapture, num_decoder_layers,
                                                      resolve_layers, check_manifest)
from eagle3_synth.run.shards import Shard
from eagle3_synth.train.export import OVERLONG, ExportOptions, ids_record, too_few_loss_tokens

# `hidden-states`: the target's hidden states for the rows of a built dataset, in a trainer's layout.
#
# The rows are chosen and masked exactly as `export --format ids` does (`train/export.py:
# ids_record`, the same `--train-on`, `--max-length`, `--overlong`), so the ids, the masks and the
# states cannot disagree. Files go where each trainer reads them (`train/hidden_states/layouts.py`):
#
# - speculators: one file per row of the dataset its `prepare-data` saved, which it shuffles
#   (`data_generation/preprocessing.py: load_and_preprocess_dataset`, `.shuffle(seed)`); each
#   prepared row is matched to one of ours by its `input_ids`, and one that is none of ours is an
#   error. Reading prepare-data's own output (rather than writing a prepared dataset ourselves)
#   leaves its shuffle, `--seq-length` cut, row filters and token frequencies to speculators.
# - specforge: one file per row of ours (rows with no token under the loss mask left out: neither
#   trainer learns from them).
#
# States come from one forward of the model's decoder stack per batch of rows (sorted by length,
# right-padded: a causal model's state at a real position never sees the padding), captured by
# forward pre-hooks (`train/hidden_states/layouts.py`). A file is written under a temporary name and renamed,
# so a rerun skips finished files, redoes torn ones, and any number of shards (`--num-shards`) can
# share a folder.

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
    # vLLM layer ids; None = the drafter's default (train/hidden_states/layouts.py).
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


# `hidden-states --check`: the written files reproduce the model's own logits.
#
# For each file: `lm_head(norm(stored final state))` (SpecForge stores the normed state: only the head)
# against the logits of a plain, independent forward of the whole model over the row's ids, one row
# at a time. On greedy rows (temperature 0 recorded with the data), the argmax at each position that
# predicts an output token must also be that token: the states are the ones that wrote the data.

# Largest |difference| between reproduced and reference logits, relative to the largest |logit|:
# the storage dtype's precision, with room for a batched vs single-row forward.
TOLERANCE = {"float32": 1e-4, "bfloat16": 3e-2, "float16": 1e-2}
SHOWN = 5


@dataclass
class CheckReport:
    rows: int = 0
    worst: float = 0.0  # the largest relative difference seen
    greedy_positions: int = 0
    bad_rows: list[str] = field(default_factory=list)  # "file: why"

    @property
    def ok(self) -> bool:
        return not self.bad_rows

    def lines(self) -> list[str]:
        head = (f"check: {self.rows} rows, logits reproduced within {self.worst:.2e} (relative), "
                f"{self.greedy_positions} greedy positions compared")
        return [head, *(f"  {line}" for line in self.bad_rows[:SHOWN]),
                *([f"  ... and {len(self.bad_rows) - SHOWN} more"] if len(self.bad_rows) > SHOWN else [])]


def _tie_tolerance(logits: Any) -> float:
    """Two logits this close count as a tie (an argmax the storage dtype cannot resolve)."""
    return float(logits.abs().max()) * 2 ** -7


def check_files(model: Any, layout: Any, items: list[Item], storage_dtype: str, greedy: bool) -> CheckReport:
    """Check every item's file (they must exist); `greedy` adds the argmax comparison."""
    import torch

    parts = model_parts(model)
    device = model.get_input_embeddings().weight.device
    tolerance = TOLERANCE[storage_dtype]
    report = CheckReport()
    for item in items:
        path: Path = layout.path(item)
        token_ids, state, needs_norm = layout.last_state(path)
        if token_ids.tolist() != item.input_ids.tolist():
            report.bad_rows.append(f"{path.name} ({item.row_id}): its token ids are not the row's")
            continue
        with torch.inference_mode():
            ids = torch.from_numpy(item.input_ids).to(torch.long).unsqueeze(0).to(device)
            reference = model(input_ids=ids, use_cache=False).logits[0].float()
            hidden = state.to(device=device, dtype=parts.lm_head.weight.dtype)
            logits = parts.lm_head(parts.norm(hidden) if needs_norm else hidden).float()
        scale = float(reference.abs().max()) or 1.0
        diff = float((logits - reference).abs().max()) / scale
        report.rows += 1
        report.worst = max(report.worst, diff)
        if diff > tolerance:
            report.bad_rows.append(f"{path.name} ({item.row_id}): logits differ by {diff:.2e} of their scale "
                                   f"(tolerance {tolerance:.0e} for {storage_dtype})")
            continue
        if greedy:
            _check_argmax(item, logits.cpu(), path, report)
    return report


def _check_argmax(item: Item, logits: Any, path: Path, report: CheckReport) -> None:
    """Positions prompt_tokens - 1 .. T - 2 predict the output ids that follow them."""
    import torch

    start, ids = item.prompt_tokens - 1, torch.from_numpy(item.input_ids)
    predicted = logits[start:-1]
    if predicted.shape[0] == 0:
        return
    following = ids[start + 1:]
    best = predicted.max(dim=-1).values
    chosen = predicted.gather(1, following.unsqueeze(1)).squeeze(1)
    misses = (best - chosen > _tie_tolerance(predicted)).nonzero().flatten().tolist()
    report.greedy_positions += predicted.shape[0]
    if misses:
        first = misses[0] + start
        report.bad_rows.append(f"{path.name} ({item.row_id}): at {len(misses)} greedy position(s) the argmax is not the "
                               f"next output id (first at token {first + 1}: id {int(ids[first + 1])}, argmax "
                               f"{int(predicted[misses[0]].argmax())})")


def target_model(source: Any, configs: Sequence[str], model: str | None) -> str:
    """The model whose states go with these configs: `model` when given, else the one recorded with
    the data (one model for all the configs, and a folder that is here)."""
    provenance = source.provenance(configs[0])
    models = {config: source.provenance(config).model for config in configs}
    if not model and len(set(models.values())) > 1:
        raise ConfigError("these configs were made with different models "
                          f"({', '.join(f'{c}: {m}' for c, m in models.items())}); one target's states go together: "
                          "give the configs of one model, or --model PATH")
    chosen = model or provenance.model
    if not chosen:
        raise ConfigError(f"which model made this data is not recorded ({provenance.origin}); pass --model PATH")
    if not model and not Path(chosen).exists():
        raise ConfigError(f"the data was made with the model {chosen!r} (from {provenance.origin}), which is not here; "
                          "pass --model PATH")
    return str(Path(chosen).resolve()) if Path(chosen).exists() else chosen


def run_job(source: Any, options: HiddenStatesOptions, *, dry_run: bool = False, max_bytes: int | None = None,
            check: bool = False, progress: bool | None = None, echo: Callable[[str], None] = print) -> bool:
    """Plan, write and (with `check`) check this shard's files, saying each step through `echo`;
    False when the check found a problem."""
    from transformers import AutoConfig

    check_range("max_bytes", max_bytes)
    # Before anything loads: a folder that holds the model where this process loads it, the engine's --engine-args.
    check_model_and_engine(options.engine, options.model, EngineOptions(
        model=options.model, dtype=options.dtype, engine_args=options.engine_args,
        trust_remote_code=options.trust_remote_code))
    try:
        model_config = AutoConfig.from_pretrained(options.model, trust_remote_code=options.trust_remote_code)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the config of the model {options.model!r}: {exc}") from exc
    plan, layout = prepare(source, options, model_config)
    echo(f"{' '.join(options.configs)} -> {layout.folder} ({options.fmt}, {options.shard}):")
    for line in plan.lines():
        echo(f"  {line}")
    if dry_run:
        return True
    if max_bytes is not None and plan.pending_bytes > max_bytes:
        raise ConfigError(f"this run would write about {plan.pending_bytes} bytes, over --max-bytes {max_bytes}")
    record_manifest(plan, layout, options)
    target_folder = layout.folder / "target_model"
    needs_target = options.fmt == "specforge" and not usable_as_is(Path(options.model))
    model = None
    if (plan.pending and options.engine == "transformers") or check or \
            (needs_target and not (target_folder / INDEX_FILE).is_file()):
        model = load_model(options)
    written = 0
    if plan.pending and options.engine == "transformers":
        written = write_states(transformers_states(model, plan, options), plan, layout, progress=progress)
    elif plan.pending:
        with sglang_engine(options, plan.capture) as (engine, capture):
            longest_first = sorted(plan.pending, key=lambda item: -len(item.input_ids))
            rows = states_of_rows(engine, capture, longest_first, options.dtype)
            written = write_states(rows, plan, layout, progress=progress)
    echo(f"  wrote {written} files")
    if options.fmt == "speculators":
        echo(f"  train: speculators train --data-path {options.folder} --target-layer-ids {' '.join(map(str, plan.layers))} "
             "--on-missing raise ...")
    else:
        target = options.model
        if needs_target:
            if model is not None:
                write_target_folder(model, Path(options.model), target_folder)
            target = str(target_folder)
        # SpecForge 0.2.0's overrides name existing keys only (config/schema.py `apply_overrides`); the run is
        # offline because data.hidden_states_path is set (`Config.mode`), there is no `mode` key to give.
        key = "data.eval_hidden_states_path" if options.split == "validation" else "data.hidden_states_path"
        echo(f"  train: specforge train --config run.yaml {key}={layout.folder} model.target_model_path={target}")
    if check:
        report = check_files(model, layout, plan.items, LAYOUTS[options.fmt].fixed_dtype or options.dtype,
                             greedy(source, options.configs))
        for line in report.lines():
            echo(f"  {line}")
        return report.ok
    return True
