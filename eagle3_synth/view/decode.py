"""A row's output as an OpenAI-style assistant message: reasoning, content and tool calls as text.

For exports to frameworks that take text (SpecForge) and for people; never for the data path.
A thin wrapper over `prompts.history.history_message`, so each family has one parser: the split
comes from the boundary columns (token positions), and only the inside of one tool call is parsed
as text, in the family's own layout.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from eagle3_synth.contract.profiles import PROFILES, MarkerIds, ModelProfile, resolve_markers
from eagle3_synth.prompts.history import decode_text, history_message


def decode_ids(tokenizer: Any, ids: Sequence[int], *, skip_special_tokens: bool = False) -> str:
    """`tokenizer.decode(ids)` for display (fast tokenizers are handed a numpy array)."""
    return decode_text(tokenizer, ids, skip_special_tokens=skip_special_tokens)


def display_text(tokenizer: Any, ids: Sequence[int], *, show_ids: bool = False) -> str:
    """`ids` decoded for people: an id that is not a token of the tokenizer (outside
    `0 <= id < len(tokenizer)`: a row that breaks the contract, or an id of the model's embedding
    padding) is shown as `⟨ID: not in the tokenizer⟩` in its place, never decoded (a negative id
    or one past 64 bits makes `decode` raise) and never dropped. `show_ids`: each token's id after it."""
    size = len(tokenizer)
    if not show_ids and (len(ids) == 0 or (min(ids) >= 0 and max(ids) < size)):
        return decode_ids(tokenizer, ids)  # every id a token: one decode, no loop over the ids here
    parts: list[str] = []
    run: list[int] = []
    for token in ids:
        if 0 <= token < size:
            if show_ids:
                parts.append(f"{decode_ids(tokenizer, [token])}⟨{token}⟩")
            else:
                run.append(token)
            continue
        if run:
            parts.append(decode_ids(tokenizer, run))
            run = []
        parts.append(f"⟨{token}: not in the tokenizer⟩")
    if run:
        parts.append(decode_ids(tokenizer, run))
    return "".join(parts)


# Markers resolved once per (tokenizer, profile): resolving reads the whole vocabulary.
_RESOLVED: dict[tuple[int, str], tuple[Any, MarkerIds]] = {}


def _markers(tokenizer: Any, profile: ModelProfile) -> MarkerIds:
    key = (id(tokenizer), profile.name)
    held = _RESOLVED.get(key)
    if held is None or held[0] is not tokenizer:
        if len(_RESOLVED) >= 8:
            _RESOLVED.clear()
        held = _RESOLVED[key] = (tokenizer, resolve_markers(profile, tokenizer))
    return held[1]


def assistant_message(row: dict[str, Any], tokenizer: Any, profile: str | ModelProfile,
                      markers: MarkerIds | None = None) -> dict[str, Any]:
    """`{"role": "assistant", "content", <reasoning field>, "tool_calls"?}` decoded from a row.

    `profile`: a built-in profile's name, or a ModelProfile (a --profile-file one, with its
    `markers`). The message is `history_message`'s: reasoning and content stripped, special
    tokens (section markers, the stop token) in no text, a call cut off left out, `tool_calls` only
    when there are calls; the row's `tools` type the parameters of XML-style calls.
    """
    if not isinstance(profile, ModelProfile):
        if profile not in PROFILES:
            raise ValueError(f"profile {profile!r} is not built in (known: {sorted(PROFILES)}); "
                             "pass its ModelProfile and markers")
        profile = PROFILES[profile]
    tools = json.loads(row["tools"]) if row.get("tools") else None
    return history_message(row["output_ids"], row, tokenizer, markers or _markers(tokenizer, profile), profile,
                           tools=tools)
