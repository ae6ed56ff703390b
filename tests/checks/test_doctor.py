"""`eagle3-synth doctor` on every fixture tokenizer: what it reports, and the failing cases."""

from __future__ import annotations

import json
import shutil

import pytest

from eagle3_synth.cli import main
from eagle3_synth.contract.profiles import PROFILES

from ..conftest import FIXTURES
from ..support.families import EXPECTED

TOKENIZERS = FIXTURES / "tokenizers"


def doctor(capsys, *args: str) -> tuple[int, str]:
    code = main(["doctor", *args])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.mark.parametrize("folder", sorted(EXPECTED))
def test_doctor_passes_every_fixture(folder, capsys):
    code, text = doctor(capsys, "--model", str(TOKENIZERS / folder), "--template-date", "2026-12-01")
    assert code == 0, text
    family = EXPECTED[folder][0]
    assert f"profile       {family}: {PROFILES[family].family} (--profile auto: the vocabulary has " in text
    assert "verdict: no problem found" in text
    for config in ("B1_glaive", "B8_opencodereasoning"):
        assert "samples" in text and f"{config} (" in text
    content, arguments = EXPECTED[folder][1]
    assert f"message form  call-only assistant content {content}, arguments {arguments}" in text


def test_doctor_shows_what_switches_thinking(capsys):
    code, text = doctor(capsys, "--model", str(TOKENIZERS / "deepseek_v31"), "--config", "B3_ultrachat")
    assert code == 0
    assert 'with no kwargs: ..."' in text and '<｜Assistant｜></think>"; does not open reasoning' in text
    assert 'thinking=true: ...' in text and '<｜Assistant｜><think>"; opens reasoning' in text
    assert "NOT rendered by the template (same ids with and without them); the family's documented " \
           "system-prompt tool description is used instead (deepseek_v31)" in text
    code, text = doctor(capsys, "--model", str(TOKENIZERS / "gpt_oss"), "--config", "B3_ultrachat",
                        "--template-date", "2030-05-06")
    assert "'<|channel|>analysis<|message|>' = [" in text  # a marker of several tokens, with its ids
    assert 'reasoning_effort="low": same ending; changes the prompt at token ' in text and "Reasoning: low" in text
    assert "the template writes today's date: runs pin it (this check used 2030-05-06" in text


def test_doctor_fails_when_tools_would_be_invisible(tmp_path, capsys):
    definition = {k: v for k, v in PROFILES["deepseek"].to_json().items() if k != "tool_description"}
    profiles = tmp_path / "p.yaml"
    profiles.write_text(json.dumps({"deepseek_plain": definition}), encoding="utf-8")
    code, text = doctor(capsys, "--model", str(TOKENIZERS / "deepseek_v31"), "--profile", "deepseek_plain",
                        "--profile-file", str(profiles), "--config", "B1_glaive")
    assert code == 1
    assert ("PROBLEM: the chat template ignores `tools` and profile deepseek_plain has no documented tool "
            "description: every prompt with tools would be rejected (tools_not_rendered)") in text
    assert "PROBLEM: B1_glaive: its prompts carry tools the model would not see (tools_not_rendered)" in text


def test_doctor_fails_when_no_form_renders_a_call(tmp_path, capsys):
    folder = tmp_path / "refuses-calls"
    shutil.copytree(TOKENIZERS / "qwen3", folder)
    template = (folder / "chat_template.jinja").read_text(encoding="utf-8")
    refuse = ("{%- for m in messages %}{%- if m.tool_calls is defined %}"
              "{{- raise_exception('tool calls are not supported') }}{%- endif %}{%- endfor %}")
    (folder / "chat_template.jinja").write_text(refuse + template, encoding="utf-8")
    code, text = doctor(capsys, "--model", str(folder), "--config", "B3_ultrachat")
    assert code == 1
    assert "tool calls are not supported" in text
    assert ("PROBLEM: no message form renders an assistant turn with tool calls: every prompt with tool "
            "history would be rejected (template_error)") in text


def test_doctor_fails_on_a_missing_marker(capsys):
    code, text = doctor(capsys, "--model", str(TOKENIZERS / "qwen3"), "--profile", "kimi_k2")
    assert code == 1
    assert "PROBLEM: profile 'kimi_k2': marker tool_section_begin '<|tool_calls_section_begin|>' is not in the " \
           "tokenizer's vocabulary" in text


def test_doctor_on_a_missing_folder_is_one_line(tmp_path, capsys):
    code, text = doctor(capsys, "--model", str(tmp_path / "nope"))
    assert code == 2 and text.count("\n") == 1 and f"--model {tmp_path / 'nope'}: no such folder" in text
