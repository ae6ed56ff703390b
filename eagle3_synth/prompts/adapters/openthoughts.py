"""openthoughts: open-thoughts/OpenThoughts-114k `default` records (B5).

A row is `system` (one fixed prompt asking for a long thinking process between
`<|begin_of_thought|>` / `<|end_of_thought|>` and a solution between `<|begin_of_solution|>` /
`<|end_of_solution|>`) and `conversations: [{from, value}]` with `from` = user/assistant (not
human/gpt). There is no id column.

Real record (shortened):

    {"system": "Your role as an assistant involves thoroughly exploring questions through a
                systematic long thinking process ... Now, try to solve the following question
                through the above guidelines:",
     "conversations": [{"from": "user", "value": "Return your final response within \\\\boxed{}. ..."},
                       {"from": "assistant", "value": "<|begin_of_thought|>\\n\\nOkay, so I need to ..."}]}

becomes `[{"role": "system", "content": "Your role as an assistant ..."}, {"role": "user",
"content": "Return your final response within \\\\boxed{}. ..."}]`.

Rules: the `system` column is kept as the system turn (faithful to the source: it defines the
task; an empty one adds no turn); `from` is read with the ShareGPT role map, so human/gpt rows
also parse; the DeepSeek answer is dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from eagle3_synth.prompts.conversation import Conversation, is_blank, text_messages
from eagle3_synth.errors import PromptError
from eagle3_synth.prompts.adapters.sharegpt import sharegpt_turns

VERSION = 1
# Fields naming the record in its dataset, first present wins (none: the reader's row is used).
ID_FIELDS: tuple[str, ...] = ()


def convert(record: Mapping[str, Any], *, whole: bool = False) -> Conversation:
    """An OpenThoughts record's system prompt and conversation up to its last user turn."""
    system = record.get("system")
    if system is not None and not isinstance(system, str):
        raise PromptError("field 'system' is not a string")
    turns = sharegpt_turns(record)
    if not is_blank(system):
        turns.insert(0, ("system", system))
    messages = text_messages(turns, whole=whole)
    return Conversation(messages=messages)
