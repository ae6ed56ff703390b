"""Markers of several tokens, user profiles from YAML, and the merge-tolerant edges, on a real tokenizer.

The Kimi-style fixture vocabulary holds `<|tool_call_argument_begin|>` as a special token and
`functions.` / `:0` as ordinary BPE text, so a profile can define a marker that mixes both -- the
shape of gpt-oss's `<|channel|>analysis<|message|>` and DSML's `</｜DSML｜invoke>`.
"""

from __future__ import annotations

import pytest

from eagle3_synth.contract.markers import Marker, MarkerPattern, Vocabulary, find_marker, resolve_pattern
from eagle3_synth.contract.row import find_boundaries, prompt_opens_reasoning
from eagle3_synth.errors import ConfigError, MarkerError
from eagle3_synth.contract.profiles import MarkerIds, choose_profile, load_profile_file, profile_from_dict, resolve_markers

SEQUENCE_PROFILE = """
kimi_sequences:
  family: a test family whose call markers are several tokens
  reasoning_open: ["<think>"]
  reasoning_close: ["</think>"]
  tool_call_begin: ["<|tool_call_begin|>functions."]
  tool_call_end: ["<|tool_call_end|>"]
  stop: ["<|im_end|>"]
  single_token_markers: false
  detect: {vocab: ["<|im_middle|>"], template: ["tool_declare"]}
"""


@pytest.fixture()
def profile_file(tmp_path):
    path = tmp_path / "profiles.yaml"
    path.write_text(SEQUENCE_PROFILE, encoding="utf-8")
    return str(path)


def encode(tokenizer, *parts: str) -> list[int]:
    ids: list[int] = []
    for part in parts:
        ids.extend(tokenizer.encode(part, add_special_tokens=False))
    return ids


def test_a_profile_file_defines_a_family_without_code(profile_file, kimi_tokenizer):
    profile, why = choose_profile("auto", kimi_tokenizer, profile_file)
    assert profile.name == "kimi_sequences"
    assert why == "--profile auto: the vocabulary has <|im_middle|> and the chat template contains 'tool_declare'"
    markers = resolve_markers(profile, kimi_tokenizer)
    begin = markers.tool_call_begin.alternatives[0]
    assert len(begin.slots) == len(encode(kimi_tokenizer, "<|tool_call_begin|>functions.")) > 1
    # The recorded form reads back to the same markers (run directories keep them as JSON).
    assert MarkerIds.from_dict(markers.to_json()) == markers
    # ... and the definition itself, so tools need no profile file later.
    assert profile_from_dict(profile.name, profile.to_json(), "run.json") == profile


def test_a_call_of_several_tokens_spans_first_to_last_token(profile_file, kimi_tokenizer):
    profile, _ = choose_profile("kimi_sequences", kimi_tokenizer, profile_file)
    markers = resolve_markers(profile, kimi_tokenizer)
    output = encode(kimi_tokenizer, "plan", "</think>", "<|tool_calls_section_begin|>", "<|tool_call_begin|>",
                    "functions.get_weather:0", "<|tool_call_argument_begin|>", '{"city": "Paris"}',
                    "<|tool_call_end|>", "<|tool_calls_section_end|>", "<|im_end|>")
    b = find_boundaries(output, markers, prompt_opens=True, finish_reason="stop")
    begin = output.index(kimi_tokenizer.convert_tokens_to_ids("<|tool_call_begin|>"))
    end = output.index(kimi_tokenizer.convert_tokens_to_ids("<|tool_call_end|>"))
    assert [(c.start, c.end) for c in b.tool_calls] == [(begin, end)]
    # A call-begin special token NOT followed by `functions.` is not this family's call.
    other = encode(kimi_tokenizer, "</think>", "<|tool_call_begin|>", "other:0", "<|tool_call_end|>", "<|im_end|>")
    assert find_boundaries(other, markers, prompt_opens=True, finish_reason="stop").tool_calls == ()


def test_a_trailing_text_edge_matches_when_bpe_merges_it_with_what_follows(kimi_tokenizer):
    vocab = Vocabulary(kimi_tokenizer)
    pattern = resolve_pattern(vocab, "<|tool_call_argument_begin|>{", what="marker", single_token=False)
    token_of = {i: t for t, i in kimi_tokenizer.get_vocab().items()}
    brace = kimi_tokenizer.encode("{", add_special_tokens=False)
    assert len(brace) == 1
    merged = [i for i in pattern.slots[-1] if i != brace[0]]
    assert merged and all(token_of[i].startswith("{") for i in merged)  # `{"` and friends
    text = '<|tool_call_argument_begin|>{"city": "Paris"}'
    ids = encode(kimi_tokenizer, text)
    assert ids[1] != brace[0]  # in the output the brace merged with the quote after it
    marker = Marker((pattern,))
    assert find_marker(ids, marker) == (0, 1)
    # The same marker encoded on its own, looked for as a plain id sequence, would miss it.
    assert find_marker(ids, Marker((MarkerPattern("", tuple(frozenset((i,)) for i in encode(kimi_tokenizer, "<|tool_call_argument_begin|>{"))),))) == (-1, -1)


def test_prompt_opens_reasoning_with_a_marker_of_several_tokens(profile_file, kimi_tokenizer):
    profile = load_profile_file(profile_file)["kimi_sequences"]
    data = profile.to_json()
    data["reasoning_open"] = ["<|im_middle|><think>"]
    markers = resolve_markers(profile_from_dict("opening", data, "test"), kimi_tokenizer)
    opened = encode(kimi_tokenizer, "<|im_assistant|>assistant", "<|im_middle|>", "<think>")
    closed = encode(kimi_tokenizer, "<|im_assistant|>assistant", "<|im_middle|>", "<think>", "</think>")
    assert prompt_opens_reasoning(opened, markers)
    assert not prompt_opens_reasoning(closed, markers)


@pytest.mark.parametrize("text, message", [
    ("not yaml: [", "not valid YAML"),
    ("p: {reasoning_open: x}", "profile 'p': missing reasoning_close, tool_call_begin, tool_call_end, stop"),
    ("p: {reasoning_open: x, reasoning_close: y, tool_call_begin: a, tool_call_end: b, stop: c, colour: red}",
     "profile 'p': unknown key(s) ['colour']"),
    ("p: {reasoning_open: [1], reasoning_close: y, tool_call_begin: a, tool_call_end: b, stop: c}",
     "profile 'p', key reasoning_open: expected a marker string or a list of them, got [1]"),
])
def test_a_bad_profile_file_is_named(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=r"--profile-file .*bad\.yaml") as error:
        load_profile_file(path)
    assert message in str(error.value)


def test_a_stop_marker_must_be_one_token(tmp_path, kimi_tokenizer):
    data = profile_from_dict("kimi_sequences", __import__("yaml").safe_load(SEQUENCE_PROFILE)["kimi_sequences"],
                             "test").to_json()
    data["stop"] = ["functions.stop"]
    with pytest.raises(MarkerError, match="marker stop 'functions.stop' is not in the tokenizer's vocabulary"):
        resolve_markers(profile_from_dict("p", data, "test"), kimi_tokenizer)


def test_auto_names_the_profile_file_option_when_nothing_matches(qwen_tokenizer, tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(SEQUENCE_PROFILE.replace("tool_declare", "no such text"), encoding="utf-8")
    profile, _ = choose_profile("auto", qwen_tokenizer, str(path))
    assert profile.name == "qwen3"  # the user's profile does not match; the built-ins still do
    with pytest.raises(ConfigError, match="unknown profile 'nope'.*kimi_sequences"):
        choose_profile("nope", qwen_tokenizer, str(path))
