"""Source adapters: one record of a public dataset -> the Conversation a chat template renders.

One module per source *format*, each a pure function `convert(record, whole=False) -> Conversation`
that keeps the conversation up to its last user turn (the dataset's own final answer is dropped: the
target model writes a new one), or with `whole` all of it (on-policy conversations replace every
assistant turn, `prompts/turns.py`), and raises `PromptError` naming what it cannot parse. Adapters are chosen
by name from `ADAPTERS` (the `adapter` field of a config); readers of whole sources are in
`eagle3_synth.sources.readers`.

Each module's `VERSION` goes into the run fingerprint: bump it when a conversion changes, so a run
prepared by the old rules is never mixed with prompts made by the new ones.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from eagle3_synth.prompts.conversation import Conversation, record_id
from eagle3_synth.errors import ConfigError, PromptError
from eagle3_synth.prompts.adapters import glaive
from eagle3_synth.prompts.adapters import hermes
from eagle3_synth.prompts.adapters import messages
from eagle3_synth.prompts.adapters import opencodereasoning
from eagle3_synth.prompts.adapters import openthoughts
from eagle3_synth.prompts.adapters import sharegpt


@dataclass(frozen=True)
class Adapter:
    name: str
    version: int
    summary: str
    id_fields: tuple[str, ...]
    _convert: Callable[..., Conversation]

    def convert(self, record: Any, *, whole: bool = False) -> Conversation:
        """The record's conversation (`whole`: with the turns after its last user turn); PromptError
        if it is not an object or cannot be parsed."""
        if not isinstance(record, Mapping):
            raise PromptError(f"record is a {type(record).__name__}, not an object")
        return self._convert(record, whole=whole)

    def source_id(self, record: Any) -> str:
        """The record's id in its dataset, read even when conversion fails (for the rejects file)."""
        return record_id(record, *self.id_fields) if isinstance(record, Mapping) else ""


def _adapter(name: str, module: ModuleType) -> Adapter:
    summary = (module.__doc__ or "").strip().splitlines()[0]
    return Adapter(name=name, version=module.VERSION, summary=summary, id_fields=module.ID_FIELDS,
                   _convert=module.convert)


ADAPTERS: dict[str, Adapter] = {
    name: _adapter(name, module)
    for name, module in (
        ("glaive", glaive),
        ("hermes", hermes),
        ("messages", messages),
        ("openthoughts", openthoughts),
        ("sharegpt", sharegpt),
        ("opencodereasoning", opencodereasoning),
    )
}


def get_adapter(name: str) -> Adapter:
    try:
        return ADAPTERS[name]
    except KeyError:
        raise ConfigError(f"unknown adapter {name!r}; known adapters: {', '.join(ADAPTERS)}") from None


__all__ = ["ADAPTERS", "Adapter", "get_adapter"]
