"""Every fixture source record templates on every fixture template that behaves like a real one.

The fixture templates (tests/fixtures/_fixture_templates*.py) reproduce what the real models' templates
do with tool-call history: Qwen3 and DeepSeek-V3.1 need `content: ""` beside calls, DeepSeek-V3.1/R1
concatenate `arguments` as a string, their llama.cpp copies `tojson` it, DeepSeek-V4, Qwen3-Coder,
GLM and MiniMax iterate an object, DeepSeek-V3.1/R1 never render `tools`.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
from datasets import load_dataset

from eagle3_synth.prompts.templating import ChatTokenizer, load_tokenizer
from eagle3_synth.cli import main
from eagle3_synth.prompts.configs import BUILTIN_CONFIGS
from eagle3_synth.prompts.conversation import Conversation
from eagle3_synth.contract.profiles import PROFILES, choose_profile

from ..support.families import EXPECTED, TOKENIZERS
from ..support.prompt_cases import fixture_files, options, prepare

@pytest.fixture(scope="module")
def tokenizers():
    return {name: load_tokenizer(str(TOKENIZERS / name)) for name in EXPECTED}


def chat_for(tokenizer, profile_name: str) -> ChatTokenizer:
    return ChatTokenizer(tokenizer, profile=PROFILES[profile_name], template_date="2026-12-01")


@pytest.mark.parametrize("folder", sorted(EXPECTED))
def test_each_template_gets_its_family_and_form(folder, tokenizers):
    family, (content, arguments), rendered = EXPECTED[folder]
    tokenizer = tokenizers[folder]
    profile, why = choose_profile("auto", tokenizer)
    assert profile.name == family, why
    chat = chat_for(tokenizer, family)
    assert (chat.form.call_content, chat.form.arguments) == (content, arguments), chat.probe.lines()
    assert chat.form.tools_rendered is rendered
    assert chat.form.tools_visible  # every built-in family shows its tools, one way or the other
    assert chat.probe.faithful and chat.probe.renders_calls


def test_the_probe_says_why_a_form_was_refused(tokenizers):
    probe = chat_for(tokenizers["deepseek_v31"], "deepseek").probe
    outcomes = dict(probe.outcomes)
    assert "UndefinedError" in outcomes["content as_given, arguments string"]
    assert "can only concatenate str (not \"dict\") to str" in outcomes["content empty, arguments object"]
    assert outcomes["content empty, arguments string"] == "ok"
    llama_cpp = dict(chat_for(tokenizers["deepseek_v31_tojson"], "deepseek").probe.outcomes)
    assert llama_cpp["content as_given, arguments string"].startswith("double-encoded")


def has_tool_history(prompt) -> bool:
    return any(m.get("tool_calls") for m in prompt.messages) or any(m["role"] == "tool" for m in prompt.messages)


def kept_with_tool_history(folder: str, tokenizer) -> tuple[set[tuple[str, int]], list[dict]]:
    """(config, sample_id) of every kept prompt with an earlier call or tool result, and the rejects."""
    family = EXPECTED[folder][0]
    chat = chat_for(tokenizer, family)
    found, all_rejects = set(), []
    for config in sorted(BUILTIN_CONFIGS):
        kept, rejects = prepare(options(config, tokenizer=TOKENIZERS / folder), chat)
        found |= {(config, p.sample_id) for p in kept if has_tool_history(p)}
        all_rejects += rejects
    return found, all_rejects


@pytest.mark.parametrize("folder", sorted(EXPECTED))
def test_no_fixture_source_record_is_lost_to_the_template(folder, tokenizers):
    found, rejects = kept_with_tool_history(folder, tokenizers[folder])
    lost = [r for r in rejects if r["reason"] in ("template_error", "tools_not_rendered")]
    assert not lost, lost
    # What is rejected is the record's own fault (or a control token of this vocabulary).
    assert set(Counter(r["reason"] for r in rejects)) <= {"unparseable", "control_token", "duplicate"}
    # The same records with tool history as on the lenient Kimi template, which takes every form.
    reference, _ = kept_with_tool_history("kimi_k25", tokenizers["kimi_k25"])
    assert len(reference) >= 6 and found == reference


def test_deepseek_sees_its_tools_as_the_model_card_describes_them(tokenizers):
    tokenizer = tokenizers["deepseek_v31"]
    chat = chat_for(tokenizer, "deepseek")
    kept, _ = prepare(options("B1_glaive", tokenizer=TOKENIZERS / "deepseek_v31"), chat)
    prompt = next(p for p in kept if p.tools)
    text = tokenizer.decode(prompt.prompt_ids)
    name = prompt.tools[0]["function"]["name"]
    system = prompt.messages[0]["content"]
    assert text.startswith(f"<｜begin▁of▁sentence｜>{system}\n\n## Tools\nYou have access to the following tools:\n\n"
                           f"### {name}\nDescription: ")
    assert "IMPORTANT: ALWAYS adhere to this exact format for tool use:\n<｜tool▁calls▁begin｜>" in text
    # The stored conversation is the one given: the description lives only in the ids.
    assert "## Tools" not in json.dumps(prompt.messages, ensure_ascii=False)


def test_tools_a_model_cannot_see_are_rejected_by_name(tmp_path, capsys):
    profile = tmp_path / "profiles.yaml"
    definition = {k: v for k, v in PROFILES["deepseek"].to_json().items() if k != "tool_description"}
    profile.write_text(json.dumps({"deepseek_plain": definition}), encoding="utf-8")
    out = tmp_path / "ds"
    replay = tmp_path / "replay.jsonl"
    replay.write_text("".join(json.dumps({"sample_id": i, "output_ids": [5, 6]}) + "\n" for i in range(16)))
    code = main(["build", "B1_glaive", "--model", str(TOKENIZERS / "deepseek_v31"), "--profile", "deepseek_plain",
                 "--profile-file", str(profile), "--engine", "replay", "--replay", str(replay),
                 "--source-file", fixture_files("B1_glaive")[0], "--out", str(out)])
    assert code == 0
    rejects = [json.loads(line) for line in open(out / ".runs" / "B1_glaive" / "rejects.jsonl")]
    invisible = [r for r in rejects if r["reason"] == "tools_not_rendered"]
    assert invisible and all("the model would not see its" in r["detail"] for r in invisible)
    rows = load_dataset(str(out), "B1_glaive", split="train")
    assert all(tools == "" for tools in rows["tools"])  # only prompts without tools were kept


@pytest.mark.parametrize("folder", ["deepseek_v31", "qwen3", "deepseek_v4", "gpt_oss"])
def test_a_build_on_a_real_like_template_validates(folder, tmp_path, capsys, tokenizers):
    out = tmp_path / "ds"
    replay = tmp_path / "replay.jsonl"
    stop = tokenizers[folder].convert_tokens_to_ids(PROFILES[EXPECTED[folder][0]].stop_tokens[0])
    replay.write_text("".join(json.dumps({"sample_id": i, "output_ids": [5, 6, stop]}) + "\n" for i in range(40)))
    args = ["--model", str(TOKENIZERS / folder), "--engine", "replay", "--replay", str(replay)]
    for config in ("B1_glaive", "B2_hermes_fc"):
        assert main(["build", config, *args, "--source-file", *fixture_files(config)[:1], "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["validate", str(out)]) == 0, capsys.readouterr().out
    info = json.loads((out / "B1_glaive" / "run_info.json").read_text())
    assert info["fields"]["template"]["message_form"]["call_content"] == EXPECTED[folder][1][0]


def test_a_date_writing_template_is_pinned_per_run(tmp_path, capsys, monkeypatch, tokenizers):
    """gpt-oss writes today's date into its system message: a run records the date it templated
    with, a resume the next day uses it again, and validate re-templates with it."""
    from eagle3_synth.run import generate as pipeline  # where the run reads today's date

    out = tmp_path / "ds"
    replay = tmp_path / "replay.jsonl"
    stop = tokenizers["gpt_oss"].convert_tokens_to_ids("<|return|>")
    replay.write_text("".join(json.dumps({"sample_id": i, "output_ids": [5, stop]}) + "\n" for i in range(6)))
    args = ["build", "B3_ultrachat", "--model", str(TOKENIZERS / "gpt_oss"), "--engine", "replay",
            "--replay", str(replay), "--out", str(out)]
    monkeypatch.setattr(pipeline, "today", lambda: "2026-01-01")
    assert main(args) == 0
    monkeypatch.setattr(pipeline, "today", lambda: "2026-01-02")
    assert main(args) == 0  # the same run: not refused for "different settings"
    assert "already in" in capsys.readouterr().out
    rows = load_dataset(str(out), "B3_ultrachat", split="train")
    assert all("Current date: 2026-01-01" in tokenizers["gpt_oss"].decode(ids) for ids in rows["prompt_ids"])
    assert main(["validate", str(out)]) == 0
    capsys.readouterr()
    assert main(["validate", str(out), "--template-date", "2026-01-02"]) == 1
    assert "prompt_mismatch" in capsys.readouterr().out


def test_earlier_reasoning_goes_in_the_familys_field(tokenizers):
    """Adapters put an earlier turn's reasoning in `reasoning_content`; gpt-oss reads `thinking`."""
    tokenizer = tokenizers["gpt_oss"]
    chat = chat_for(tokenizer, "gpt_oss")
    assert chat.form.reasoning_field == "thinking"
    conversation = Conversation([
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": None, "reasoning_content": "I should look it up.", "tool_calls": [
            {"id": "c0", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
        {"role": "tool", "tool_call_id": "c0", "name": "get_weather", "content": "cold"}])
    text = tokenizer.decode(chat.prompt_ids(conversation))
    assert "<|channel|>analysis<|message|>I should look it up.<|end|>" in text
    assert "reasoning_content" in conversation.messages[1]  # the conversation itself is not changed
