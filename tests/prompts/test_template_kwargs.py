"""Template kwargs checked against what the chat template reads and the values the profile lists:
a typo, an impossible value or a reserved name is refused before the engine loads, and `doctor`
reports each."""

from __future__ import annotations

import json

import pytest

from eagle3_synth.cli import main
from eagle3_synth.contract.profiles import PROFILES
from eagle3_synth.errors import ConfigError, PromptError
from eagle3_synth.prompts.configs import CONFIGS, ConfigSpec, get_config
from eagle3_synth.prompts.conversation import Conversation
from eagle3_synth.prompts.hygiene import check_run_kwargs, kwarg_problems, run_kwarg_problems, template_names
from eagle3_synth.prompts.templating import ChatTokenizer, load_tokenizer

from ..conftest import FIXTURES, KIMI_TOKENIZER, TINY_MODEL
from ..support.cli_runs import run_cli, write_replay
from ..support.families import EXPECTED

TOKENIZERS = FIXTURES / "tokenizers"
CONFIG = get_config("B3_ultrachat")


def tokenizer(folder: str):
    return load_tokenizer(str(TOKENIZERS / folder))


def problems(folder: str, kwargs: dict, *, unchecked: bool = False) -> dict[str, str]:
    tok = tokenizer(folder)
    return kwarg_problems(kwargs, {}, template_names(tok), PROFILES[EXPECTED[folder][0]], unchecked=unchecked)


@pytest.mark.parametrize("folder,name,reads", [
    ("kimi_k25", "thinkng", "did you mean thinking? the kwargs it reads: thinking"),
    ("qwen3", "thinking", "did you mean enable_thinking? the kwargs it reads: content, enable_thinking, reasoning, text"),
    ("deepseek_v31", "enable_thinking", "did you mean thinking? the kwargs it reads: content, thinking"),
    ("gpt_oss", "reasoning", "did you mean reasoning_effort? the kwargs it reads: call, later, model_identity, "
                             "reasoning_effort"),
    ("deepseek_r1", "thinking", "the kwargs it reads: content"),
])
def test_a_name_the_template_does_not_read_is_refused_naming_those_it_reads(folder, name, reads):
    assert problems(folder, {name: False}) == {name: (
        f"--template-kwarg {name}: the chat template does not read '{name}', so it would change nothing; {reads} "
        f"(--template-kwarg-unchecked if it reads '{name}' another way)")}


@pytest.mark.parametrize("folder,name,value,allowed", [
    ("kimi_k25", "thinking", "maybe", "true, false"),
    ("kimi_k25", "thinking", 1, "true, false"),  # 1 == True in Python, not in a template's `is true`
    ("deepseek_v31", "thinking", "true", "true, false"),  # the string, not the boolean
    ("qwen3", "enable_thinking", None, "true, false"),
    ("gpt_oss", "reasoning_effort", "extreme", '"low", "medium", "high"'),
])
def test_a_value_the_profile_does_not_list_is_refused_naming_those_it_does(folder, name, value, allowed):
    profile = EXPECTED[folder][0]
    assert problems(folder, {name: value}) == {name: (
        f"--template-kwarg {name}={json.dumps(value)}: profile {profile} takes {name} as one of {allowed}")}
    assert problems(folder, {name: PROFILES[profile].thinking_kwargs[name][0]}) == {}


@pytest.mark.parametrize("name,why", [
    ("tools", "eagle3-synth passes messages, tools and add_generation_prompt=True itself, per prompt"),
    ("messages", "eagle3-synth passes messages, tools and add_generation_prompt=True itself, per prompt"),
    ("add_generation_prompt", "eagle3-synth passes messages, tools and add_generation_prompt=True itself, per prompt"),
    ("documents", "an argument of transformers' apply_chat_template, not a template kwarg"),
    ("continue_final_message", "an argument of transformers' apply_chat_template, not a template kwarg"),
    ("bos_token", "a special token of the tokenizer, which transformers passes to the template itself"),
    ("raise_exception", "a function or name the template's Jinja environment defines"),
])
def test_reserved_names_are_refused_even_unchecked(name, why):
    expected = {name: f"--template-kwarg {name}: a reserved name ({why})"}
    assert problems("kimi_k25", {name: []}) == expected
    assert problems("kimi_k25", {name: []}, unchecked=True) == expected


def test_a_reserved_name_really_breaks_every_prompt(kimi_tokenizer):
    """Why `tools` is refused: apply_chat_template takes it as its own argument."""
    chat = ChatTokenizer(kimi_tokenizer, {"tools": []})
    with pytest.raises(PromptError, match="got multiple values for keyword argument 'tools'"):
        chat.prompt_ids(Conversation([{"role": "user", "content": "hi"}]))


def test_unchecked_lets_a_name_through_but_not_a_value():
    assert problems("kimi_k25", {"thinkng": False}, unchecked=True) == {}
    assert "profile kimi_k2 takes thinking as one of true, false" in problems(
        "kimi_k25", {"thinking": "maybe"}, unchecked=True)["thinking"]


@pytest.mark.parametrize("folder", sorted(EXPECTED))
def test_every_kwarg_that_changes_a_fixture_prompt_is_one_the_check_takes(folder):
    """No false refusal: each thinking kwarg of any profile that changes this template's prompt is
    among the names it reads, with each of the profile's values accepted."""
    tok = tokenizer(folder)
    names = template_names(tok)
    hello = Conversation([{"role": "user", "content": "Hello"}])
    base = ChatTokenizer(tok, template_date="2026-01-01").prompt_ids(hello)
    changing = set()
    for profile in PROFILES.values():
        for name, values in profile.thinking_kwargs.items():
            for value in values:
                chat = ChatTokenizer(tok, {name: value}, template_date="2026-01-01")
                if chat.prompt_ids(hello) != base:
                    changing.add(name)
    assert changing <= names.reads, (folder, changing - names.reads)
    own = PROFILES[EXPECTED[folder][0]]
    for name in changing & set(own.thinking_kwargs):
        for value in own.thinking_kwargs[name]:
            assert kwarg_problems({name: value}, {}, names, own) == {}


def test_named_templates_are_read_together_and_a_syntax_error_is_one_line():
    tok = tokenizer("qwen3")
    tok.chat_template = {"default": "{{ messages }}{{ style }}", "tool_use": "{{ tools }}{% if verbose %}v{% endif %}"}
    assert template_names(tok).reads == {"style", "verbose"}
    tok.chat_template = "{% for m in messages %}{{ m.content }"
    with pytest.raises(ConfigError, match=r"^the chat template does not parse: .* \(line 1\)$"):
        template_names(tok)


def test_a_run_names_where_each_refused_kwarg_came_from():
    tok = tokenizer("kimi_k25")
    config = ConfigSpec("mine", "", "train", "", "messages", 10, "", template_kwargs={"thinkng": True, "thinking": True})
    mix = (({"thinking": True}, 0.5), ({"thinking": "maybe"}, 0.5))
    found = run_kwarg_problems(tok, PROFILES["kimi_k2"], config, {"thinking": "no"}, mix)
    assert found == [
        "config mine: template_kwargs thinkng: the chat template does not read 'thinkng', so it would change nothing; "
        "did you mean thinking? the kwargs it reads: thinking (--template-kwarg-unchecked if it reads 'thinkng' "
        "another way)",
        '--template-kwarg thinking="no": profile kimi_k2 takes thinking as one of true, false',
        '--template-kwarg-mix thinking="maybe": profile kimi_k2 takes thinking as one of true, false',
    ]
    with pytest.raises(ConfigError) as refused:
        check_run_kwargs(tok, PROFILES["kimi_k2"], config, {"thinking": "no"}, mix)
    assert str(refused.value) == "; ".join(found) and "\n" not in str(refused.value)
    check_run_kwargs(tok, PROFILES["kimi_k2"], CONFIG, {"thinking": False}, (({"thinking": True}, 1.0),))


# -- build and doctor ---------------------------------------------------------------------------------

@pytest.mark.parametrize("kwarg,message", [
    ("thinkng=false", "--template-kwarg thinkng: the chat template does not read 'thinkng', so it would change "
                      "nothing; did you mean thinking? the kwargs it reads: thinking"),
    ("thinking=maybe", '--template-kwarg thinking="maybe": profile kimi_k2 takes thinking as one of true, false'),
    ("tools=[]", "--template-kwarg tools: a reserved name (eagle3-synth passes messages, tools and "
                 "add_generation_prompt=True itself, per prompt)"),
])
def test_a_build_with_a_bad_kwarg_fails_before_the_engine_loads(tmp_path, capsys, monkeypatch, kwarg, message):
    def no_engine(*args, **kwargs):
        raise AssertionError("the engine was created")

    monkeypatch.setattr("eagle3_synth.run.generate.create_engine", no_engine)
    out = tmp_path / "ds"
    code, text = run_cli(["build", "B3_ultrachat", "--engine", "transformers", "--model", str(TINY_MODEL),
                          "--template-kwarg", kwarg, "--out", str(out)], capsys)
    assert code == 2 and f"eagle3-synth build: error: {message}" in text
    assert "Traceback" not in text and not (out / ".runs").exists()


def test_a_config_files_kwargs_and_a_mix_are_checked_too(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(CONFIGS, "mine", CONFIG)  # so that the file's "mine" is taken out of the registry after
    configs = tmp_path / "configs.yaml"
    configs.write_text("mine:\n  adapter: messages\n  template_kwargs: {thinking: maybe}\n", encoding="utf-8")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n', encoding="utf-8")
    code, text = run_cli(["build", "mine", "--config-file", str(configs), "--model", str(TINY_MODEL),
                          "--prompts", str(prompts), "--out", str(tmp_path / "a")], capsys)
    assert code == 2 and ('error: config mine: template_kwargs thinking="maybe": profile kimi_k2 takes thinking as '
                          "one of true, false") in text
    code, text = run_cli(["build", "B3_ultrachat", "--model", str(TINY_MODEL), "--template-kwarg-mix",
                          "thinking=true:0.5,thinkin=false:0.5", "--out", str(tmp_path / "b")], capsys)
    assert code == 2 and "error: --template-kwarg-mix thinkin: the chat template does not read 'thinkin'" in text


def test_unchecked_builds_with_a_name_the_template_does_not_read(tmp_path, capsys, kimi_tokenizer):
    write_replay(tmp_path / "replay.jsonl", kimi_tokenizer, 6)
    args = ["build", "B1_glaive", "--model", str(KIMI_TOKENIZER), "--engine", "replay", "--replay",
            str(tmp_path / "replay.jsonl"), "--template-kwarg", "thinkng=false", "--out", str(tmp_path / "ds")]
    code, text = run_cli(args, capsys)
    assert code == 2 and "does not read 'thinkng'" in text
    code, text = run_cli([*args, "--template-kwarg-unchecked"], capsys)
    assert code == 0, text


@pytest.mark.parametrize("kwarg,problem", [
    ("thinkng=false", "PROBLEM: --template-kwarg thinkng: the chat template does not read 'thinkng', so it would "
                      "change nothing; did you mean thinking? the kwargs it reads: thinking"),
    ("thinking=maybe", 'PROBLEM: --template-kwarg thinking="maybe": profile kimi_k2 takes thinking as one of true, '
                       "false"),
    ("tools=[]", "PROBLEM: --template-kwarg tools: a reserved name"),
])
def test_doctor_reports_each_bad_kwarg(capsys, kwarg, problem):
    code, text = run_cli(["doctor", "--model", str(KIMI_TOKENIZER), "--config", "B3_ultrachat",
                          "--template-kwarg", kwarg], capsys)
    assert code == 1 and problem in text
    assert "kwargs        the template reads: thinking\n" in text
    assert f"given: {kwarg.split('=')[0]}=" in text and "refused: the report below is without them" in text
    assert "generation    with no kwargs: " in text  # the rest of the report is made without it


def test_doctor_takes_a_good_kwarg_and_unchecked_names(capsys):
    code, text = run_cli(["doctor", "--model", str(KIMI_TOKENIZER), "--config", "B3_ultrachat",
                          "--template-kwarg", "thinking=false"], capsys)
    assert code == 0 and "given: thinking=false\n" in text and "verdict: no problem found" in text
    code, text = run_cli(["doctor", "--model", str(KIMI_TOKENIZER), "--config", "B3_ultrachat",
                          "--template-kwarg", "thinkng=false", "--template-kwarg-unchecked"], capsys)
    assert code == 0 and "given: thinkng=false (--template-kwarg-unchecked: names not checked)" in text
