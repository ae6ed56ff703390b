"""Model profiles: the marker token strings of each model family, resolved to ids per tokenizer.

Ids are never hard-coded: a profile only names token strings, and `resolve_markers` looks them up in
the tokenizer in use. Every marker must be exactly one token, because boundaries are positions in
`output_ids`; a marker that splits into several ids could not be located exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import ConfigError, MarkerError


@dataclass(frozen=True)
class ModelProfile:
    """Marker strings of one model family (see DESIGN.md, "Model profiles")."""

    name: str
    reasoning_open: str
    reasoning_close: str
    # None where the family has no section wrapper around its calls (Qwen3 has only <tool_call>).
    tool_section_begin: str | None
    tool_call_begin: str
    tool_call_end: str
    # Stop tokens that must exist in the vocabulary.
    stop_tokens: tuple[str, ...]
    # Stop tokens used when the vocabulary has them (Kimi's [EOS]/[EOT], Qwen's <|endoftext|>).
    optional_stop_tokens: tuple[str, ...] = ()
    # Tokens whose presence in a vocabulary identifies the family for `--profile auto`.
    signature: tuple[str, ...] = ()


PROFILES: dict[str, ModelProfile] = {
    "kimi_k2": ModelProfile(
        name="kimi_k2",
        reasoning_open="<think>",
        reasoning_close="</think>",
        tool_section_begin="<|tool_calls_section_begin|>",
        tool_call_begin="<|tool_call_begin|>",
        tool_call_end="<|tool_call_end|>",
        # Kimi's tokenizer.eos_token is [EOS], but a chat turn ends with <|im_end|>.
        stop_tokens=("<|im_end|>",),
        optional_stop_tokens=("[EOS]", "[EOT]"),
        signature=("<|im_middle|>", "<|tool_calls_section_begin|>"),
    ),
    "qwen3": ModelProfile(
        name="qwen3",
        reasoning_open="<think>",
        reasoning_close="</think>",
        tool_section_begin=None,
        tool_call_begin="<tool_call>",
        tool_call_end="</tool_call>",
        stop_tokens=("<|im_end|>",),
        optional_stop_tokens=("<|endoftext|>",),
        signature=("<|im_start|>", "<tool_call>"),
    ),
    "deepseek": ModelProfile(
        name="deepseek",
        reasoning_open="<think>",
        reasoning_close="</think>",
        tool_section_begin="<｜tool▁calls▁begin｜>",
        tool_call_begin="<｜tool▁call▁begin｜>",
        tool_call_end="<｜tool▁call▁end｜>",
        stop_tokens=("<｜end▁of▁sentence｜>",),
        signature=("<｜end▁of▁sentence｜>",),
    ),
}

# `auto` tries families in this order; the first whose signature tokens all exist wins.
AUTO_ORDER = ("kimi_k2", "deepseek", "qwen3")


@dataclass(frozen=True)
class MarkerIds:
    """A profile's markers as ids of one tokenizer; what the boundary finder works with."""

    profile: str
    reasoning_open: int
    reasoning_close: int
    tool_section_begin: int | None
    tool_call_begin: int
    tool_call_end: int
    stop_ids: tuple[int, ...]


def _token_id(tokenizer: Any, token: str) -> int | None:
    """The id of `token` if the vocabulary holds it as one token, else None."""
    token_id = tokenizer.convert_tokens_to_ids(token)
    if token_id is None:
        return None
    unk = getattr(tokenizer, "unk_token_id", None)
    if unk is not None and token_id == unk and token != getattr(tokenizer, "unk_token", None):
        return None
    return int(token_id)


def _require_single_token(tokenizer: Any, profile: str, role: str, token: str) -> int:
    token_id = _token_id(tokenizer, token)
    if token_id is None:
        raise MarkerError(
            f"profile {profile!r}: marker {role} {token!r} is not in the tokenizer's vocabulary; "
            "pick another --profile or check --tokenizer"
        )
    encoded = list(tokenizer.encode(token, add_special_tokens=False))
    if encoded != [token_id]:
        raise MarkerError(
            f"profile {profile!r}: marker {role} {token!r} is not a single token "
            f"(it encodes to {len(encoded)} ids {encoded}); boundaries need one-token markers"
        )
    return token_id


def detect_profile(tokenizer: Any) -> str:
    """Pick a family from the markers present in the vocabulary (`--profile auto`)."""
    for name in AUTO_ORDER:
        if all(_token_id(tokenizer, tok) is not None for tok in PROFILES[name].signature):
            return name
    raise MarkerError(
        "--profile auto: no known model family matches this tokenizer's special tokens; "
        f"give one of {sorted(PROFILES)} explicitly"
    )


def get_profile(name: str, tokenizer: Any) -> ModelProfile:
    """The profile called `name`, or the detected one for `auto`."""
    if name == "auto":
        name = detect_profile(tokenizer)
    try:
        return PROFILES[name]
    except KeyError:
        raise ConfigError(f"unknown profile {name!r}; choose auto or one of {sorted(PROFILES)}") from None


def resolve_markers(profile: ModelProfile, tokenizer: Any) -> MarkerIds:
    """Look every marker of `profile` up in `tokenizer`, failing loudly on any that is unusable."""

    def need(role: str, token: str) -> int:
        return _require_single_token(tokenizer, profile.name, role, token)

    stop_ids = [need("stop", tok) for tok in profile.stop_tokens]
    for tok in profile.optional_stop_tokens:
        token_id = _token_id(tokenizer, tok)
        if token_id is not None and token_id not in stop_ids:
            stop_ids.append(token_id)
    return MarkerIds(
        profile=profile.name,
        reasoning_open=need("reasoning_open", profile.reasoning_open),
        reasoning_close=need("reasoning_close", profile.reasoning_close),
        tool_section_begin=(
            need("tool_section_begin", profile.tool_section_begin)
            if profile.tool_section_begin is not None
            else None
        ),
        tool_call_begin=need("tool_call_begin", profile.tool_call_begin),
        tool_call_end=need("tool_call_end", profile.tool_call_end),
        stop_ids=tuple(stop_ids),
    )
