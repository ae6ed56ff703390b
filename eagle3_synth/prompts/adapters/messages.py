"""messages: `{messages: [{role, content}]}` records -- UltraChat 200k (B3) and Mixture-of-Thoughts (B4).

HuggingFaceH4/ultrachat_200k rows have `prompt`, `prompt_id` (sha256 hex) and multi-turn
`messages` with roles user/assistant; open-r1/Mixture-of-Thoughts rows have `messages`
(`[user, assistant]`, the assistant turn starting `<think>\\n...\\n</think>\\n\\n`), `num_tokens`
and `source` (the upstream dataset).

Real records (UltraChat card example and a Mixture-of-Thoughts row, shortened):

    {"prompt": "Create a fully-developed protagonist ...",
     "messages": [{"content": "Create a fully-developed protagonist ...", "role": "user"},
                  {"content": "Name: Ava\\n\\n Ava was just 16 years old ...", "role": "assistant"},
                  {"content": "Wow, Ava's story is so intense ... more details. ...", "role": "user"},
                  {"content": "Certainly! ....", "role": "assistant"}],
     "prompt_id": "d938b65dfe31f05f80eb8572964c6673eddbd68eff3db6bd234d7f1e3b86c2af"}
    {"messages": [{"content": "You will be given a competitive programming problem. ...", "role": "user"},
                  {"content": "<think>\\nOkay, let's see. ...\\n</think>\\n\\n```cpp\\n...```", "role": "assistant"}],
     "num_tokens": 22185, "source": "open-r1/codeforces-cots"}

become the first three UltraChat messages (the last answer dropped; source id the `prompt_id`) and
the single Mixture-of-Thoughts user message (no id: the reader gives its row).

Rules: roles system/user/assistant only (others reject the record, naming the role); `prompt` is
not added as an extra turn; an earlier assistant turn's leading `<think>...</think>` becomes its
`reasoning_content`; empty turns are dropped; the conversation is cut after its last user turn.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from eagle3_synth.prompts.conversation import Conversation, record_id, role_turns, text_messages

VERSION = 1
# Fields naming the record in its dataset, first present wins (none: the reader's row is used).
ID_FIELDS: tuple[str, ...] = ("prompt_id", "id")

ROLES = {"system": "system", "user": "user", "assistant": "assistant"}


def convert(record: Mapping[str, Any], *, whole: bool = False) -> Conversation:
    """A `messages` record's conversation up to its last user turn."""
    messages = text_messages(role_turns(record, "messages", "role", "content", ROLES), whole=whole)
    return Conversation(messages=messages, source_id=record_id(record, *ID_FIELDS))
