"""opencodereasoning: nvidia/OpenCodeReasoning records (B8), config and split `split_0`.

A row is `id, input, output, source, license, dataset, split, difficulty, solution` (all strings):
`input` is the problem statement, `output` DeepSeek-R1's `<think>...</think>` + fenced Python,
`solution` the code alone. In `split_1` `input` is the placeholder `"-"` (the question lives in
BAAI/TACO or codeparrot/apps), so such rows are rejected rather than sent as a one-character prompt.

Real record (shortened):

    {"id": "0a1b2c...", "input": "You are given an array of n integers ...",
     "output": "<think>\\nOkay, ...\\n</think>\\n\\n```python\\nn = int(input())\\n...```",
     "source": "codeforces", "license": "cc-by-4.0", "dataset": "code_contests", "split": "train",
     "difficulty": "8", "solution": "n = int(input())\\n..."}

becomes `[{"role": "user", "content": "You are given an array of n integers ..."}]` with source id
`0a1b2c...`. Many rows share one problem (several traces each): the prompt preparation drops the
repeats as exact duplicates.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from eagle3_synth.prompts.conversation import Conversation, is_blank, record_id
from eagle3_synth.errors import PromptError

VERSION = 1
# Fields naming the record in its dataset, first present wins (none: the reader's row is used).
ID_FIELDS: tuple[str, ...] = ("id",)

PLACEHOLDER = "-"


def convert(record: Mapping[str, Any], *, whole: bool = False) -> Conversation:  # noqa: ARG001 - one turn
    """The problem statement as the single user turn (`whole` changes nothing: there is no other)."""
    question = record.get("input")
    if question is not None and not isinstance(question, str):
        raise PromptError("field 'input' is not a string")
    if is_blank(question):
        raise PromptError("field 'input' is missing or empty")
    if question.strip() == PLACEHOLDER:
        raise PromptError("field 'input' is the split_1 placeholder '-' "
                          "(the question is in BAAI/TACO or codeparrot/apps)")
    return Conversation(messages=[{"role": "user", "content": question}], source_id=record_id(record, *ID_FIELDS))
