"""Which source records become a config's prompts, in which order: the prompt list and `sample_id`.

- a prepared prompts file (`--prompts`, or the config's bundled samples): lines in file order,
  `sample_id` = line index;
- local files in the source's own schema (`--source-file`, repeatable) or the config's dataset read
  with `datasets` streaming (`--from-source`): each record is converted by the config's adapter,
  and records are put in a seeded order -- record number `p` of the source (counting from 0 across
  the files or dataset configs, in the order given) sorts by `blake2b(f"{seed}:{p}")` -- and
  `sample_id` is the rank in that order. It depends only on the source's contents, its order and
  the seed: the same record gets the same `sample_id` for every model, tokenizer and
  `max_new_tokens`, in every run and on every shard.

Records are taken in that order until `cap` prompts are kept (`--limit`; for a source, the config's
cap by default). A rejected record keeps its `sample_id` and leaves a gap, so nothing is renumbered.
A prompt's `source_id` is the record's id column (`id`, `uuid`, `prompt_id`, per adapter) or, for
sources without one (Glaive, Mixture-of-Thoughts, OpenThoughts), where it was read: `file.json#12`,
`file.jsonl:13` (a line) or `all/train#5` (dataset config/split and row).

Selecting from a source reads it once (twice in the rare case that many of the first candidates
are rejected), holding only about 2 x cap converted conversations, never the whole source.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from eagle3_synth.contract.ranges import check_range
from eagle3_synth.files import file_digest
from eagle3_synth.errors import ConfigError, PromptError
from eagle3_synth.prompts.adapters import get_adapter
from eagle3_synth.prompts.configs import ConfigSpec
from eagle3_synth.prompts.conversation import Conversation, check_messages, read_prompts_jsonl
from eagle3_synth.prompts.readers import SourceRecord, iter_dataset, iter_source_files, readable_file
from eagle3_synth.prompts.turns import opening


@dataclass(frozen=True)
class PromptSelection:
    """Where a config's records come from and how prompts are chosen from them.

    With neither `source_files` nor `from_source`, the prompts come from the prepared prompts file
    (`PromptPlan.prompts_file`).
    """

    # Local files in the source's own schema (.jsonl, .json, .parquet), read in this order.
    source_files: tuple[str, ...] = ()
    # Read the config's dataset (Hub id or local dataset folder) with datasets streaming.
    from_source: bool = False
    # Dataset revision (tag, branch, commit) for `from_source`; None = the default branch.
    revision: str | None = None
    # Seed of the selection order (not the sampling seed: new outputs for the same prompts).
    seed: int = 0
    # Read at most this many source records (a quick trial on a large dataset).
    scan_limit: int | None = None

    @property
    def reads_source(self) -> bool:
        return bool(self.source_files) or self.from_source


@dataclass(frozen=True)
class PromptPlan:
    """Everything that decides a config's prompt list (the prompts part of the run spec)."""

    # The config: its adapter, source dataset, cap and template kwargs.
    config: ConfigSpec
    # Prepared prompts (JSONL); None when `selection` reads a source.
    prompts_file: str | None = None
    # Where source records come from and in which order (used when it reads a source).
    selection: PromptSelection = PromptSelection()
    # Keep at most this many prompts (`--limit`); None: a whole prompts file, or the config's cap.
    limit: int | None = None

    def __post_init__(self) -> None:
        # Checked here, before any prompt is prepared, so a typo fails in a second, not after hours.
        check_range("limit", self.limit)
        if self.prompts_file is None and not self.selection.reads_source:
            raise ConfigError(f"config {self.config.name}: give a prompts file, source files or a source dataset")

    @property
    def cap(self) -> int | None:
        """`--limit`, else the config's cap for a source; a prepared prompts file is used whole."""
        if self.limit is not None:
            return self.limit
        return self.config.cap if self.selection.reads_source else None

    def identity(self) -> dict[str, Any]:
        """What decides the prompt list, for the run fingerprint: file digests, not paths."""
        selection = self.selection
        identity: dict[str, Any] = {"config": self.config.name, "cap": self.cap}
        if not selection.reads_source:
            readable_file(self.prompts_file, "--prompts")
            return {"file": file_digest(Path(self.prompts_file)), **identity}
        spec = self.config
        adapter = get_adapter(spec.adapter)
        identity.update(adapter=adapter.name, adapter_version=adapter.version, seed=selection.seed,
                        scan_limit=selection.scan_limit)
        if selection.source_files:
            for path in selection.source_files:
                readable_file(path, "--source-file")
            identity["source_files"] = [[Path(p).name, file_digest(Path(p))] for p in selection.source_files]
        else:
            if not spec.source:
                raise ConfigError(f"config {spec.name} has no source dataset; pass --source-file FILE or --prompts FILE")
            identity["dataset"] = {"source": spec.source, "configs": list(spec.source_configs), "split": spec.split,
                                   "data_files": list(spec.data_files), "revision": selection.revision}
        return identity


@dataclass(frozen=True)
class Candidate:
    """A record in prompt-list order, converted (or the reason it could not be)."""

    sample_id: int
    where: str  # for messages: `file:line (sample_id N)`
    source_id: str
    item: Conversation | PromptError


def selection_key(seed: int, position: int) -> int:
    return int.from_bytes(hashlib.blake2b(f"{seed}:{position}".encode(), digest_size=8).digest(), "big")


def _convert(record: SourceRecord, convert: Callable[[Any], Conversation], id_of: Callable[[Any], str]
             ) -> tuple[str, str, Conversation | PromptError]:
    """(locator, source id, conversation or error) of one source record."""
    if record.error is not None:
        return record.locator, record.locator, PromptError(record.error)
    source_id = id_of(record.record) or record.locator
    try:
        conversation = convert(record.record)
        check_messages(conversation.messages, "converted record")
    except PromptError as exc:
        return record.locator, source_id, exc
    return record.locator, source_id, Conversation(conversation.messages, conversation.tools, source_id)


def seeded_candidates(
    read: Callable[[], Iterable[SourceRecord]],
    convert: Callable[[Any], Conversation],
    id_of: Callable[[Any], str],
    seed: int,
    pool: int,
) -> Iterator[Candidate]:
    """Records in seeded order (see the module doc), converted, lazily.

    One pass keeps the `pool` records with the smallest keys (converting only those that enter the
    pool). Should the consumer want more than the pool holds, the source is read again with a pool
    four times larger; ranks are global, so the second pass continues where the first stopped.
    """
    given = 0
    while True:
        heap: list[tuple[int, int, Any]] = []  # (-key, -position, converted): the max on top
        total = 0
        for position, record in enumerate(read()):
            total += 1
            key = selection_key(seed, position)
            if len(heap) < pool:
                heapq.heappush(heap, (-key, -position, _convert(record, convert, id_of)))
            elif (key, position) < (-heap[0][0], -heap[0][1]):
                heapq.heapreplace(heap, (-key, -position, _convert(record, convert, id_of)))
        ordered = sorted(heap, reverse=True)
        for rank in range(given, len(ordered)):
            locator, source_id, item = ordered[rank][2]
            yield Candidate(rank, f"{locator} (sample_id {rank})", source_id, item)
            given = rank + 1
        if total <= pool:
            return
        pool *= 4


def file_candidates(path: str) -> Iterator[Candidate]:
    """Lines of a prepared prompts file, in order; `sample_id` = line index."""
    for sample_id, item in read_prompts_jsonl(path):
        where = f"{path}:{sample_id + 1} (sample_id {sample_id})"
        source_id = item.source_id if isinstance(item, Conversation) else ""
        yield Candidate(sample_id, where, source_id, item)


def candidates(plan: PromptPlan, cap: int | None, *, whole: bool = False) -> Iterator[Candidate]:
    """The plan's records in prompt-list order, converted, lazily; with `whole` (on-policy
    conversations), each the opening prompt of its whole conversation (`turns.opening`)."""
    found = _candidates(plan, cap, whole)
    if not whole:
        return found
    return (replace(c, item=opening(c.item)) if isinstance(c.item, Conversation) else c for c in found)


def _candidates(plan: PromptPlan, cap: int | None, whole: bool) -> Iterator[Candidate]:
    selection = plan.selection
    if not selection.reads_source:
        return file_candidates(plan.prompts_file)
    spec = plan.config
    adapter = get_adapter(spec.adapter)

    def read() -> Iterator[SourceRecord]:
        if selection.source_files:
            records = iter_source_files(selection.source_files)
        else:
            records = iter_dataset(spec.source, split=spec.split, configs=spec.source_configs,
                                   data_files=spec.data_files, columns=spec.columns, revision=selection.revision)
        return itertools.islice(records, selection.scan_limit)

    pool = 2 * cap + 64 if cap is not None else 1 << 62
    return seeded_candidates(read, partial(adapter.convert, whole=whole), adapter.source_id, selection.seed, pool)
