"""The model's vocabulary size, and a tokenizer that does not belong to the model, from the folders' own files."""

from __future__ import annotations

import json
import shutil

import pytest

from eagle3_synth.errors import ConfigError
from eagle3_synth.prompts.prepare import check_model_and_tokenizer, model_vocab

from ..conftest import KIMI_TOKENIZER, TINY_MODEL


def model_folder(tmp_path, config: dict, generation_config: dict | None = None, *, own_tokenizer: bool = False):
    """A model folder of configs only (no weights: nothing here may load them)."""
    folder = tmp_path / "model"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    if generation_config is not None:
        (folder / "generation_config.json").write_text(json.dumps(generation_config))
    if own_tokenizer:
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(TINY_MODEL / name, folder / name)
    return str(folder)


def test_the_size_is_the_configs_vocab_size_else_the_tokenizers_length(tmp_path, kimi_tokenizer):
    nested = model_folder(tmp_path, {"text_config": {"vocab_size": 4096}})  # multimodal models nest it (Kimi-K2.5)
    assert model_vocab(nested, kimi_tokenizer).to_json() == {"size": 4096, "from": "vocab_size of the model's config.json"}
    assert model_vocab(str(KIMI_TOKENIZER), kimi_tokenizer).to_json() == {
        "size": len(kimi_tokenizer), "from": "len(tokenizer): no config.json with a vocab_size"}


def test_more_tokens_than_the_model_has_rows_is_refused(tmp_path, kimi_tokenizer):
    model = model_folder(tmp_path, {"vocab_size": 1024})
    with pytest.raises(ConfigError) as error:
        check_model_and_tokenizer(model, str(KIMI_TOKENIZER), kimi_tokenizer)
    assert str(error.value).startswith(
        f"the tokenizer {KIMI_TOKENIZER} does not belong to the model {model}: the tokenizer has 2048 tokens, more "
        f"than the vocab_size of {model}/config.json (1024)")


def test_special_ids_are_read_from_both_config_files(tmp_path, kimi_tokenizer):
    """A chat bos only in generation_config.json (as DeepSeek-R1's distills keep it) is the model's too."""
    config = {"vocab_size": 2048, "bos_token_id": 5, "eos_token_id": 2033}
    with pytest.raises(ConfigError, match=r"the model's bos_token_id is 5, the tokenizer's bos_token '\[BOS\]' is 2032"):
        check_model_and_tokenizer(model_folder(tmp_path / "a", config), str(KIMI_TOKENIZER), kimi_tokenizer)
    model = model_folder(tmp_path / "b", config, {"bos_token_id": 2032, "eos_token_id": [2034, 2033]})
    assert check_model_and_tokenizer(model, str(KIMI_TOKENIZER), kimi_tokenizer).size == 2048


def test_the_model_folders_own_tokenizer_decides(tmp_path, kimi_tokenizer, qwen_tokenizer):
    from ..conftest import QWEN_TOKENIZER

    model = model_folder(tmp_path, {"vocab_size": 2048}, own_tokenizer=True)
    assert check_model_and_tokenizer(model, str(KIMI_TOKENIZER), kimi_tokenizer).size == 2048  # the same tokenizer
    with pytest.raises(ConfigError) as error:
        check_model_and_tokenizer(model, str(QWEN_TOKENIZER), qwen_tokenizer)
    message = str(error.value)
    assert "it is not the model folder's own tokenizer (1536 tokens against the model's tokenizer's 2048" in message
    assert "eos_token '<|im_end|>' against the model's tokenizer's '[EOS]'" in message and "\n" not in message
