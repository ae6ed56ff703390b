"""Chat tokenization: a conversation becomes `prompt_ids` through the tokenizer's own template.

We never keep a copy of a model's template: the tokenizer renders it, with
`add_generation_prompt=True` and the template kwargs (`thinking`, `enable_thinking`, ...) passed
explicitly, so the ids are exactly what the model sees in production.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .conversation import Conversation
from .errors import PromptError


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
