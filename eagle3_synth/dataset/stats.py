"""Length and boundary statistics per config, computed over columns (pyarrow/numpy), never per token.

The first thing people ask of a run is "many responses seem short -- is something cut?". These
figures answer it: output-length quantiles, the share under 500 tokens, the share truncated
(`finish_reason == "length"`), the share whose reasoning never closed, the share with tool calls,
and how the output splits into reasoning and response.

Public API (also used for the dataset card):

    stats = config_stats(table_or_dataset_or_rows, config="B1_glaive")   # -> ConfigStats
    print(format_stats_table([stats, ...]))                              # terminal table
    print(format_stats_table([stats, ...], markdown=True))               # dataset card table
    plot_output_lengths({"B1_glaive": table, ...}, "lengths.png")         # histograms

Only the small scalar columns in `STATS_COLUMNS` are read, so a folder's Parquet files can be
projected to them (`rows.open_source(...).table(config, STATS_COLUMNS)`) without loading any ids.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from eagle3_synth.contract.row import reasoning_end, is_lowered
import pyarrow as pa
import pyarrow.compute as pc

STATS_COLUMNS = (
    "prompt_tokens",
    "completion_tokens",
    "reasoning_start",
    "think_end",
    "response_start",
    "tool_calls",
    "finish_reason",
    "turn",
    "sampling",
)
# Trainers cap sequence length (EAGLE-3's reference drops rows over 2,048 tokens, SpecForge cuts at
# 2,048 by default, speculators at 8,192): the share of rows over each, in total tokens.
LENGTH_THRESHOLDS = (2048, 4096, 8192, 16384)
# Per-turn rows: turns 0..MAX_TURN_ROWS-1 each, the rest together.
MAX_TURN_ROWS = 4
# "Short" outputs: the threshold the question "many responses seem short?" is asked about.
SHORT_OUTPUT_TOKENS = 500
QUANTILES = {"min": 0.0, "median": 0.5, "p90": 0.9, "p99": 0.99, "max": 1.0}


@dataclass(frozen=True)
class Quantiles:
    """Nearest-rank quantiles of a token count: every figure is a length that actually occurs."""

    min: int
    median: int
    p90: int
    p99: int
    max: int

    @classmethod
    def of(cls, values: np.ndarray) -> "Quantiles":
        if values.size == 0:
            return cls(0, 0, 0, 0, 0)
        # "inverted_cdf" is the nearest-rank definition: the smallest value with at least q of the
        # data at or below it, so the median of [1, 2, 3, 4] is 2, not 2.5.
        figures = np.quantile(values, list(QUANTILES.values()), method="inverted_cdf")
        return cls(*(int(v) for v in figures))


@dataclass(frozen=True)
class ConfigStats:
    """The figures of one config. Shares are fractions in [0, 1]; means are tokens per sample."""

    config: str
    count: int
    prompt_tokens: Quantiles
    output_tokens: Quantiles
    # completion_tokens < SHORT_OUTPUT_TOKENS
    share_short: float
    # finish_reason == "length": the engine hit max_new_tokens
    share_truncated: float
    # of those, rows shorter than their own max_new_tokens (the `sampling` column): the engine
    # lowered the cap to fit the context or its KV budget (`contract/row.py`)
    share_lowered: float
    # think_end == -1: no reasoning-close marker in the output (no reasoning at all, reasoning cut
    # off, or reasoning ended implicitly by a tool-call section)
    share_no_think_end: float
    # response_start == -1: reasoning began and never ended (the response is missing entirely)
    share_reasoning_unended: float
    # at least one entry in tool_calls
    share_with_tool_calls: float
    # Mean over all samples (a sample without reasoning counts 0 reasoning tokens). Reasoning runs
    # from reasoning_start to the close marker (exclusive) or, if it never closed, to the response
    # start or the end; the response runs from response_start to the end, stop token included.
    mean_reasoning_tokens: float
    mean_response_tokens: float
    output_tokens_total: int
    # prompt + output tokens > each of LENGTH_THRESHOLDS (what a trainer's max length cuts or drops)
    share_over: dict[int, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _to_table(data: Any) -> pa.Table:
    """Accept a pyarrow Table, a `datasets.Dataset`, or an iterable of row dicts."""
    if isinstance(data, pa.Table):
        return data
    if hasattr(data, "with_format") and hasattr(data, "column_names"):  # datasets.Dataset
        keep = [c for c in STATS_COLUMNS if c in data.column_names]
        return data.select_columns(keep).with_format("arrow")[:]
    rows = [{c: row.get(c, "" if c == "sampling" else 0) for c in STATS_COLUMNS} for row in data]
    from eagle3_synth.contract.row import FEATURES

    schema = pa.schema([FEATURES.arrow_schema.field(c) for c in STATS_COLUMNS])
    return pa.Table.from_pylist(rows, schema=schema)


def _int_column(table: pa.Table, name: str) -> np.ndarray:
    return table.column(name).to_numpy().astype(np.int64, copy=False)


def config_stats(data: pa.Table | Any | Iterable[Mapping[str, Any]], config: str = "") -> ConfigStats:
    """Every figure of one config from its rows (a Table with at least `STATS_COLUMNS`, a Dataset
    or row dicts). Column-wise: cost is a few numpy passes over int32 columns."""
    table = _to_table(data)
    count = table.num_rows
    prompt = _int_column(table, "prompt_tokens")
    output = _int_column(table, "completion_tokens")
    reasoning_start = _int_column(table, "reasoning_start")
    think_end = _int_column(table, "think_end")
    response_start = _int_column(table, "response_start")
    tool_call_counts = pc.list_value_length(table.column("tool_calls")).fill_null(0).to_numpy()
    truncated = pc.equal(table.column("finish_reason"), "length").fill_null(False).to_numpy(zero_copy_only=False)

    lowered = np.zeros(count, dtype=bool)
    if "sampling" in table.column_names and truncated.any():
        where = np.flatnonzero(truncated)
        samplings = table.column("sampling").take(pa.array(where)).to_pylist()
        lowered[where] = [is_lowered("length", int(output[i]), text) for i, text in zip(where, samplings)]

    has_reasoning = reasoning_start >= 0
    reasoning_tokens = np.where(has_reasoning, reasoning_end(think_end, response_start, output) - reasoning_start, 0)
    response_tokens = np.where(response_start >= 0, output - response_start, 0)

    def share(mask: np.ndarray) -> float:
        return float(mask.sum()) / count if count else 0.0

    def mean(values: np.ndarray) -> float:
        return float(values.mean()) if count else 0.0

    return ConfigStats(
        config=config,
        count=count,
        prompt_tokens=Quantiles.of(prompt),
        output_tokens=Quantiles.of(output),
        share_short=share(output < SHORT_OUTPUT_TOKENS),
        share_truncated=share(truncated),
        share_lowered=share(lowered),
        share_no_think_end=share(think_end < 0),
        share_reasoning_unended=share(has_reasoning & (response_start < 0)),
        share_with_tool_calls=share(tool_call_counts > 0),
        mean_reasoning_tokens=mean(reasoning_tokens),
        mean_response_tokens=mean(response_tokens),
        output_tokens_total=int(output.sum()),
        share_over={limit: share(prompt + output > limit) for limit in LENGTH_THRESHOLDS},
    )


def turn_stats(data: pa.Table | Any | Iterable[Mapping[str, Any]], config: str = "") -> list[ConfigStats]:
    """`config_stats` per turn of on-policy conversations (`turn 0`, `turn 1`, ..., the last row
    holding every turn from MAX_TURN_ROWS on); [] when every row is a first turn."""
    table = _to_table(data)
    if "turn" not in table.column_names or not table.num_rows:
        return []
    turns = _int_column(table, "turn")
    if turns.max() == 0:
        return []
    rows = []
    for turn in range(min(int(turns.max()), MAX_TURN_ROWS) + 1):
        last = turn == MAX_TURN_ROWS
        mask = turns >= turn if last else turns == turn
        rows.append(config_stats(table.filter(pa.array(mask)), f"{config} turn {turn}{'+' if last else ''}"))
    return rows


# (header, formatter) per column of the table; one definition for the terminal and the card.
_TABLE_COLUMNS: tuple[tuple[str, Any], ...] = (
    ("config", lambda s: s.config),
    ("n", lambda s: str(s.count)),
    ("prompt min/med/p90/p99/max", lambda s: _quantiles(s.prompt_tokens)),
    ("output min/med/p90/p99/max", lambda s: _quantiles(s.output_tokens)),
    (f"<{SHORT_OUTPUT_TOKENS} out", lambda s: _percent(s.share_short)),
    ("truncated", lambda s: _percent(s.share_truncated)),
    ("lowered", lambda s: _percent(s.share_lowered)),
    ("no </think>", lambda s: _percent(s.share_no_think_end)),
    ("tool calls", lambda s: _percent(s.share_with_tool_calls)),
    ("mean reasoning/response", lambda s: f"{s.mean_reasoning_tokens:.0f}/{s.mean_response_tokens:.0f}"),
    ("over " + "/".join(f"{t // 1024}k" for t in LENGTH_THRESHOLDS),
     lambda s: "/".join(f"{100 * s.share_over.get(t, 0.0):.1f}" for t in LENGTH_THRESHOLDS) + "%"),
)


def _quantiles(q: Quantiles) -> str:
    return f"{q.min}/{q.median}/{q.p90}/{q.p99}/{q.max}"


def _percent(value: float) -> str:
    return f"{100 * value:.1f}%"


def format_stats_table(stats: Sequence[ConfigStats], *, markdown: bool = False) -> str:
    """One line per config: a fixed-width terminal table, or a Markdown table for the card."""
    header = [name for name, _ in _TABLE_COLUMNS]
    body = [[fmt(s) for _, fmt in _TABLE_COLUMNS] for s in stats]
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in body]
        return "\n".join(lines)
    widths = [max(len(cell) for cell in column) for column in zip(header, *body)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(cells, widths)))

    return "\n".join([line(header), *(line(row) for row in body)])


def _output_lengths(data: Any) -> np.ndarray:
    if isinstance(data, np.ndarray):
        return data
    if isinstance(data, Sequence) and not isinstance(data, (str, bytes)) and (not data or isinstance(data[0], int)):
        return np.asarray(data, dtype=np.int64)
    return _int_column(_to_table(data), "completion_tokens")


def plot_output_lengths(lengths_by_config: Mapping[str, Any], path: str | Path, *, bins: int = 50) -> Path:
    """Write a PNG with one output-length histogram per config (matplotlib, Agg backend: no display).

    Values of the mapping may be Tables/Datasets/rows (their `completion_tokens` is used) or plain
    sequences/arrays of output lengths. The 500-token line marks "short" outputs.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(lengths_by_config)
    if not names:
        raise ValueError("plot_output_lengths: no configs to plot")
    figure, axes = plt.subplots(len(names), 1, figsize=(8, 2.4 * len(names)), squeeze=False)
    for axis, name in zip(axes[:, 0], names):
        lengths = _output_lengths(lengths_by_config[name])
        # Bins over [0, max] with the 500 line always in view, so short outputs stand out as such.
        top = max(int(lengths.max()) if lengths.size else 0, SHORT_OUTPUT_TOKENS) + 1
        axis.hist(lengths, bins=np.linspace(0, top, bins + 1), color="#3a7bd5")
        axis.axvline(SHORT_OUTPUT_TOKENS, color="#d53a3a", linestyle="--", linewidth=1,
                     label=f"{SHORT_OUTPUT_TOKENS} tokens")
        axis.legend(loc="upper right", fontsize=8)
        axis.set_title(f"{name}: output tokens (n={lengths.size})", fontsize=10)
        axis.set_ylabel("samples")
    axes[-1, 0].set_xlabel("output tokens")
    figure.tight_layout()
    path = Path(path)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
