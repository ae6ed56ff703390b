"""What each fixture tokenizer resolves to, against a golden file per model family.

tests/golden/profiles/<folder>.json: the profile `auto` picks and why, every marker as the token
strings and ids it encodes to (and how many vocabulary tokens its merge-tolerant edges allow),
the stop ids, the message form the template's probe chose (with each form's outcome), whether
tools are rendered, and the generation prompt's last tokens for each thinking kwarg.
"""

from __future__ import annotations

import pytest

from eagle3_synth.contract.profiles import MARKER_ROLES, PROFILES, choose_profile, resolve_markers
from eagle3_synth.prompts.conversation import Conversation
from eagle3_synth.prompts.templating import ChatTokenizer, load_tokenizer

from ..support.families import EXPECTED, TOKENIZERS
from ..support.golden import check_golden


def resolved(folder: str) -> dict:
    tokenizer = load_tokenizer(str(TOKENIZERS / folder))
    profile, why = choose_profile("auto", tokenizer)
    markers = resolve_markers(profile, tokenizer)
    out: dict = {"profile": profile.name, "why": why, "markers": {}}
    for role in MARKER_ROLES:
        for pattern in getattr(markers, role).alternatives:
            ids = tokenizer.encode(pattern.text, add_special_tokens=False)
            out["markers"].setdefault(role, []).append({
                "text": pattern.text, "tokens": tokenizer.convert_ids_to_tokens(ids), "ids": ids,
                "allowed_per_position": [len(slot) for slot in pattern.slots]})
    out["stop"] = {tokenizer.convert_ids_to_tokens(i): i for i in markers.stop_ids}
    chat = ChatTokenizer(tokenizer, profile=PROFILES[profile.name], template_date="2026-12-01")
    out["message_form"] = chat.form.to_json()
    out["probe"] = chat.probe.outcomes
    hello = Conversation([{"role": "user", "content": "Hello"}])
    prompts = {"(none)": chat.prompt_ids(hello)}
    for name, values in profile.thinking_kwargs.items():
        for value in values:
            prompts[f"{name}={value}"] = ChatTokenizer(tokenizer, {name: value}, form=chat.form,
                                                      template_date="2026-12-01").prompt_ids(hello)
    out["generation_prompt_ends"] = {k: tokenizer.convert_ids_to_tokens(ids[-6:]) for k, ids in prompts.items()}
    return out


@pytest.mark.parametrize("folder", sorted(EXPECTED))
def test_profile_resolution_matches_its_golden_file(folder):
    check_golden(f"profiles/{folder}", resolved(folder))
