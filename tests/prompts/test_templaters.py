"""Fast templating gives exactly the ids of `apply_chat_template(..., tokenize=True)`.

Batched encoding (render each conversation, encode the texts in one call) and the worker pool of
prompt preparation must never change an id, a reject or a sample id; these tests hold them to the
one-at-a-time reference on the fixture tokenizers and the fixture sources of every config.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterator

import pytest

from eagle3_synth.prompts import prepare as prompt_prep
from eagle3_synth.prompts.templating import ChatTokenizer
from eagle3_synth.prompts.conversation import Conversation
from eagle3_synth.errors import ConfigError, PromptError
from eagle3_synth.prompts.forms import MessageForm

from ..conftest import KIMI_TOKENIZER, QWEN_TOKENIZER
from ..support.prompt_cases import options, prepare, source_conversations

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Wetter für eine Stadt",
                                             "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}

HANDWRITTEN = [
    Conversation([{"role": "user", "content": "日本語で答えて：東京の天気は？ 🌧️"}]),
    Conversation([{"role": "system", "content": "Réponds en français, s’il te plaît."},
                  {"role": "user", "content": "Zürich → Genève: wie weit? \u2028 (mit Zeilentrenner)"}], [WEATHER]),
    Conversation([
        {"role": "user", "content": "Weather in Zürich?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "functions.get_weather:0", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Zürich"}'}}]},
        {"role": "tool", "tool_call_id": "functions.get_weather:0", "name": "get_weather", "content": "12°C, Nebel"},
        {"role": "assistant", "content": "Es sind 12°C."},
        {"role": "user", "content": "Und morgen? مرحبا  שלום"},
    ], [WEATHER]),
    Conversation([{"role": "user", "content": "   leading and trailing spaces\n\n"}]),
]


def fixture_conversations() -> list[Conversation]:
    """Every convertible record of every config's fixture source, and the handwritten edge cases."""
    return source_conversations() + HANDWRITTEN


def reference(tokenizer, conversation: Conversation, form=None, **kwargs) -> list[int]:
    """One conversation through apply_chat_template(tokenize=True), in the message form the chat
    tokenizer probed for this template (the real Qwen3-like one needs `content: ""` beside calls)."""
    messages, tools = (form or MessageForm()).apply(conversation)
    return list(tokenizer.apply_chat_template(messages, tools=tools, tokenize=True,
                                              add_generation_prompt=True, **kwargs)["input_ids"])


@pytest.mark.parametrize("which,template_kwargs", [
    ("kimi", {}), ("kimi", {"thinking": False}), ("qwen", {}), ("qwen", {"enable_thinking": False}),
])
def test_batched_ids_equal_apply_chat_template(which, template_kwargs, kimi_tokenizer, qwen_tokenizer):
    tokenizer = kimi_tokenizer if which == "kimi" else qwen_tokenizer
    conversations = fixture_conversations()
    assert len(conversations) > 30 and any(c.tools for c in conversations)
    assert any(sum(m["role"] == "user" for m in c.messages) > 1 for c in conversations)
    chat = ChatTokenizer(tokenizer, template_kwargs)
    batched = chat.prompt_ids_batch(conversations)
    assert chat.batch_encoding_exact is True
    assert batched == [reference(tokenizer, c, chat.form, **template_kwargs) for c in conversations]
    assert all(type(i) is int for ids in batched for i in ids)


def refusing(tokenizer):
    """The tokenizer with a template that raises (as real templates do) on a system message."""
    strict = copy.deepcopy(tokenizer)
    strict.chat_template = ("{% if messages[0]['role'] == 'system' %}{{ raise_exception('no system messages, "
                            "please') }}{% endif %}" + tokenizer.chat_template)
    return strict


def test_a_refused_conversation_gets_its_error_in_place(kimi_tokenizer):
    chat = ChatTokenizer(refusing(kimi_tokenizer))
    results = chat.prompt_ids_batch(HANDWRITTEN)
    assert isinstance(results[1], PromptError) and "no system messages, please" in str(results[1])
    assert [r for i, r in enumerate(results) if i != 1] == [reference(kimi_tokenizer, c)
                                                           for i, c in enumerate(HANDWRITTEN) if i != 1]


class PostProcessing:
    """A tokenizer whose own `apply_chat_template` does more than render + encode when it tokenizes
    (as a `trust_remote_code` tokenizer may): it appends one more id."""

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)

    def __call__(self, *args, **kwargs):
        return self._tokenizer(*args, **kwargs)

    def apply_chat_template(self, messages, **kwargs):
        out = self._tokenizer.apply_chat_template(messages, **kwargs)
        return {"input_ids": [*out["input_ids"], 7]} if kwargs.get("tokenize") else out


def test_a_tokenizer_that_is_not_render_plus_encode_is_templated_one_by_one(kimi_tokenizer, caplog):
    tokenizer = PostProcessing(kimi_tokenizer)
    chat = ChatTokenizer(tokenizer)
    with caplog.at_level(logging.WARNING):
        first = chat.prompt_ids_batch(HANDWRITTEN[:2])
        later = chat.prompt_ids_batch(HANDWRITTEN[2:])
    assert chat.batch_encoding_exact is False and "is not render + encode" in caplog.text
    assert first + later == [reference(kimi_tokenizer, c) + [7] for c in HANDWRITTEN]


# -- prompt preparation: any number of workers, the same prompt list ---------------------------------

def prepared_with(kimi_tokenizer, config: str, workers: int | None, tokenizer_path=KIMI_TOKENIZER, **changes):
    opts = options(config, tokenizer=tokenizer_path, workers=workers, **changes)
    prepared, rejects = prepare(opts, kimi_tokenizer)
    return [(p.sample_id, p.source_id, p.prompt_ids, p.messages, p.tools) for p in prepared], rejects


def counting_candidates(monkeypatch) -> list[int]:
    """Count the candidates prompt preparation takes from the source."""
    taken = [0]
    original = prompt_prep.candidates

    def counted(*args, **kwargs) -> Iterator:
        for candidate in original(*args, **kwargs):
            taken[0] += 1
            yield candidate

    monkeypatch.setattr(prompt_prep, "candidates", counted)
    return taken


def test_chunks_take_no_more_candidates_than_one_at_a_time(kimi_tokenizer, monkeypatch):
    # B1's fixture has records with `<|im_end|>` in user text: rejected as control_token.
    taken = counting_candidates(monkeypatch)
    prepared, rejects = prepared_with(kimi_tokenizer, "B1_glaive", 1, limit=5)
    assert len(prepared) == 5 and rejects
    assert taken[0] == len(prepared) + len(rejects)  # stopped at the 5th kept prompt, read no further
    everything, all_rejects = prepared_with(kimi_tokenizer, "B1_glaive", 1)
    assert everything[:5] == prepared and [r for r in all_rejects if r["sample_id"] < prepared[-1][0]] == rejects


def test_a_worker_pool_prepares_the_same_prompt_list(kimi_tokenizer, monkeypatch):
    monkeypatch.setattr(prompt_prep, "CHUNK", 3)  # many chunks in flight over a small source
    reference_list = prepared_with(kimi_tokenizer, "B1_glaive", 1)
    assert reference_list[1], "the fixture should have rejects"
    assert prepared_with(kimi_tokenizer, "B1_glaive", 2) == reference_list
    capped = prepared_with(kimi_tokenizer, "B1_glaive", 2, limit=4)
    assert capped[0] == reference_list[0][:4]


def test_auto_moves_to_a_pool_past_the_threshold(kimi_tokenizer, monkeypatch, caplog):
    monkeypatch.setattr(prompt_prep, "POOL_MIN_PROMPTS", 4)
    monkeypatch.setattr(prompt_prep, "CHUNK", 2)
    monkeypatch.setattr(prompt_prep, "_available_cores", lambda: 1)
    with caplog.at_level(logging.INFO):
        assert prepared_with(kimi_tokenizer, "B1_glaive", None) == prepared_with(kimi_tokenizer, "B1_glaive", 1)
    assert "worker processes" not in caplog.text  # one core: a pool would only slow it down
    monkeypatch.setattr(prompt_prep, "_available_cores", lambda: 16)
    monkeypatch.setattr(prompt_prep, "MAX_AUTO_WORKERS", 2)
    with caplog.at_level(logging.INFO):
        auto = prepared_with(kimi_tokenizer, "B1_glaive", None)
    assert "templating prompts in 2 worker processes" in caplog.text
    assert auto == prepared_with(kimi_tokenizer, "B1_glaive", 1)


def test_workers_that_disagree_or_fail_fall_back_to_this_process(kimi_tokenizer, tmp_path, caplog):
    expected = prepared_with(kimi_tokenizer, "B1_glaive", 1)
    with caplog.at_level(logging.WARNING):
        # Workers load the tokenizer from the path: another tokenizer gives other ids.
        assert prepared_with(kimi_tokenizer, "B1_glaive", 2, tokenizer_path=QWEN_TOKENIZER) == expected
    assert "the workers' templating differs from this process's" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert prepared_with(kimi_tokenizer, "B1_glaive", 2, tokenizer_path=tmp_path / "missing") == expected
    assert "a worker process failed" in caplog.text


def test_bad_worker_count_is_named(kimi_tokenizer):
    with pytest.raises(ConfigError, match="workers must be >= 1"):
        prepared_with(kimi_tokenizer, "B1_glaive", 0)
