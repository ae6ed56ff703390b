"""Every fixture record of every config, converted by its adapter, against a golden file.

tests/golden/adapters/<config>.json holds, per record in reading order, the conversation the
adapter makes (messages, tools, source id) or the reason it rejects the record: a change to any
adapter shows as a readable diff of exactly the records it changes.
"""

from __future__ import annotations

import pytest

from eagle3_synth.errors import PromptError
from eagle3_synth.prompts.adapters import get_adapter
from eagle3_synth.prompts.configs import BUILTIN_CONFIGS
from eagle3_synth.prompts.readers import iter_source_files

from ..support.golden import check_golden
from ..support.prompt_cases import fixture_files


def converted(config: str) -> list[dict]:
    adapter = get_adapter(BUILTIN_CONFIGS[config].adapter)
    out = []
    for record in iter_source_files(fixture_files(config)):
        entry: dict = {"where": record.locator.rsplit("/", 1)[-1]}
        if record.error is not None:
            entry["unreadable"] = record.error.rsplit("/", 1)[-1]
        else:
            try:
                conversation = adapter.convert(record.record)
                entry.update(source_id=adapter.source_id(record.record), messages=conversation.messages,
                             tools=conversation.tools)
            except PromptError as exc:
                entry["rejected"] = str(exc)
        out.append(entry)
    return out


@pytest.mark.parametrize("config", sorted(BUILTIN_CONFIGS))
def test_adapter_output_matches_its_golden_file(config):
    check_golden(f"adapters/{config}", converted(config))
