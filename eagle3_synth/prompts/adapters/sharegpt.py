"""sharegpt: `{id|uuid, conversations: [{from, value}]}` records -- ShareGPT (B6) and Magpie (B7).

Aeala/ShareGPT_Vicuna_unfiltered rows are chunks of real user conversations; `from` is mostly
`human`/`gpt`, with `system`, `bing`, `chatgpt`, `bard`, `user`, `assistant` also seen. Magpie rows
are single-turn `human`/`gpt` pairs with many metadata columns, of which only `uuid` and
`conversations` are read.

Records in each dataset's shape (rebuilt from their columns, shortened: a row of
ShareGPT_V4.3_unfiltered_cleaned_split.json, then one of Magpie-Qwen2.5-Pro-1M-v0.1):

    {"id": "dsOTKpn_0",
     "conversations": [{"from": "human", "value": "Why does `dir` command in DOS see the \\"<.<\\"
                         argument as \\"*.*\\"?"},
                       {"from": "gpt", "value": "The `dir` command in DOS is used to display ..."}]}
    {"uuid": "3a6c1f2e-...", "model": "Qwen/Qwen2.5-72B-Instruct", "instruction": "How do I reverse
     a list in Python?", "conversations": [{"from": "human", "value": "How do I reverse a list in
     Python?"}, {"from": "gpt", "value": "Use `lst[::-1]` ..."}], "task_category": "Coding & Debugging"}

become `[{"role": "user", "content": "Why does `dir` command ..."}]` (source id `dsOTKpn_0`) and
`[{"role": "user", "content": "How do I reverse a list in Python?"}]` (source id the uuid).

Rules: human/user -> user; gpt/chatgpt/bing/bard/assistant/model -> assistant; system -> system;
any other `from` rejects the record (naming the role: a turn is never silently skipped); a chunk
that starts with gpt turns loses them; empty values are dropped; runs of one role are kept as they
are; the conversation is cut after its last human turn.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from eagle3_synth.prompts.conversation import Conversation, record_id, role_turns, text_messages

VERSION = 1
# Fields naming the record in its dataset, first present wins (none: the reader's row is used).
ID_FIELDS: tuple[str, ...] = ("id", "uuid")

ROLES = {
    "human": "user", "user": "user",
    "gpt": "assistant", "chatgpt": "assistant", "bing": "assistant", "bard": "assistant",
    "assistant": "assistant", "model": "assistant",
    "system": "system",
}


def sharegpt_turns(record: Mapping[str, Any], roles: Mapping[str, str] = ROLES) -> list[tuple[str, str]]:
    """`(role, text)` per `{from, value}` turn of `conversations`, roles normalised."""
    return role_turns(record, "conversations", "from", "value", roles)


def convert(record: Mapping[str, Any], *, whole: bool = False) -> Conversation:
    """A ShareGPT/Magpie record's conversation up to its last human turn."""
    turns = sharegpt_turns(record)
    messages = text_messages(turns, whole=whole)
    return Conversation(messages=messages, source_id=record_id(record, *ID_FIELDS))
