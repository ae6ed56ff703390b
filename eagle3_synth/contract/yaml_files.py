"""The YAML files a user gives (`--profile-file`, `--config-file`): a mapping of names to their
keys, read by one loader with one error shape (each a one-line ConfigError naming the option and
the file): "no such file", "cannot read it (...)", "not valid YAML (...)", "expected a mapping of ..."."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eagle3_synth.errors import ConfigError


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
