"""Assembly's side of a run directory: contract rows in sample_id order, and what the run holds.

`iter_rows` works while a run is still generating (unfinished and failed samples are left out);
`iter_row_tables` gives the same rows as Arrow tables of the contract's schema, per sample-id range,
so the builder writes whole batches and `num_proc` processes can each take some ranges;
`check_run` says what a run holds before a dataset is written from it.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from eagle3_synth.contract.profiles import MarkerIds
from eagle3_synth.contract.row import (FEATURES, dumps_kwargs, dumps_messages, dumps_tools, make_row, dumps_sampling,
                                       sample_sampling)
from eagle3_synth.errors import ConfigError
from eagle3_synth.prompts.held_out import run_validation, split_of, validation_conversations
from eagle3_synth.run.conversations import FAILED, rollout_states
from eagle3_synth.run.directory import RunDirectory
from eagle3_synth.run.shards import Shard
from eagle3_synth.run.kill_points import kill_point
from eagle3_synth.run.progress import MAX_LISTED, Coverage, PromptCounts

# Rows per Arrow table handed to the writer: large enough that per-table costs vanish, small
# enough that a batch of ~2,000-id outputs stays a few tens of MiB.
ROWS_PER_TABLE = 1_000
# Sample-id ranges a run is split into for assembly: the most processes `num_proc` can use.
ASSEMBLY_RANGES = 64


def sample_id_ranges(sample_ids: np.ndarray, count: int = ASSEMBLY_RANGES, stops: np.ndarray | None = None
                     ) -> list[tuple[int, int]]:
    """`[start, stop)` ranges covering the sorted rollout `sample_ids` (their first ids), at most
    `count`, equal in rollouts held; `stops` (first + turns, per rollout) makes each range reach past
    its last rollout's later turns, so no rollout is split between ranges."""
    if not len(sample_ids):
        return []
    order = np.argsort(sample_ids, kind="stable")
    firsts = np.asarray(sample_ids)[order]
    ends = firsts + 1 if stops is None else np.asarray(stops)[order]
    chunks = np.array_split(np.arange(len(firsts)), min(count, len(firsts)))
    return [(int(firsts[chunk[0]]), int(ends[chunk[-1]])) for chunk in chunks]


class _Ranges:
    """Membership in sorted, disjoint `[start, stop)` ranges, and which one holds an id."""

    def __init__(self, ranges: Sequence[tuple[int, int]] | None):
        self.ranges = sorted((int(a), int(b)) for a, b in ranges) if ranges is not None else None
        self.starts = [a for a, _ in self.ranges or ()]
        self.stop = self.ranges[-1][1] if self.ranges else None

    def which(self, sample_id: int) -> int:
        """Index of the range holding `sample_id`, -1 if none (always 0 without ranges)."""
        if self.ranges is None:
            return 0
        i = bisect.bisect_right(self.starts, sample_id) - 1
        return i if i >= 0 and sample_id < self.ranges[i][1] else -1

    def past(self, sample_id: int) -> bool:
        return self.stop is not None and sample_id >= self.stop


def held_out_conversations(run: RunDirectory) -> np.ndarray:
    """The sorted conversation ids of the run's `validation` split (`prompts/held_out.py`): a pure
    function of its prepared conversations and its recorded `validation` and seed (none without one)."""
    validation, seed = run_validation(run.read_run_file()["fields"])
    if validation is None:
        return np.zeros(0, np.int64)
    return validation_conversations(run.prompt_slots().conversation, validation, seed)


def iter_rows(
    run_dir: str, markers: MarkerIds | None = None, ranges: Sequence[tuple[int, int]] | None = None,
    split: str | None = None, *, array_ids: bool = False,
) -> Iterator[dict[str, Any]]:
    """Contract rows of a run directory in sample_id order, exactly one per generated sample;
    only those in the `[start, stop)` sample-id `ranges` when given, and of `split` (`train` or
    `validation`: whole conversations, `held_out_conversations`) when given.

    Works while a run is still generating (unfinished samples are left out, failed ones too).
    Memory holds the journal index (about 30 bytes a sample) and one sample at a time. With
    `array_ids` a row's `output_ids` may be a numpy array (`JournalIndex.reader`), for `iter_row_tables`.
    """
    wanted = _Ranges(ranges)
    if wanted.ranges == []:
        return
    with RunDirectory(run_dir).local_copy() as run:
        markers = markers or run.markers()
        index = run.scan()
        if not len(index.sample_ids):
            return
        has_row = index.ok
        fields = run.read_run_file()["fields"]
        run_kwargs = fields.get("template_kwargs") or {}
        run_sampling = fields["sampling"]  # a rollout without its own sampling draws the run's
        held_out = held_out_conversations(run) if split is not None else None

        def keep(sample_id: int) -> bool:
            """A rollout (by its first id) with a first turn to write; later turns need that one."""
            if wanted.past(sample_id):
                return True  # parsed, and ends the pass (prompts are in sample_id order)
            position = index.position(sample_id)
            return position >= 0 and bool(has_row[position]) and wanted.which(sample_id) >= 0

        with index.reader(run.fs, array_ids=array_ids) as read:
            for prompt in run.iter_prompts(keep=keep):
                if wanted.past(prompt.sample_id):
                    break
                if not keep(prompt.sample_id):
                    continue  # a line `iter_prompts` could not pre-check
                if held_out is not None and split_of(prompt.conversation, held_out) != split:
                    continue
                tools_json = dumps_tools(prompt.tools)
                kwargs_json = dumps_kwargs(run_kwargs if prompt.template_kwargs is None else prompt.template_kwargs)
                sampling = run_sampling if prompt.sampling is None else prompt.sampling
                for turn in range(prompt.turns):
                    position = index.position(prompt.sample_id + turn)
                    if position < 0 or not has_row[position]:
                        break  # turns are generated in order: none after a missing or failed one
                    result = read(position)
                    kill_point("assemble.row")
                    yield make_row(
                        sample_id=prompt.sample_id + turn,
                        source_id=prompt.source_id,
                        prompt_ids=result["prompt_ids"] if turn else prompt.prompt_ids,
                        output_ids=result["output_ids"],
                        finish_reason=result["finish_reason"],
                        messages_json=dumps_messages(result["messages"] if turn else prompt.messages),
                        tools_json=tools_json,
                        markers=markers,
                        conversation_id=prompt.conversation,
                        turn=turn,
                        sample_index=prompt.sample_index,
                        template_kwargs_json=kwargs_json,
                        sampling_json=dumps_sampling(sample_sampling(sampling, prompt.sample_id + turn)),
                    )


def iter_row_tables(
    run_dir: str, ranges: Sequence[tuple[int, int]], rows_per_table: int = ROWS_PER_TABLE, split: str | None = None
) -> Iterator[tuple[int, int, pa.Table]]:
    """The rows of `ranges` (of `split`, if given) as `(range index, table index within it, table)`,
    tables of at most `rows_per_table` rows in `FEATURES.arrow_schema`: the builder writes them
    without encoding one example at a time."""
    schema = FEATURES.arrow_schema
    wanted = _Ranges(ranges)
    order = {pair: i for i, pair in enumerate((int(a), int(b)) for a, b in ranges)}  # given order, for keys
    batch: list[dict[str, Any]] = []
    current, tables = -1, 0

    def table() -> pa.Table:
        return rows_table(batch, schema)

    for row in iter_rows(run_dir, ranges=ranges, split=split, array_ids=True):
        which = order[wanted.ranges[wanted.which(row["sample_id"])]]
        if batch and (which != current or len(batch) >= rows_per_table):
            yield current, tables, table()
            tables = tables + 1 if which == current else 0
            batch = []
        current = which
        batch.append(row)
    if batch:
        yield current, tables, table()


def rows_table(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    """`pa.Table.from_pylist(rows, schema=schema)`, built a column at a time: the same table (and
    Parquet bytes), with the output ids -- numpy arrays where the journal reader could read them so
    -- joined into one list column without a Python int per id."""
    columns = []
    for field in schema:
        values = [row[field.name] for row in rows]
        if any(isinstance(value, np.ndarray) for value in values):
            column = _arrays_column(values, field.type)
        else:
            column = pa.array(values, type=field.type)  # what from_pylist does with each column
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=schema)


def _arrays_column(values: list[Any], list_type: pa.DataType) -> pa.Array:
    """A list column of id arrays (each id in [0, 2**31): `run/journal.py`) from their
    concatenation and offsets; a column that also holds lists, or too many ids for int32 offsets,
    goes through `pa.array` as lists (the same values, and the same errors, as from_pylist's)."""
    lengths = [len(value) for value in values]
    if all(isinstance(value, np.ndarray) for value in values) and sum(lengths) < 2 ** 31:
        offsets = np.zeros(len(values) + 1, np.int32)
        np.cumsum(lengths, out=offsets[1:])
        flat = np.concatenate(values).astype(np.int32) if values else np.zeros(0, np.int32)
        return pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat), type=list_type)
    return pa.array([value.tolist() if isinstance(value, np.ndarray) else value for value in values], type=list_type)


class NoRowsToWrite(ConfigError):
    """A config whose run holds no row (every prompt rejected, or every sample failed)."""

    def __init__(self, run_dir: str, config: str, coverage: Coverage):
        self.run_dir, self.config, self.coverage = run_dir, config, coverage
        super().__init__(no_rows_message(run_dir, config, coverage))


def no_rows_message(run_dir: str, config: str, coverage: Coverage, out: str | None = None) -> str:
    """Why a config has nothing to write: the rejects by reason and the failed samples; `out`, the
    dataset folder it was to be written into, if there is one."""
    counts = Counter(reject["reason"] for reject in RunDirectory(run_dir).iter_rejects())
    rejected = ", ".join(f"{reason}={n}" for reason, n in counts.most_common()) or "none"
    written = f"nothing written to {out}, whose other configs stay loadable" if out else "nothing written"
    return (f"{config}: no row to write ({coverage.counts.prompts} prompts kept, rejected: {rejected}; "
            f"{coverage.finish_reasons.get('abort', 0)} failed): {written}. "
            f"Each rejected prompt is listed with its reason in {run_dir}/rejects.jsonl")


def check_run(run_dir: str, config: str) -> Coverage:
    """What the run directory holds for `config`: results, failures, samples still missing."""
    run = RunDirectory(run_dir)
    recorded = run.read_run_file()["fields"].get("config")
    if recorded != config:
        raise ConfigError(f"run directory {run_dir} holds config {recorded!r}, not {config!r}")
    if not run.prompts_ready:
        raise ConfigError(f"run directory {run_dir} has no prepared prompts yet; run generate (or build with --model) first")
    index = run.scan()
    slots = run.prompt_slots()
    states = rollout_states(slots, index, Shard(), retry_errors=False)
    failed_positions = states.position[states.state == FAILED]
    failed: list[str] = []
    with index.reader(run.fs) as read:
        for position in failed_positions[:MAX_LISTED].tolist():
            result = read(position)
            failed.append(f"sample_id {result['sample_id']}: {result.get('error') or 'aborted by the engine'}")
    unfinished = states.unfinished
    return Coverage(
        config=config,
        run_dir=run_dir,
        counts=PromptCounts.of(slots.conversation, int(slots.turns.sum()), run.iter_rejects()),
        finish_reasons=index.finish_reasons(),
        failed=failed,
        missing=slots.first[unfinished],
        missing_conversations=slots.conversation[unfinished],
        layouts=index.layouts(),
        duplicates=index.duplicates,
        torn=index.torn,
        corrupt=index.corrupt,
        sample_ids=slots.first,
        sample_id_stops=slots.first + slots.turns,
    )
