"""`load_tokenizer` loads a plain tokenizer folder without torch, and it is exactly AutoTokenizer's.

A folder AutoTokenizer can only load as `TokenizersBackend` (a tokenizer.json, a tokenizer_config.json
naming that class, no custom code, no config.json) is loaded with that class directly, skipping
the second of importing torch through the model configs. These tests hold the shortcut to what
AutoTokenizer gives on every fixture tokenizer -- the class, the vocabulary and special tokens, the
chat template, and the prompt ids of real conversations -- and check that anything else still
goes through AutoTokenizer.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from eagle3_synth.prompts import templating
from eagle3_synth.prompts.conversation import Conversation
from eagle3_synth.prompts.templating import ChatTokenizer, load_tokenizer, plain_tokenizer_folder

from ..conftest import FIXTURES, KIMI_TOKENIZER, TINY_MODEL
from ..support.prompt_cases import source_conversations

FIXTURE_TOKENIZERS = sorted(p for p in (FIXTURES / "tokenizers").iterdir() if p.is_dir())


def conversations() -> list[Conversation]:
    """Every convertible record of every config's fixture source, plus a non-ASCII one."""
    return [Conversation([{"role": "system", "content": "Réponds en français."},
                          {"role": "user", "content": "日本語で答えて：東京の天気は？ 🌧️"}]), *source_conversations()]


def auto(path) -> object:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path), local_files_only=True)


def same_tokenizer(ours, theirs) -> None:
    assert type(ours) is type(theirs)
    assert ours.backend_tokenizer.to_str() == theirs.backend_tokenizer.to_str()
    assert ours.get_vocab() == theirs.get_vocab()
    assert str(ours.added_tokens_decoder) == str(theirs.added_tokens_decoder)
    assert ours.special_tokens_map == theirs.special_tokens_map
    assert ours.init_kwargs == theirs.init_kwargs
    assert ours.chat_template == theirs.chat_template


@pytest.mark.parametrize("folder", FIXTURE_TOKENIZERS, ids=lambda p: p.name)
def test_every_fixture_tokenizer_loads_as_autotokenizer_does(folder):
    assert plain_tokenizer_folder(str(folder)), f"{folder.name} should take the direct path"
    same_tokenizer(load_tokenizer(str(folder)), auto(folder))


@pytest.mark.parametrize("folder", [KIMI_TOKENIZER, FIXTURES / "tokenizers" / "qwen3",
                                    FIXTURES / "tokenizers" / "gpt_oss"], ids=lambda p: p.name)
def test_prompt_ids_are_autotokenizer_s(folder):
    ours, theirs = load_tokenizer(str(folder)), auto(folder)
    items = conversations()
    assert len(items) > 30 and any(c.tools for c in items)
    ids = ChatTokenizer(ours).prompt_ids_batch(items)
    reference = ChatTokenizer(theirs)
    assert ids == reference.prompt_ids_batch(items)
    assert ids[:5] == [reference.prompt_ids(c) for c in items[:5]]
    assert [ChatTokenizer(ours).render(c) for c in items[:5]] == [reference.render(c) for c in items[:5]]


def test_a_folder_naming_pretrainedtokenizerfast_is_the_same_class(tmp_path):
    folder = tmp_path / "fast"
    shutil.copytree(KIMI_TOKENIZER, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    assert plain_tokenizer_folder(str(folder))
    same_tokenizer(load_tokenizer(str(folder)), auto(folder))


def test_anything_else_goes_through_autotokenizer(tmp_path, monkeypatch):
    # A model folder (config.json: its model type may pick another class), custom code (auto_map),
    # another class, no tokenizer.json, an unreadable config: all AutoTokenizer's to decide.
    assert not plain_tokenizer_folder(str(TINY_MODEL))
    cases = {
        "auto_map": lambda c: {**c, "auto_map": {"AutoTokenizer": ["tok.Tok", None]}},
        "other_class": lambda c: {**c, "tokenizer_class": "Qwen2Tokenizer"},
    }
    for name, change in cases.items():
        folder = tmp_path / name
        shutil.copytree(KIMI_TOKENIZER, folder)
        config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
        (folder / "tokenizer_config.json").write_text(json.dumps(change(config)), encoding="utf-8")
        assert not plain_tokenizer_folder(str(folder)), name
    no_json = tmp_path / "no_json"
    shutil.copytree(KIMI_TOKENIZER, no_json)
    (no_json / "tokenizer.json").unlink()
    broken = tmp_path / "broken"
    shutil.copytree(KIMI_TOKENIZER, broken)
    (broken / "tokenizer_config.json").write_text("{not json", encoding="utf-8")
    assert not plain_tokenizer_folder(str(no_json)) and not plain_tokenizer_folder(str(broken))

    used = []
    import transformers

    real = transformers.AutoTokenizer.from_pretrained
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained",
                        lambda *a, **k: used.append(a[0]) or real(*a, **k))
    same_tokenizer(load_tokenizer(str(TINY_MODEL)), auto(TINY_MODEL))
    assert used and used[0] == str(TINY_MODEL)


def test_loading_a_plain_folder_does_not_import_torch():
    code = (f"import sys; from eagle3_synth.prompts.templating import load_tokenizer; "
            f"t = load_tokenizer({str(KIMI_TOKENIZER)!r}); "
            "t.apply_chat_template([{'role': 'user', 'content': 'hi'}], tokenize=True, add_generation_prompt=True); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stderr


def test_a_broken_plain_folder_is_a_config_error_naming_the_option(tmp_path):
    folder = tmp_path / "tok"
    shutil.copytree(KIMI_TOKENIZER, folder)
    (folder / "tokenizer.json").write_text("{\"truncated", encoding="utf-8")
    with pytest.raises(templating.ConfigError, match=r"--model .*tok: cannot load the tokenizer"):
        load_tokenizer(str(folder), option="--model")
