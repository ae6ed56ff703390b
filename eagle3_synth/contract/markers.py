"""Markers as token-id patterns: resolved once per tokenizer from their strings, matched in ids.

A marker is a string such as `</think>` (one special token) or `<|channel|>analysis<|message|>`
(gpt-oss: special, text, special) or `</｜DSML｜invoke>` (DeepSeek-V4: `</`, `｜DSML｜`, `invoke`,
`>`). A family may write one marker in several ways (`alternatives`: gpt-oss puts a call's
recipient before or after its channel), and the first one found in the output counts.

Encoding a marker on its own does not always give the ids it has inside an output: byte-level BPE
merges ordinary text across the marker's edge, so the closing `>` of a DSML tag and the newline
after it are one token `>\\n`. Special (added) tokens never merge -- the tokenizer splits them out
before BPE runs -- so only an ordinary-text token at either edge can. `resolve_pattern` therefore
allows, at a leading ordinary-text edge, every vocabulary token whose string ENDS with that edge
token's string, and at a trailing edge every token whose string STARTS with it, read from the
vocabulary's token strings once per tokenizer. Outputs are matched as ids; nothing is decoded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from eagle3_synth.errors import MarkerError


@dataclass(frozen=True)
class MarkerPattern:
    """One way of writing a marker, as the ids allowed at each of its positions."""

    text: str = field(compare=False)  # for people; old run directories did not record it
    slots: tuple[frozenset[int], ...] = ()

    @property
    def single_id(self) -> int | None:
        """The id of a one-token, no-merge marker (`</think>`), else None."""
        if len(self.slots) == 1 and len(self.slots[0]) == 1:
            return next(iter(self.slots[0]))
        return None

    def to_json(self) -> dict[str, Any]:
        return {"text": self.text, "slots": [sorted(slot) for slot in self.slots]}

    @classmethod
    def from_json(cls, data: Any) -> "MarkerPattern":
        return cls(text=data.get("text", ""), slots=tuple(frozenset(slot) for slot in data["slots"]))


@dataclass(frozen=True)
class Marker:
    """A marker with every way of writing it; empty (`NO_MARKER`) where a family has none."""

    alternatives: tuple[MarkerPattern, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.alternatives)

    @property
    def id(self) -> int:
        """The one id of a one-token marker (all built-in Kimi/Qwen3/DeepSeek markers are)."""
        if len(self.alternatives) == 1 and self.alternatives[0].single_id is not None:
            return self.alternatives[0].single_id
        raise ValueError(f"marker {self.texts} is not a single token")

    @property
    def texts(self) -> list[str]:
        return [pattern.text for pattern in self.alternatives]

    def to_json(self) -> list[dict[str, Any]]:
        return [pattern.to_json() for pattern in self.alternatives]

    @classmethod
    def from_json(cls, data: Any) -> "Marker":
        if data is None:
            return NO_MARKER
        if isinstance(data, int):
            return cls((MarkerPattern.from_json(data),))
        return cls(tuple(MarkerPattern.from_json(item) for item in data))


NO_MARKER = Marker()


def describe(value: Any) -> str:
    """A marker as people read it in messages: its id if it is one token, else its texts."""
    if not isinstance(value, Marker):
        return repr(value)
    if not value:
        return "none"
    try:
        return str(value.id)
    except ValueError:
        return " | ".join(f"{p.text!r} ({len(p.slots)} tokens)" for p in value.alternatives)


# -- resolution -------------------------------------------------------------------------------------

def single_token_id(tokenizer: Any, token: str) -> int | None:
    """The id of `token` when the tokenizer's vocabulary holds it as one token, else None."""
    token_id = tokenizer.convert_tokens_to_ids(token)
    if token_id is None:
        return None
    unk = getattr(tokenizer, "unk_token_id", None)
    if unk is not None and token_id == unk and token != getattr(tokenizer, "unk_token", None):
        return None
    return int(token_id)


class Vocabulary:
    """A tokenizer's token strings and which ids are added tokens, read once per tokenizer."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self.token_of = {int(i): tok for tok, i in tokenizer.get_vocab().items()}
        self.added = {int(i) for i in getattr(tokenizer, "added_tokens_decoder", {})}

    def single_token(self, token: str) -> int | None:
        return single_token_id(self.tokenizer, token)

    def encode(self, text: str) -> list[int]:
        return [int(i) for i in self.tokenizer.encode(text, add_special_tokens=False)]

    def starting_with(self, token_id: int) -> frozenset[int]:
        prefix = self.token_of[token_id]
        return frozenset(i for i, tok in self.token_of.items() if i not in self.added and tok.startswith(prefix))

    def ending_with(self, token_id: int) -> frozenset[int]:
        suffix = self.token_of[token_id]
        return frozenset(i for i, tok in self.token_of.items() if i not in self.added and tok.endswith(suffix))


def resolve_pattern(vocab: Vocabulary, text: str, *, what: str, single_token: bool) -> MarkerPattern:
    """`text` as ids of this tokenizer, with the merge-tolerant edges described in the module doc.

    `single_token` (families whose markers are special tokens) refuses a marker that is not one
    token: there it means the tokenizer is not the family's, and the message says so.
    """
    ids = vocab.encode(text)
    if not ids:
        raise MarkerError(f"{what} {text!r} encodes to no ids")
    if single_token:
        token_id = vocab.single_token(text)
        if token_id is None:
            raise MarkerError(f"{what} {text!r} is not in the tokenizer's vocabulary; "
                              "pick another --profile or check --tokenizer")
        if ids != [token_id]:
            raise MarkerError(f"{what} {text!r} is not a single token (it encodes to {len(ids)} ids {ids}); "
                              "this profile's markers are one token each")
        return MarkerPattern(text, (frozenset(ids),))
    unk = getattr(vocab.tokenizer, "unk_token_id", None)
    if unk is not None and unk in ids:
        raise MarkerError(f"{what} {text!r} contains text this tokenizer cannot encode (unknown token)")
    slots = [frozenset((i,)) for i in ids]
    if ids[-1] not in vocab.added:
        slots[-1] = vocab.starting_with(ids[-1])
    if len(ids) > 1 and ids[0] not in vocab.added:
        slots[0] = vocab.ending_with(ids[0])
    return MarkerPattern(text, tuple(slots))


# -- matching ---------------------------------------------------------------------------------------

def _index(ids: Sequence[int] | np.ndarray, token: int, start: int, stop: int) -> int:
    """First index of `token` in `ids[start:stop]`, -1 if none; over a list or a numpy array (assembly
    reads output ids as arrays: one vectorised compare instead of a Python-object scan)."""
    if isinstance(ids, np.ndarray):
        hits = np.flatnonzero(ids[max(start, 0):stop] == token)
        return int(hits[0]) + max(start, 0) if len(hits) else -1
    try:
        return ids.index(token, start, stop)  # runs in C
    except ValueError:
        return -1


def _matches_at(ids: Sequence[int], slots: tuple[frozenset[int], ...], at: int) -> bool:
    if at < 0 or at + len(slots) > len(ids):
        return False
    return all(ids[at + k] in slot for k, slot in enumerate(slots))


def _anchor(slots: tuple[frozenset[int], ...]) -> int:
    """Position of the first slot that allows exactly one id (a special token), -1 if none."""
    return next((k for k, slot in enumerate(slots) if len(slot) == 1), -1)


def find_pattern(ids: Sequence[int], pattern: MarkerPattern, start: int = 0, stop: int | None = None) -> int:
    """First index >= `start` where `pattern` begins and ends before `stop`; -1 if none."""
    stop = len(ids) if stop is None else stop
    slots = pattern.slots
    single = pattern.single_id
    if single is not None:
        return _index(ids, single, start, stop)
    anchor = _anchor(slots)
    if anchor < 0:  # no special token in it: scan (only user-defined text markers get here)
        return next((i for i in range(start, stop - len(slots) + 1) if _matches_at(ids, slots, i)), -1)
    token = next(iter(slots[anchor]))
    at = _index(ids, token, start + anchor, stop)
    while at >= 0:
        begin = at - anchor
        if begin + len(slots) <= stop and _matches_at(ids, slots, begin):
            return begin
        at = _index(ids, token, at + 1, stop)
    return -1


def find_marker(ids: Sequence[int], marker: Marker, start: int = 0, stop: int | None = None) -> tuple[int, int]:
    """(first index, last index) of the earliest occurrence of any alternative at or after
    `start`; a tie goes to the longer one. (-1, -1) if none."""
    best = (-1, -1)
    for pattern in marker.alternatives:
        at = find_pattern(ids, pattern, start, stop)
        if at < 0:
            continue
        end = at + len(pattern.slots) - 1
        if best[0] < 0 or at < best[0] or (at == best[0] and end > best[1]):
            best = (at, end)
    return best


def find_last_marker(ids: Sequence[int], marker: Marker) -> int:
    """First index of the last occurrence of `marker` in `ids`, -1 if none."""
    last = -1
    for pattern in marker.alternatives:
        single = pattern.single_id
        if single is not None:
            tail = ids[::-1]
            from_end = _index(tail, single, 0, len(tail))
            if from_end >= 0:
                last = max(last, len(ids) - 1 - from_end)
            continue
        at = find_pattern(ids, pattern)
        while at >= 0:
            last = max(last, at)
            at = find_pattern(ids, pattern, at + 1)
    return last
