"""What made a config's rows, as recorded beside them (run.json, or its copy run_info.json), and the
tokenizer, profile and markers tools re-read the data with: validation re-templates prompts with
exactly those.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eagle3_synth.contract.markers import describe
from eagle3_synth.contract.profiles import MarkerIds, ModelProfile
from eagle3_synth.errors import ConfigError


@dataclass(frozen=True)
class Provenance:
    """What made a config's rows, as recorded beside them; any field may be unknown (None)."""

    tokenizer: str | None = None
    # The model folder the engine loaded (None: not recorded, or the replay engine).
    model: str | None = None
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    profile: str | None = None
    markers: MarkerIds | None = None
    # The profile as recorded (its YAML schema): a custom profile is known to tools from this.
    profile_definition: dict[str, Any] | None = None
    # How conversations were handed to the template and the date it rendered (None: not recorded).
    message_form: dict[str, Any] | None = None
    template_date: str | None = None
    # The model's vocabulary as meta records it ({"size", "from"}; None: not recorded) and max_new_tokens.
    vocab_size: dict[str, Any] | None = None
    max_new_tokens: int | None = None
    # Where these facts were read from, for messages ("run.json of demo_out/.runs/B1_glaive").
    origin: str = "nothing recorded"


def provenance_from_run_file(path: Path) -> Provenance:
    """Read a run's `run.json` (or its copy `run_info.json`): tokenizer and markers (meta),
    template kwargs and profile (fields)."""
    return provenance_from_run_info(json.loads(path.read_text(encoding="utf-8")), str(path))


def provenance_from_run_info(data: dict[str, Any], origin: str) -> Provenance:
    meta, fields = data.get("meta", {}), data.get("fields", {})
    markers = meta.get("markers")
    template = fields.get("template") or {}
    return Provenance(
        vocab_size=meta.get("vocab_size"), max_new_tokens=(fields.get("sampling") or {}).get("max_new_tokens"),
        profile_definition=fields.get("profile_definition"),
        message_form=template.get("message_form"),
        template_date=template.get("date"),
        tokenizer=meta.get("tokenizer"),
        model=meta.get("model") if isinstance(meta.get("model"), str) and meta.get("model") else None,
        template_kwargs=dict(fields.get("template_kwargs") or {}),
        profile=fields.get("profile") or (markers or {}).get("profile"),
        markers=MarkerIds.from_dict(markers) if markers else None,
        origin=origin,
    )


def data_tokenizer(
    provenance: Provenance, tokenizer_path: str | None = None, *, trust_remote_code: bool = False
) -> tuple[Any, str]:
    """The tokenizer the data was made with: `tokenizer_path` if given, else the recorded one."""
    from eagle3_synth.prompts.templating import load_tokenizer

    path = tokenizer_path or provenance.tokenizer
    if not path:
        raise ConfigError(
            f"which tokenizer made this data is not recorded ({provenance.origin}); pass --tokenizer PATH"
        )
    if not tokenizer_path and not Path(path).exists():
        raise ConfigError(
            f"the data was made with tokenizer {path!r} (from {provenance.origin}), which is not here; "
            "pass --tokenizer PATH"
        )
    try:
        return load_tokenizer(path, trust_remote_code=trust_remote_code), path
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot load tokenizer {path!r}: {exc}") from exc


def data_profile(tokenizer: Any, provenance: Provenance, profile: str | None = None) -> "ModelProfile":
    """The profile the data was made with: given > recorded (with its recorded definition, so a
    `--profile-file` profile needs no file here) > auto."""
    from eagle3_synth.contract.profiles import get_profile, profile_from_dict

    name = profile or provenance.profile or "auto"
    if provenance.profile_definition and name == provenance.profile:
        return profile_from_dict(name, provenance.profile_definition, provenance.origin)
    return get_profile(name, tokenizer)


def data_markers(tokenizer: Any, provenance: Provenance, profile: str | None = None) -> MarkerIds:
    """Markers resolved from `tokenizer` (profile: given > recorded > auto), checked against the
    recorded ones: a difference means the tokenizer is not the one the data was made with."""
    from eagle3_synth.contract.profiles import resolve_markers

    markers = resolve_markers(data_profile(tokenizer, provenance, profile), tokenizer)
    recorded = provenance.markers
    if recorded is not None and (profile is None or profile == recorded.profile) and recorded != markers:
        diffs = [f"{name}: recorded {describe(getattr(recorded, name))}, tokenizer gives {describe(getattr(markers, name))}"
                 for name in recorded.__dataclass_fields__ if getattr(recorded, name) != getattr(markers, name)]
        raise ConfigError(
            "this tokenizer resolves the markers differently from the ones the data was made with "
            f"({provenance.origin}): {'; '.join(diffs)}. Pass the original --tokenizer"
        )
    return markers
