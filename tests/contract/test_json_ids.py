"""`run/journal.py`: ids read straight from a line's digits are the parser's, or nothing."""

from __future__ import annotations

import json
import random

import orjson
import pytest

from eagle3_synth.run.journal import parse_int_array, split_ids


@pytest.mark.parametrize("body", [b"", b"0", b"1,2,3", b"1, 2, 3", b"0,10,0", b"2147483647", b"1 ,2", b"1,  2",
                                  b"1,2, 3", b" 1 , 2 "])
def test_plain_int_arrays_read_as_the_parser_reads_them(body):
    assert parse_int_array(body).tolist() == orjson.loads(b"[" + body + b"]")


@pytest.mark.parametrize("body", [b"01", b"1,,2", b",1", b"1,", b"-1", b"1.0", b"1e3", b"2147483648", b"99999999999",
                                  b"0, 01", b"00", b"1, ", b", 1", b" ", b"1 2", b"true", b'"1"', b"1,\n2", b"-0"])
def test_anything_else_is_left_to_the_parser(body):
    assert parse_int_array(body) is None


def test_random_arrays_agree_with_the_parser():
    rng = random.Random(27)
    for _ in range(200):
        ids = [rng.choice([0, 1, 9, 10, rng.randrange(2 ** 31)]) for _ in range(rng.randrange(0, 40))]
        for text in (json.dumps(ids), orjson.dumps(ids).decode()):
            assert parse_int_array(text[1:-1].encode()).tolist() == ids


@pytest.mark.parametrize("line", [
    b'{"sample_id":3,"finish_reason":"stop","output_ids":[5,6,7],"messages":[{"content":"]"}]}',
    b'{"sample_id": 3, "output_ids": [5, 6, 7], "finish_reason": "stop"}',
    b'{"sample_id" : 3, "output_ids" : [], "x": "\\"output_ids\\": [1]"}',
])
def test_a_line_split_is_the_parsed_line(line):
    rest, ids = split_ids(line)
    whole = orjson.loads(line)
    assert {**orjson.loads(rest), "output_ids": ids.tolist()} == whole


@pytest.mark.parametrize("line", [
    b'{"a":{"output_ids":[1]},"output_ids":[2]}',  # the key twice
    b'{"a":"output_ids","output_ids":[2]}',  # its text as a value too
    b'{"output_ids":[1.5]}', b'{"output_ids":"[1]"}', b'{"output_ids"[1]}', b'{"output_ids"::[1]}', b'{"ids":[1]}',
])
def test_a_line_in_doubt_is_not_split(line):
    assert split_ids(line) is None
