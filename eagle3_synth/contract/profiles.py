"""Model profiles: the marker strings of each model family, as data, resolved to ids per tokenizer.

Ids are never hard-coded: a profile names marker strings (`profiles.yaml` for the built-in
families, `--profile-file FILE.yaml` for a user's own, same schema), and `resolve_markers` looks
them up in the tokenizer in use (see `markers.py` for markers of several tokens).

Keys of a profile (only the markers and `stop` are required):
- `reasoning_open`, `reasoning_close`, `tool_call_begin`, `tool_call_end`: lists of strings, each
  one way of writing the marker; `tool_section_begin`: the wrapper around a family's calls, if any.
- `stop` (must exist) and `optional_stop` (used where the vocabulary has them): one-token stop
  strings; an engine stops on ids, so these are single tokens always.
- `single_token_markers` (default true): every marker must be one token, as in families whose
  markers are special tokens; a marker that is not one means the wrong tokenizer, and the run stops.
- `close_without_open_is_reasoning` (default true): a close marker with no open one anywhere means
  the template opened reasoning (DeepSeek-R1 style), so reasoning starts at 0.
- `reasoning_field`: the message field earlier reasoning goes in (`reasoning_content`; gpt-oss:
  `thinking`). `tool_description`: a documented system-prompt tool description to use when the
  template ignores `tools` (see `prompts/forms.py`). `thinking_kwargs`: template kwargs that
  switch reasoning, with their values (for `doctor`). `family`, `template`: what people read.
- `detect`: `vocab` (tokens that must all be single tokens) and `template` (substrings the chat
  template must contain) for `--profile auto`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from eagle3_synth.errors import ConfigError, MarkerError
from eagle3_synth.contract.markers import NO_MARKER, Marker, Vocabulary, resolve_pattern, single_token_id

# The YAML files a user gives (`--profile-file`, `--config-file`): a mapping of names to their
# keys, read by one loader with one error shape (each a one-line ConfigError naming the option and
# the file): "no such file", "cannot read it (...)", "not valid YAML (...)", "expected a mapping of ...".


def parse_yaml_mapping(text: str, where: str, what: str) -> dict[Any, Any]:
    """`text` as a non-empty YAML mapping; `where` names its origin, `what` its entries."""
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: not valid YAML ({exc})") from None
    if not isinstance(data, dict) or not data:
        raise ConfigError(f"{where}: expected a mapping of {what}")
    return data


def load_yaml_mapping(path: str | Path, option: str, what: str) -> dict[Any, Any]:
    """The file `path` given as `option`, a non-empty YAML mapping of `what`."""
    where = f"{option} {path}"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{where}: no such file") from None
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read it ({exc.strerror or exc})") from None
    return parse_yaml_mapping(text, where, what)


MARKER_ROLES = ("reasoning_open", "reasoning_close", "tool_section_begin", "tool_call_begin", "tool_call_end")
_REQUIRED = ("reasoning_open", "reasoning_close", "tool_call_begin", "tool_call_end", "stop")
_KNOWN_KEYS = {*MARKER_ROLES, "stop", "optional_stop", "single_token_markers", "close_without_open_is_reasoning",
               "reasoning_field", "tool_description", "thinking_kwargs", "family", "template", "detect"}


@dataclass(frozen=True)
class ModelProfile:
    """Marker strings of one model family (see the module doc for each field)."""

    name: str
    reasoning_open: tuple[str, ...]
    reasoning_close: tuple[str, ...]
    tool_call_begin: tuple[str, ...]
    tool_call_end: tuple[str, ...]
    stop_tokens: tuple[str, ...]
    tool_section_begin: tuple[str, ...] = ()
    optional_stop_tokens: tuple[str, ...] = ()
    single_token_markers: bool = True
    close_without_open_is_reasoning: bool = True
    reasoning_field: str = "reasoning_content"
    tool_description: str | None = None
    thinking_kwargs: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    family: str = ""
    template: str = ""
    detect_vocab: tuple[str, ...] = ()
    detect_template: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The profile in its YAML schema, recorded in run directories (a custom one too)."""
        data: dict[str, Any] = {role: list(getattr(self, role)) for role in MARKER_ROLES if getattr(self, role)}
        data.update(stop=list(self.stop_tokens), optional_stop=list(self.optional_stop_tokens),
                    single_token_markers=self.single_token_markers,
                    close_without_open_is_reasoning=self.close_without_open_is_reasoning,
                    reasoning_field=self.reasoning_field, tool_description=self.tool_description,
                    thinking_kwargs={k: list(v) for k, v in self.thinking_kwargs.items()},
                    family=self.family, template=self.template,
                    detect={"vocab": list(self.detect_vocab), "template": list(self.detect_template)})
        return data


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{where}: expected a marker string or a list of them, got {value!r}")
    return tuple(value)


def profile_from_dict(name: str, data: Any, where: str) -> ModelProfile:
    """One profile from its YAML mapping; ConfigError names the file, profile and key."""
    where = f"{where}: profile {name!r}"
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping of keys, got {type(data).__name__}")
    unknown = sorted(set(data) - _KNOWN_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; known: {sorted(_KNOWN_KEYS)}")
    missing = [key for key in _REQUIRED if not data.get(key)]
    if missing:
        raise ConfigError(f"{where}: missing {', '.join(missing)}")
    detect = data.get("detect") or {}
    if not isinstance(detect, dict) or set(detect) - {"vocab", "template"}:
        raise ConfigError(f"{where}: detect takes 'vocab' and 'template' lists, got {detect!r}")
    kwargs = data.get("thinking_kwargs") or {}
    if not isinstance(kwargs, dict):
        raise ConfigError(f"{where}: thinking_kwargs must map a kwarg to its values, got {kwargs!r}")
    return ModelProfile(
        name=name,
        reasoning_open=_strings(data["reasoning_open"], f"{where}, key reasoning_open"),
        reasoning_close=_strings(data["reasoning_close"], f"{where}, key reasoning_close"),
        tool_call_begin=_strings(data["tool_call_begin"], f"{where}, key tool_call_begin"),
        tool_call_end=_strings(data["tool_call_end"], f"{where}, key tool_call_end"),
        stop_tokens=_strings(data["stop"], f"{where}, key stop"),
        tool_section_begin=_strings(data["tool_section_begin"], f"{where}, key tool_section_begin")
        if data.get("tool_section_begin") else (),
        optional_stop_tokens=_strings(data["optional_stop"], f"{where}, key optional_stop")
        if data.get("optional_stop") else (),
        single_token_markers=bool(data.get("single_token_markers", True)),
        close_without_open_is_reasoning=bool(data.get("close_without_open_is_reasoning", True)),
        reasoning_field=str(data.get("reasoning_field") or "reasoning_content"),
        tool_description=data.get("tool_description"),
        thinking_kwargs={str(k): tuple(v if isinstance(v, list) else [v]) for k, v in kwargs.items()},
        family=str(data.get("family") or ""),
        template=" ".join(str(data.get("template") or "").split()),
        detect_vocab=_strings(detect["vocab"], f"{where}, key detect.vocab") if detect.get("vocab") else (),
        detect_template=_strings(detect["template"], f"{where}, key detect.template") if detect.get("template") else (),
    )


def load_profile_file(path: str | Path) -> dict[str, ModelProfile]:
    """Profiles from a YAML file of `name: {keys}` (the schema in the module doc)."""
    data = load_yaml_mapping(path, "--profile-file", "profile names to their keys")
    return {str(name): profile_from_dict(str(name), spec, f"--profile-file {path}") for name, spec in data.items()}


def _builtin() -> dict[str, ModelProfile]:
    text = resources.files("eagle3_synth.contract").joinpath("profiles.yaml").read_text(encoding="utf-8")
    data = parse_yaml_mapping(text, "profiles.yaml", "profile names to their keys")
    return {name: profile_from_dict(name, spec, "profiles.yaml") for name, spec in data.items()}


# The built-in profiles by name, in `auto` order (a few milliseconds to read).
PROFILES: dict[str, ModelProfile] = _builtin()


@dataclass(frozen=True)
class MarkerIds:
    """A profile's markers as ids of one tokenizer; what the boundary finder works with."""

    profile: str
    reasoning_open: Marker
    reasoning_close: Marker
    tool_section_begin: Marker
    tool_call_begin: Marker
    tool_call_end: Marker
    stop_ids: tuple[int, ...]
    close_without_open_is_reasoning: bool = True

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"profile": self.profile}
        data.update({role: getattr(self, role).to_json() for role in MARKER_ROLES})
        data.update(stop_ids=list(self.stop_ids), close_without_open_is_reasoning=self.close_without_open_is_reasoning)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "MarkerIds":
        """From `to_json` output, or from a run directory written when markers were single ids."""
        return cls(
            profile=data["profile"],
            **{role: Marker.from_json(data.get(role)) for role in MARKER_ROLES},
            stop_ids=tuple(data["stop_ids"]),
            close_without_open_is_reasoning=bool(data.get("close_without_open_is_reasoning", True)),
        )


def _template_text(tokenizer: Any) -> str:
    template = getattr(tokenizer, "chat_template", None) or ""
    if isinstance(template, dict):  # named templates
        template = "\n".join(str(v) for v in template.values())
    return str(template)


def detect_profile(tokenizer: Any, profiles: dict[str, ModelProfile] | None = None) -> tuple[str, str]:
    """(family, why) for `--profile auto`: the first profile (user profiles first, then the
    built-ins in file order) whose vocabulary tokens all exist and whose template strings all occur."""
    template = _template_text(tokenizer)
    candidates = {**(profiles or {}), **{k: v for k, v in PROFILES.items() if k not in (profiles or {})}}
    for name, profile in candidates.items():
        if not profile.detect_vocab and not profile.detect_template:
            continue
        if all(single_token_id(tokenizer, tok) is not None for tok in profile.detect_vocab) and all(
                text in template for text in profile.detect_template):
            why = []
            if profile.detect_vocab:
                why.append("the vocabulary has " + ", ".join(profile.detect_vocab))
            if profile.detect_template:
                why.append("the chat template contains " + ", ".join(repr(t) for t in profile.detect_template))
            return name, " and ".join(why)
    raise MarkerError(
        "--profile auto: no known model family matches this tokenizer's special tokens and chat template; "
        f"give one of {sorted(candidates)} with --profile, or define the family in --profile-file FILE.yaml"
    )


def get_profile(name: str, tokenizer: Any, profiles: dict[str, ModelProfile] | None = None) -> ModelProfile:
    """The profile called `name` (user profiles first), or the detected one for `auto`."""
    known = {**PROFILES, **(profiles or {})}
    if name == "auto":
        name, _ = detect_profile(tokenizer, profiles)
    try:
        return known[name]
    except KeyError:
        raise ConfigError(f"unknown profile {name!r}; choose auto or one of {sorted(known)} "
                          "(or define it in --profile-file)") from None


def choose_profile(name: str, tokenizer: Any, profile_file: str | None = None) -> tuple[ModelProfile, str]:
    """(profile, why it was chosen): `--profile NAME` or `auto`, with `--profile-file` profiles known."""
    profiles = load_profile_file(profile_file) if profile_file else None
    if name != "auto":
        where = "given with --profile"
        return get_profile(name, tokenizer, profiles), where
    chosen, why = detect_profile(tokenizer, profiles)
    return get_profile(chosen, tokenizer, profiles), f"--profile auto: {why}"


def resolve_markers(profile: ModelProfile, tokenizer: Any) -> MarkerIds:
    """Look every marker of `profile` up in `tokenizer`, failing loudly on any that is unusable."""
    vocab = Vocabulary(tokenizer)

    def marker(role: str) -> Marker:
        texts = getattr(profile, role)
        return Marker(tuple(resolve_pattern(vocab, text, what=f"profile {profile.name!r}: marker {role}",
                                            single_token=profile.single_token_markers) for text in texts))

    def stop(token: str) -> int:
        pattern = resolve_pattern(vocab, token, what=f"profile {profile.name!r}: marker stop", single_token=True)
        return next(iter(pattern.slots[0]))

    stop_ids = [stop(tok) for tok in profile.stop_tokens]
    for tok in profile.optional_stop_tokens:
        token_id = vocab.single_token(tok)
        if token_id is not None and token_id not in stop_ids:
            stop_ids.append(token_id)
    return MarkerIds(
        profile=profile.name,
        **{role: marker(role) if getattr(profile, role) else NO_MARKER for role in MARKER_ROLES},
        stop_ids=tuple(stop_ids),
        close_without_open_is_reasoning=profile.close_without_open_is_reasoning,
    )
