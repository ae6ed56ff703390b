"""`run/assemble.rows_table`: the table assembly writes, built a column at a time, is from_pylist's."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa

from eagle3_synth.contract.row import FEATURES
from eagle3_synth.run.assemble import rows_table


def test_rows_table_is_from_pylist():
    schema = FEATURES.arrow_schema
    rows = []
    for i, ids in enumerate([[5, 6, 7], [], [2 ** 31 - 1, 0]]):
        row = {name: None for name in schema.names}
        row.update(sample_id=i, source_id="s", prompt_ids=[1, 2], output_ids=ids, reasoning_start=-1, think_end=-1,
                   response_start=0, tool_calls=[{"start": 0, "end": 1}], stop_index=-1, finish_reason="length",
                   prompt_tokens=2, completion_tokens=len(ids), messages="[]", tools="", conversation_id=i, turn=0,
                   sample_index=0, template_kwargs="{}", sampling="")
        rows.append(row)
    expected = pa.Table.from_pylist(rows, schema=schema)
    arrays = [{**row, "output_ids": np.array(row["output_ids"], np.int64)} for row in rows]
    assert rows_table(arrays, schema).equals(expected)
    mixed = [arrays[0], rows[1], arrays[2]]  # a line the reader could not read straight: its list
    assert rows_table(mixed, schema).equals(expected)
    assert rows_table(rows, schema).equals(expected)


def test_the_journal_reader_reads_ids_as_an_array_only_where_certain():
    from eagle3_synth.run.journal import _with_array_ids

    read = _with_array_ids(b'{"sample_id":3,"finish_reason":"stop","output_ids":[5,0,7],"error":null}\n')
    assert isinstance(read["output_ids"], np.ndarray) and read["output_ids"].tolist() == [5, 0, 7]
    for ids in (b"[5,true]", b"[5,1.0]", b"[2147483648]", b"[05]"):
        line = b'{"sample_id":3,"finish_reason":"stop","output_ids":' + ids + b"}\n"
        try:
            expected = json.loads(line)
        except ValueError:
            continue
        assert _with_array_ids(line) == expected  # the parsed list, as without array ids
