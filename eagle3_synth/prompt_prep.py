"""Prompt preparation: a config's prompt records become templated `PreparedPrompt`s.

Bad records are reported and skipped (or fatal under `--strict`); the `sample_id` of every other
record stays its index in the prompt list.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .chat import ChatTokenizer
from .conversation import Conversation, read_prompts_jsonl
from .errors import PromptError
from .records import PreparedPrompt

if TYPE_CHECKING:
    from .pipeline import GenerateOptions

log = logging.getLogger(__name__)


def prompt_source_identity(options: "GenerateOptions") -> dict[str, Any]:
    """What decides the prompt list, for the run fingerprint: the file's digest and the cap."""
    from .pipeline import file_digest

    return {"file": file_digest(Path(options.prompts_file)), "limit": options.limit}


def prepare_prompts(
    options: "GenerateOptions", chat: ChatTokenizer
) -> tuple[list[PreparedPrompt], list[dict[str, Any]]]:
    """Template every prompt of the config; bad ones are reported (or fatal under --strict)."""
    prepared: list[PreparedPrompt] = []
    rejects: list[dict[str, Any]] = []
    for sample_id, item in read_prompts_jsonl(options.prompts_file):
        if options.limit is not None and sample_id >= options.limit:
            break
        try:
            if isinstance(item, PromptError):
                raise item
            conversation: Conversation = item
            ids = chat.prompt_ids(conversation)
        except PromptError as exc:
            message = str(exc) if str(exc).startswith(options.prompts_file) else f"sample_id {sample_id}: {exc}"
            if options.strict:
                raise PromptError(message) from exc
            log.warning("skipping prompt: %s", message)
            rejects.append({"sample_id": sample_id, "reason": message})
            continue
        prepared.append(
            PreparedPrompt(
                sample_id=sample_id,
                source_id=conversation.source_id,
                prompt_ids=ids,
                messages=conversation.messages,
                tools=conversation.tools,
            )
        )
    return prepared, rejects
