"""Which samples to look at: `--where` expressions and `--random/--shortest/--longest K` picks.

`--where 'think_end == -1 and finish_reason == "stop"'` is parsed with Python's `ast` into a
pyarrow compute expression over the contract's columns (never `eval`ed), so filtering a large
config is one vectorised pass over a few scalar columns. Allowed: column names, numbers and
strings, `== != < <= > >=`, `in [...]`, `and or not`, `+ - *`, and `len(list_column)`.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from eagle3_synth.errors import ConfigError
from eagle3_synth.contract.row import COLUMNS, FEATURES

LIST_COLUMNS = tuple(name for name in COLUMNS if FEATURES.arrow_schema.field(name).type.num_fields)

_COMPARE: dict[type, Callable[[object, object], object]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt,
    ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
}
_ARITHMETIC: dict[type, Callable[[object, object], object]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
}


@dataclass(frozen=True)
class WhereClause:
    text: str
    expression: pc.Expression
    columns: frozenset[str]  # the columns it reads


def parse_where(text: str) -> WhereClause:
    """Turn a `--where` string into a pyarrow expression; errors name the offending part."""
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise ConfigError(f"--where {text!r}: not a valid expression ({exc.msg})") from None
    columns: set[str] = set()

    def fail(node: ast.AST, why: str) -> ConfigError:
        return ConfigError(f"--where {text!r}: at {ast.unparse(node)!r}: {why}")

    def column(node: ast.AST) -> str:
        if not isinstance(node, ast.Name):
            raise fail(node, "expected a column name")
        if node.id not in COLUMNS:
            raise fail(node, f"unknown column; columns are {', '.join(COLUMNS)}")
        columns.add(node.id)
        return node.id

    def value(node: ast.AST):
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bool)):
            return pc.scalar(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
            return pc.scalar(-node.operand.value)
        if isinstance(node, ast.Name):
            name = column(node)
            if name in LIST_COLUMNS:
                raise fail(node, f"{name} is a list; compare len({name})")
            return pc.field(name)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len":
            if len(node.args) != 1 or node.keywords:
                raise fail(node, "len() takes one column")
            name = column(node.args[0])
            if name not in LIST_COLUMNS:
                raise fail(node, f"len() needs a list column ({', '.join(LIST_COLUMNS)})")
            return pc.list_value_length(pc.field(name))
        if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
            return _ARITHMETIC[type(node.op)](value(node.left), value(node.right))
        return boolean(node)

    def boolean(node: ast.AST) -> pc.Expression:
        if isinstance(node, ast.BoolOp):
            parts = [boolean(v) for v in node.values]
            combine = operator.and_ if isinstance(node.op, ast.And) else operator.or_
            result = parts[0]
            for part in parts[1:]:
                result = combine(result, part)
            return result
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return ~boolean(node.operand)
        if isinstance(node, ast.Compare):
            result = None
            left = node.left
            for op, right in zip(node.ops, node.comparators):  # a < b < c means a < b and b < c
                if isinstance(op, (ast.In, ast.NotIn)):
                    if not isinstance(right, (ast.List, ast.Tuple)) or not all(isinstance(e, ast.Constant) for e in right.elts):
                        raise fail(right, "`in` needs a list of constants")
                    part = value(left).isin([e.value for e in right.elts])
                    part = ~part if isinstance(op, ast.NotIn) else part
                elif type(op) in _COMPARE:
                    part = _COMPARE[type(op)](value(left), value(right))
                else:
                    raise fail(node, "unsupported comparison")
                result = part if result is None else result & part
                left = right
            return result
        raise fail(node, "expected a comparison (e.g. think_end == -1)")

    return WhereClause(text=text, expression=boolean(tree.body), columns=frozenset(columns))


@dataclass(frozen=True)
class Selection:
    sample_ids: list[int]
    matched: int  # rows passing --where (all rows without it)
    total: int


def select_samples(
    table: pa.Table,
    *,
    where: WhereClause | None = None,
    random: int | None = None,
    shortest: int | None = None,
    longest: int | None = None,
    first: int | None = None,
    seed: int = 0,
) -> Selection:
    """Pick sample ids from `table` (needs sample_id, completion_tokens and the where columns).

    Picks are unioned in the order random, shortest, longest, first; each id appears once.
    Shortest/longest break ties by sample_id so the choice is reproducible.
    """
    for name, k in (("--random", random), ("--shortest", shortest), ("--longest", longest)):
        if k is not None and k < 1:
            raise ConfigError(f"{name} must be >= 1, got {k}")
    total = table.num_rows
    if where is not None:
        try:
            table = table.filter(where.expression)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise ConfigError(f"--where {where.text!r}: {exc}") from None
    ids = table.column("sample_id").to_numpy()
    lengths = table.column("completion_tokens").to_numpy()
    # lexsort's last key is the primary one; ties go to the lower sample_id either way.
    shortest_first, longest_first = np.lexsort((ids, lengths)), np.lexsort((ids, -lengths.astype(np.int64)))
    picked: list[int] = []
    if random:
        rng = np.random.default_rng(seed)
        picked += ids[np.sort(rng.choice(len(ids), size=min(random, len(ids)), replace=False))].tolist()
    if shortest:
        picked += ids[shortest_first[:shortest]].tolist()
    if longest:
        picked += ids[longest_first[:longest]].tolist()
    if first:
        picked += np.sort(ids)[:first].tolist()
    return Selection(sample_ids=list(dict.fromkeys(int(i) for i in picked)), matched=len(ids), total=total)
