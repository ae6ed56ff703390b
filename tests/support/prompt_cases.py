"""Prompt-preparation cases on the fixture sources: a plan with the settings beside it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from eagle3_synth.errors import PromptError
from eagle3_synth.prompts.adapters import get_adapter
from eagle3_synth.prompts.configs import BUILTIN_CONFIGS, get_config
from eagle3_synth.prompts.conversation import Conversation
from eagle3_synth.prompts.readers import iter_source_files
from eagle3_synth.prompts.prepare import Preparation, max_prompt_tokens, prepare_prompts
from eagle3_synth.prompts.selection import PromptPlan, PromptSelection
from eagle3_synth.prompts.templating import ChatTokenizer

from ..conftest import FIXTURES, KIMI_TOKENIZER


SOURCES = FIXTURES / "sources"


def fixture_files(config: str) -> list[str]:
    return sorted(str(p) for p in (SOURCES / config).iterdir())


@dataclass(frozen=True)
class Case:
    """A prompt plan with the settings prompt preparation takes beside it."""

    plan: PromptPlan
    max_prompt_tokens: int | None = None
    preparation: Preparation = Preparation()


def options(config: str, files: list[str] | None = None, tokenizer: Path = KIMI_TOKENIZER, *,
            selection: PromptSelection | None = None, limit: int | None = None, context_length: int | None = None,
            max_new_tokens: int = 10_240, strict: bool = False, workers: int | None = 1, **_: object) -> Case:
    selection = selection or PromptSelection(source_files=tuple(files or fixture_files(config)))
    return Case(plan=PromptPlan(config=get_config(config), selection=selection, limit=limit),
                max_prompt_tokens=max_prompt_tokens(context_length, max_new_tokens),
                preparation=Preparation(strict=strict, workers=workers, tokenizer_path=str(tokenizer)))


def prepare(case: Case, tokenizer) -> tuple[list, list]:
    """`prepare_prompts` of the case, with a tokenizer (its template probed) or a ChatTokenizer."""
    chat = tokenizer if isinstance(tokenizer, ChatTokenizer) else ChatTokenizer(tokenizer)
    return prepare_prompts(case.plan, chat, max_prompt_tokens=case.max_prompt_tokens, preparation=case.preparation)


def write_replay(path: Path, tokenizer, count: int) -> None:
    ids = tokenizer.encode("Fine.", add_special_tokens=False) + [tokenizer.convert_tokens_to_ids("</think>")]
    ids += tokenizer.encode("Done.", add_special_tokens=False) + [tokenizer.convert_tokens_to_ids("<|im_end|>")]
    path.write_text("".join(json.dumps({"sample_id": i, "output_ids": ids}) + "\n" for i in range(count)), encoding="utf-8")


def source_conversations() -> list[Conversation]:
    """Every convertible record of every config's fixture source (tools, multi-turn, tool results)."""
    found = []
    for config in sorted(BUILTIN_CONFIGS):
        adapter = get_adapter(get_config(config).adapter)
        for record in iter_source_files(fixture_files(config)):
            try:
                found.append(adapter.convert(record.record))
            except PromptError:
                continue
    return found
