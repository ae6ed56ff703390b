"""The model's vocabulary size, and whether a tokenizer belongs to the model: one place for both.

Every id of a row must be a row of the model's embedding, `0 <= id < vocab_size`: a trainer looks
each one up (an id past the table is an index error on a GPU, or garbage). The size is the model
config's `vocab_size` (the embedding rows; it may exceed `len(tokenizer)`: Qwen3's 151,936 rows hold
151,669 tokens) where the model folder has a config.json with one, else `len(tokenizer)` (the
replay engine with a tokenizer-only folder). `run.generate` records it and where it came from in
the run's meta (`vocab_size`), which `build` copies into `<config>/run_info.json`, so `validate` and
`publish` check a folder without the model.

A tokenizer from another model templates prompts the model reads as other words, and the ids it
generates may not be tokens of the tokenizer at all (the tiny model with the Qwen3 fixture
tokenizer: output ids up to 2,041 against 1,536 tokens). `check_model_and_tokenizer` refuses that
before anything is generated, naming both folders and what differs:
- `len(tokenizer)` over the model's `vocab_size` (prompt ids the model has no embedding for);
- a special token id of the model's config.json / generation_config.json (`bos_token_id`,
  `eos_token_id`, `pad_token_id`; an int or a list) that is not the tokenizer's id for that token,
  or, where the tokenizer has no such token, no token of the tokenizer at all. The two files are
  read together (the union of their ids per name): models list several end ids in one of them
  (Llama-3.1 instruct), or a chat bos only in generation_config.json (DeepSeek-R1 distills);
- where the model folder has its own tokenizer files and `--tokenizer` points elsewhere, the two
  tokenizers' vocabularies or special tokens differing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eagle3_synth.errors import ConfigError
from eagle3_synth.prompts.prepare import model_config_sections, model_config_value
from eagle3_synth.prompts.templating import load_tokenizer

SPECIAL_TOKENS = ("bos", "eos", "pad")
# Files that make a folder hold a tokenizer of its own (transformers reads one of them).
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "tiktoken.model", "vocab.json")
# Where a size was read; no path, so a published run_info.json names no local folder.
CONFIG_SIZE = "vocab_size of the model's config.json"
TOKENIZER_SIZE = "len(tokenizer): no config.json with a vocab_size"
# Vocabulary differences quoted in a message.
_SHOWN = 3


@dataclass(frozen=True)
class ModelVocab:
    """How many ids the model has, and where that was read (for messages and the run's meta)."""

    size: int
    source: str  # CONFIG_SIZE or TOKENIZER_SIZE: which folder it names is the run's meta (model, tokenizer)

    def to_json(self) -> dict[str, Any]:
        return {"size": self.size, "from": self.source}


def model_vocab(model: str | None, tokenizer: Any) -> ModelVocab:
    """The model config's `vocab_size` where `model` is a folder with a config.json that has one,
    else `len(tokenizer)`."""
    size = model_config_value(model, "vocab_size", "a model folder whose config.json is valid JSON")
    if size is not None:
        return ModelVocab(size, CONFIG_SIZE)
    return ModelVocab(len(tokenizer), TOKENIZER_SIZE)


def _config_special_ids(model: str) -> dict[str, set[int]]:
    """bos/eos/pad ids of the model's config.json and generation_config.json, per name (both files' ids)."""
    found: dict[str, set[int]] = {}
    for name in ("config.json", "generation_config.json"):
        for section in model_config_sections(model, "a model folder whose configs are valid JSON", name):
            for token in SPECIAL_TOKENS:
                value = section.get(f"{token}_token_id")
                values = value if isinstance(value, list) else [value]
                ids = {v for v in values if isinstance(v, int) and not isinstance(v, bool) and v >= 0}
                if ids:
                    found.setdefault(token, set()).update(ids)
    return found


def _special_token_problems(model: str, tokenizer: Any) -> list[str]:
    problems = []
    for token, ids in _config_special_ids(model).items():
        own = getattr(tokenizer, f"{token}_token_id", None)
        shown = next(iter(ids)) if len(ids) == 1 else sorted(ids)
        if own is not None and own not in ids:
            problems.append(f"the model's {token}_token_id is {shown}, the tokenizer's {token}_token "
                            f"{getattr(tokenizer, f'{token}_token', None)!r} is {own}")
        elif own is None and max(ids) >= len(tokenizer):
            problems.append(f"the model's {token}_token_id {shown} is no token of the tokenizer ({len(tokenizer)} tokens)")
    return problems


def _special_map(tokenizer: Any) -> dict[str, Any]:
    return {f"{token}_token": getattr(tokenizer, f"{token}_token", None) for token in (*SPECIAL_TOKENS, "unk")}


def tokenizer_differences(ours: Any, theirs: Any) -> list[str]:
    """How tokenizer `ours` differs from `theirs`: vocabulary (size, ids of tokens), special tokens."""
    problems = []
    if len(ours) != len(theirs):
        problems.append(f"{len(ours)} tokens against the model's tokenizer's {len(theirs)}")
    vocab, other = ours.get_vocab(), theirs.get_vocab()
    if vocab != other:
        differing = sorted(t for t in vocab.keys() | other.keys() if vocab.get(t) != other.get(t))
        shown = ", ".join(f"{t!r} is {vocab.get(t)} against {other.get(t)}" for t in differing[:_SHOWN])
        problems.append(f"{len(differing)} tokens have other ids ({shown}{', ...' if len(differing) > _SHOWN else ''})")
    mine, model = _special_map(ours), _special_map(theirs)
    problems += [f"{name} {mine[name]!r} against the model's tokenizer's {model[name]!r}"
                 for name in mine if mine[name] != model[name]]
    return problems


def _own_tokenizer(model: str, tokenizer_path: str | None) -> bool:
    """Whether the model folder holds a tokenizer of its own other than the one at `tokenizer_path`."""
    folder = Path(model)
    if not any((folder / name).is_file() for name in _TOKENIZER_FILES):
        return False
    return tokenizer_path is None or not Path(tokenizer_path).is_dir() or folder.resolve() != Path(tokenizer_path).resolve()


def check_model_and_tokenizer(model: str | None, tokenizer_path: str | None, tokenizer: Any, *,
                              trust_remote_code: bool = False) -> ModelVocab:
    """The model's `ModelVocab`, after refusing (one-line ConfigError naming both folders) a tokenizer
    that does not belong to the model (see the module doc). Reads only small JSON files and, where
    --tokenizer is not the model's own, the model's tokenizer: the weights are not touched."""
    vocab = model_vocab(model, tokenizer)
    if not model or not Path(model).is_dir():
        return vocab
    problems = []
    if len(tokenizer) > vocab.size:
        problems.append(f"the tokenizer has {len(tokenizer)} tokens, more than the vocab_size of "
                        f"{Path(model) / 'config.json'} ({vocab.size})")
    problems += _special_token_problems(model, tokenizer)
    if _own_tokenizer(model, tokenizer_path):
        own = load_tokenizer(model, trust_remote_code=trust_remote_code, option="--model")
        differences = tokenizer_differences(tokenizer, own)
        if differences:
            problems.append(f"it is not the model folder's own tokenizer ({', '.join(differences)})")
    if problems:
        raise ConfigError(f"the tokenizer {tokenizer_path} does not belong to the model {model}: {'; '.join(problems)}. "
                          "Pass the model's own tokenizer (--tokenizer), or none to use the model folder's")
    return vocab
