"""Rollouts: each kept conversation expanded into `samples_per_prompt` first prompts, with sample ids.

A rollout is one line of prompts.jsonl: its first turn's prompt, the kwargs it is templated with
(the run's, updated by its draw from `--template-kwarg-mix`, `turns.drawn_kwargs`), its sampling
(the run's, updated by its draw from `--sampling-mix`, `turns.drawn_sampling`), and the sample
ids it owns, one per turn it may have. Ids are given in prompt-list order with no gap inside a
conversation: conversation c's rollouts start at `c + offset`, `offset` growing by each earlier
kept conversation's ids beyond its first. A run of one turn and one sample per prompt therefore
keeps `sample_id == conversation_id`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from eagle3_synth.contract.row import PreparedPrompt
from eagle3_synth.errors import PromptError
from eagle3_synth.prompts.conversation import Conversation
from eagle3_synth.prompts.hygiene import Reject
from eagle3_synth.prompts.templating import ChatTokenizer
from eagle3_synth.prompts.turns import ConversationPlan, drawn_kwargs, drawn_sampling, turn_count


class ChatTokenizers:
    """The run's ChatTokenizer, and one per other set of template kwargs (same form and date)."""

    def __init__(self, chat: ChatTokenizer):
        self.base = chat
        self._by_kwargs: dict[str, ChatTokenizer] = {self.key(chat.template_kwargs): chat}

    @staticmethod
    def key(kwargs: dict[str, Any]) -> str:
        return json.dumps(kwargs, sort_keys=True, default=str)

    def effective(self, extra: dict[str, Any]) -> dict[str, Any]:
        """The run's kwargs updated by a rollout's drawn ones."""
        return {**self.base.template_kwargs, **extra}

    def get(self, kwargs: dict[str, Any] | None) -> ChatTokenizer:
        kwargs = self.base.template_kwargs if kwargs is None else kwargs
        key = self.key(kwargs)
        if key not in self._by_kwargs:
            self._by_kwargs[key] = ChatTokenizer(self.base.tokenizer, kwargs, form=self.base.form,
                                                 template_date=self.base.template_date)
        return self._by_kwargs[key]


def iter_rollouts(
    prepared: Iterator[PreparedPrompt], plan: ConversationPlan, chats: ChatTokenizers,
    rejects: list[dict[str, Any]], *, max_prompt_tokens: int | None = None,
    too_long_reason: str = "the model's context minus max_new_tokens",
    reject: Callable[[dict[str, Any]], None] | None = None, sampling: dict[str, Any] | None = None,
) -> Iterator[PreparedPrompt]:
    """The rollouts of each kept conversation (module doc), in sample-id order; each carries
    `sampling` (the run's, `contract/row.py`) updated by its draw from the plan's sampling mix.

    A rollout whose drawn kwargs differ from the run's is templated again with them; should that
    prompt be refused or too long, the rollout is rejected (appended to `rejects`, with `reject`
    called on it for logging) and its ids stay unused.
    """
    offset = 0
    placed = len(rejects)

    def place_rejects() -> None:
        """Conversations rejected since the last kept one take the id their rollouts would have had."""
        nonlocal placed
        for record in rejects[placed:]:
            if "conversation_id" not in record:
                record["conversation_id"] = record["sample_id"]
                record["sample_id"] += offset
        placed = len(rejects)

    for prompt in prepared:
        place_rejects()
        conversation_id = prompt.sample_id
        turns = turn_count(prompt.script)
        first = conversation_id + offset
        for sample_index in range(plan.samples_per_prompt):
            kwargs = chats.effective(drawn_kwargs(plan, conversation_id, sample_index))
            sample_id = first + sample_index * turns
            ids: list[int] | Reject = prompt.prompt_ids
            if kwargs != chats.base.template_kwargs:
                ids = templated(chats.get(kwargs), Conversation(prompt.messages, prompt.tools), max_prompt_tokens,
                                too_long_reason)
            if isinstance(ids, Reject):
                record = {"sample_id": sample_id, "source_id": prompt.source_id, "conversation_id": conversation_id,
                          "sample_index": sample_index, "reason": ids.reason,
                          "detail": f"sample_id {sample_id} (template kwargs {kwargs}): {ids}"}
                rejects.append(record)
                if reject is not None:
                    reject(record)
                continue
            yield replace(prompt, sample_id=sample_id, prompt_ids=ids, conversation_id=conversation_id, turns=turns,
                          sample_index=sample_index, template_kwargs=kwargs,
                          sampling=None if sampling is None else {**sampling, **drawn_sampling(plan, conversation_id,
                                                                                                sample_index)})
        offset += plan.samples_per_prompt * turns - 1
        placed = len(rejects)
    place_rejects()


def templated(chat: ChatTokenizer, conversation: Conversation, max_prompt_tokens: int | None,
              too_long_reason: str = "the model's context minus max_new_tokens") -> list[int] | Reject:
    """A prompt templated after preparation (a rollout's in its drawn kwargs, a later turn's), or
    why it cannot be kept, with hygiene's reasons (`template_error`, `too_long`)."""
    try:
        ids = chat.prompt_ids(conversation)
    except PromptError as exc:
        return Reject("template_error", str(exc))
    if max_prompt_tokens is not None and len(ids) > max_prompt_tokens:
        return Reject("too_long", f"{len(ids)} prompt tokens > {max_prompt_tokens} ({too_long_reason})")
    return ids
