"""Chat tokenization: a conversation becomes `prompt_ids` through the tokenizer's own template.

We never keep a copy of a model's template: the tokenizer renders it, with
`add_generation_prompt=True` and the template kwargs (`thinking`, `enable_thinking`, ...) passed
explicitly, so the ids are exactly what the model sees in production.

Many prompts at once (`prompt_ids_batch`): `apply_chat_template(..., tokenize=True)` is "render the
template to text, then `tokenizer(text, add_special_tokens=False)`" (transformers 5.x), so we render
each conversation and encode the texts in one batched call -- the same ids without the per-call
overhead of the tokenizer front end. Because a tokenizer with its own code (`trust_remote_code`) may
override `apply_chat_template`, the first batch is checked against the one-at-a-time call; on any
difference every later prompt goes through `apply_chat_template` itself.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from .conversation import Conversation
from .errors import PromptError

log = logging.getLogger(__name__)


def load_tokenizer(path: str, *, trust_remote_code: bool = False) -> Any:
    """Load a local tokenizer. `trust_remote_code` is opt-in only (the Kimi tokenizer needs it)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)


class ChatTokenizer:
    """Renders conversations to prompt ids with fixed template kwargs."""

    def __init__(self, tokenizer: Any, template_kwargs: Mapping[str, Any] | None = None):
        if not getattr(tokenizer, "chat_template", None):
            raise PromptError("the tokenizer has no chat_template; eagle3-synth needs the model's own template")
        self.tokenizer = tokenizer
        self.template_kwargs = dict(template_kwargs or {})
        # None until the first batch was compared with apply_chat_template(tokenize=True).
        self.batch_encoding_exact: bool | None = None

    def prompt_ids(self, conversation: Conversation) -> list[int]:
        """Ids of the templated conversation, ending with the generation prompt."""
        try:
            encoded = self.tokenizer.apply_chat_template(
                conversation.messages,
                tools=conversation.tools,
                tokenize=True,
                add_generation_prompt=True,
                **self.template_kwargs,
            )
        except Exception as exc:  # jinja errors (raise_exception in templates) name the problem
            raise PromptError(f"chat template failed: {type(exc).__name__}: {exc}") from exc
        # transformers 5 returns a BatchEncoding; older versions a plain list.
        ids = encoded["input_ids"] if isinstance(encoded, Mapping) else encoded
        return [int(i) for i in ids]

    def render(self, conversation: Conversation) -> str:
        """The templated conversation as text, ending with the generation prompt."""
        try:
            return self.tokenizer.apply_chat_template(
                conversation.messages,
                tools=conversation.tools,
                tokenize=False,
                add_generation_prompt=True,
                **self.template_kwargs,
            )
        except Exception as exc:
            raise PromptError(f"chat template failed: {type(exc).__name__}: {exc}") from exc

    def prompt_ids_batch(self, conversations: Sequence[Conversation]) -> list[list[int] | PromptError]:
        """`prompt_ids` of each conversation, in order; a conversation the template refuses gets
        its PromptError in its place instead of failing the others."""
        if self.batch_encoding_exact is False:
            return [self._one(conversation) for conversation in conversations]
        results: list[list[int] | PromptError] = []
        texts: list[str] = []
        for conversation in conversations:
            try:
                texts.append(self.render(conversation))
                results.append([])  # filled below
            except PromptError as exc:
                results.append(exc)
        if texts:
            encoded = iter(self.tokenizer(texts, add_special_tokens=False)["input_ids"])
            for i, item in enumerate(results):
                if not isinstance(item, PromptError):
                    results[i] = list(map(int, next(encoded)))
        if self.batch_encoding_exact is None and texts:
            first = next(i for i, item in enumerate(results) if not isinstance(item, PromptError))
            self.batch_encoding_exact = self._one(conversations[first]) == results[first]
            if not self.batch_encoding_exact:
                log.warning("this tokenizer's apply_chat_template is not render + encode; templating every "
                            "prompt with apply_chat_template(tokenize=True) instead (slower, same ids)")
                return [self._one(conversation) for conversation in conversations]
        return results

    def _one(self, conversation: Conversation) -> list[int] | PromptError:
        try:
            return self.prompt_ids(conversation)
        except PromptError as exc:
            return exc
