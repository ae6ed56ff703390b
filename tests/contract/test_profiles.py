"""Markers resolve by token string from the real fixture tokenizers; unusable markers fail loudly."""

from __future__ import annotations

import dataclasses

import pytest

from eagle3_synth.errors import ConfigError, MarkerError
from eagle3_synth.contract.profiles import PROFILES, detect_profile, get_profile, resolve_markers


def test_auto_detects_each_family(kimi_tokenizer, qwen_tokenizer):
    assert detect_profile(kimi_tokenizer)[0] == "kimi_k2"
    assert detect_profile(qwen_tokenizer)[0] == "qwen3"
    assert get_profile("auto", kimi_tokenizer).name == "kimi_k2"


def test_kimi_markers_are_the_tokenizers_ids(kimi_tokenizer, kimi_markers):
    ids = kimi_tokenizer.convert_tokens_to_ids
    assert kimi_markers.reasoning_close.id == ids("</think>")
    assert kimi_markers.tool_section_begin.id == ids("<|tool_calls_section_begin|>")
    # <|im_end|> ends a turn even though Kimi's eos_token is [EOS]; both stop generation.
    assert kimi_tokenizer.eos_token == "[EOS]"
    assert ids("<|im_end|>") in kimi_markers.stop_ids and ids("[EOS]") in kimi_markers.stop_ids


def test_qwen_has_no_section_marker(qwen_tokenizer, qwen_markers):
    assert not qwen_markers.tool_section_begin
    assert qwen_markers.tool_call_begin.id == qwen_tokenizer.convert_tokens_to_ids("<tool_call>")


def test_missing_marker_names_it(qwen_tokenizer):
    with pytest.raises(MarkerError, match=r"<\|tool_calls_section_begin\|>"):
        resolve_markers(PROFILES["kimi_k2"], qwen_tokenizer)


def test_marker_that_is_not_one_token_names_it(kimi_tokenizer):
    # "functions" is in the vocabulary only as ordinary text split into several BPE pieces.
    profile = dataclasses.replace(PROFILES["kimi_k2"], tool_call_end=("functions.get_weather",))
    with pytest.raises(MarkerError, match="tool_call_end 'functions.get_weather'"):
        resolve_markers(profile, kimi_tokenizer)


def test_unknown_profile_is_a_config_error(kimi_tokenizer):
    with pytest.raises(ConfigError, match="unknown profile 'llama'"):
        get_profile("llama", kimi_tokenizer)
