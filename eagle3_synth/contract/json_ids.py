"""A JSON line's `"output_ids"` array read straight into numpy, where that is provably what a JSON
parser would read; None otherwise, and the caller parses the line as it always did.

Why: assembly reads every journal line again, and its thousands of ids went from JSON to Python
ints (orjson) to Arrow and through the marker search as Python objects; as one numpy array they
are joined into the Arrow column and searched without a Python object per id. Reading them from
the digits is as fast as orjson plus packing, and exact where packing orjson's list would not be
(a `true` in the list would pack as 1): `split_ids` only accepts text whose meaning is beyond doubt:
  - the key `"output_ids"` occurs once in the line (a `"` inside a JSON string is escaped, so the
    key's bytes cannot come from a string's text), and the caller checks that the rest of the line
    parses to an object whose `output_ids` is the emptied `[]` (so the array was the top-level value);
  - the array's text is plain JSON integers, commas and spaces (`parse_int_array`);
  - every id is below 2**31: the same number as an int32, the contract's column type.
Nothing is decoded and no id is re-encoded: the digits are the ids.
"""

from __future__ import annotations

import numpy as np

_KEY = b'"output_ids"'
_DIGITS = b"0123456789"
_TENS = np.array([10 ** k for k in range(1, 19)], np.int64)  # a number's digits: 1 + how many of these it reaches
_LIMIT = 2 ** 31


def split_ids(line: bytes) -> tuple[bytes, np.ndarray] | None:
    """(the line with its `"output_ids"` array emptied, the ids as int64), or None where the fast
    reading is not certain to equal a JSON parser's (see the module doc; the caller then parses
    the whole line, with its usual errors). The caller must check that the emptied line parses to
    an object whose `output_ids` is `[]`."""
    at = line.find(_KEY)
    if at < 0 or line.find(_KEY, at + len(_KEY)) >= 0:
        return None
    colon = at + len(_KEY)
    while line[colon:colon + 1] in (b" ", b":"):  # `"output_ids":[` or `"output_ids": [`
        colon += 1
    if line[colon:colon + 1] != b"[" or line[at + len(_KEY):colon].count(b":") != 1:
        return None
    begin = colon + 1
    end = line.find(b"]", begin)
    if end < 0:
        return None
    ids = parse_int_array(line[begin:end])
    if ids is None:
        return None
    return line[:begin] + line[end:], ids


def parse_int_array(body: bytes) -> np.ndarray | None:
    """The ids of an int array's text between its brackets (int64), None unless it is certain.

    Three checks in C make numpy's reading (strtoll per number, whitespace around a comma skipped,
    ValueError at anything else) the JSON reading: only digits, commas and spaces (JSON whitespace)
    are there; numpy read one number more than there are commas (so no element is empty or holds
    two numbers); and the numbers read have, written out, exactly the digits of the text (so none
    has a leading zero, which JSON forbids, and none saturated past int64). Every id < 2**31."""
    if not body:
        return np.zeros(0, np.int64)
    separators = body.translate(None, _DIGITS)
    if separators.translate(None, b", "):  # anything but digits, commas and spaces (signs, fractions ...)
        return None
    try:
        ids = np.fromstring(body, dtype=np.int64, sep=",")
    except ValueError:  # text numpy could not read to its end
        return None
    if len(ids) != separators.count(b",") + 1 or ids.max() >= _LIMIT:
        return None
    if int(np.searchsorted(_TENS, ids, side="right").sum()) + len(ids) != len(body) - len(separators):
        return None  # a leading zero (or whitespace read as a number)
    return ids
