"""`--engine-arg KEY=VALUE` for the in-process SGLang engine, typed by SGLang's own `ServerArgs`.

Every SGLang server argument is reachable, under its `ServerArgs` field name (`tp_size=8`,
`mem_fraction_static=0.85`, `cuda_graph_max_bs_decode=256`). `ServerArgs` is a `msgspec.Struct`
(546 fields in 0.5.23), listed with `msgspec.structs.fields`; its annotations look like
`Annotated[Optional[float], "help"]` or `Annotated[str, Arg(choices=[...])]`. Typing values here,
before the engine starts, turns a typo into an immediate error that names the option, instead of a
`TypeError` (unknown field) or a wrong type that surfaces minutes into a model load.
"""

from __future__ import annotations

import difflib
import json
import os
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from eagle3_synth.errors import ConfigError
from eagle3_synth.engines.base import EngineOptions

# Set from our own options, never from --engine-arg.
RESERVED = {
    "model_path": "--model",
    "skip_tokenizer_init": "nothing (it is always true: prompts go in as token ids, output ids come back untouched)",
    "trust_remote_code": "--trust-remote-code",
    "dtype": "--dtype",
    # Refused outright: SGLang would cut prompts and outputs silently. With it, the tokenizer
    # manager truncates the caller's own input_ids list in place (`del input_ids[_max_req_len:]`)
    # and lowers `sampling_params["max_new_tokens"]` in the caller's dict (sglang 0.5.23
    # srt/managers/tokenizer_manager.py `TokenizerManager._validate_one_request`), and the scheduler
    # cuts prompts past max_req_input_len (srt/managers/utils.py `validate_input_length`).
    "allow_auto_truncate": None,
}
AUTO_TRUNCATE_REFUSED = ("allow_auto_truncate is refused: SGLang would silently truncate prompts and lower "
                         "max_new_tokens; too-long prompts are filtered before generation instead (too_long)")


@dataclass(frozen=True)
class FieldSpec:
    name: str
    type: Any
    required: bool = False


def server_args_fields(server_args_cls: type) -> list[FieldSpec]:
    """The fields of SGLang's `ServerArgs` (a msgspec.Struct, so `dataclasses.fields` does not work)."""
    import msgspec

    return [FieldSpec(f.name, f.type, f.required) for f in msgspec.structs.fields(server_args_cls)]


class _Mismatch(ValueError):
    pass


def _choices(metadata: Iterable[Any]) -> list[Any] | None:
    for item in metadata:
        choices = getattr(item, "choices", None)
        if choices:
            return list(choices)
    return None


def coerce(value: Any, annotation: Any) -> Any:
    """`value` (already JSON-decoded where it parsed) as `annotation`; raises ValueError if it is not one."""
    origin = get_origin(annotation)
    if origin is Annotated:
        base, *metadata = get_args(annotation)
        result = coerce(value, base)
        choices = _choices(metadata)
        if choices is not None and result is not None and result not in choices:
            raise _Mismatch(f"must be one of {choices}")
        return result
    if annotation is Any or annotation is object:
        return value
    if origin is Union or origin is types.UnionType:
        options = get_args(annotation)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return coerce(value, option)
            except ValueError as exc:
                errors.append(str(exc))
        raise _Mismatch(" or ".join(errors))
    if origin is Literal:
        allowed = get_args(annotation)
        for candidate in (value, str(value)):
            if candidate in allowed:
                return candidate
        raise _Mismatch(f"must be one of {list(allowed)}")
    if annotation is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise _Mismatch("expected true or false")
    if annotation is int:
        if isinstance(value, bool):
            raise _Mismatch("expected an integer")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise _Mismatch("expected an integer")
    if annotation is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise _Mismatch("expected a number")
    if annotation is str:
        if isinstance(value, str):
            return value
        # KEY=8 or KEY={"a": 1} was JSON-decoded; a string field wants the text back.
        return json.dumps(value) if isinstance(value, (dict, list, bool)) or value is None else str(value)
    if origin in (list, tuple, set) or annotation in (list, tuple, set):
        if not isinstance(value, list):
            raise _Mismatch("expected a JSON list, e.g. [1,2,4]")
        (item_type, *_) = get_args(annotation) or (Any,)
        return [coerce(item, item_type) for item in value]
    if origin is dict or annotation is dict:
        if not isinstance(value, dict):
            raise _Mismatch('expected a JSON object, e.g. {"key": 1}')
        return value
    return value  # a struct or class of SGLang's own: passed as given, SGLang checks it


def type_engine_args(raw: Mapping[str, Any], fields: Iterable[FieldSpec]) -> dict[str, Any]:
    """Check each --engine-arg against the fields and convert it to the field's type."""
    by_name = {f.name: f for f in fields}
    typed: dict[str, Any] = {}
    for key, value in raw.items():
        if key == "allow_auto_truncate":
            raise ConfigError(f"--engine-arg {AUTO_TRUNCATE_REFUSED}")
        if key in RESERVED:
            raise ConfigError(f"--engine-arg {key}: set by {RESERVED[key]}, not by --engine-arg")
        spec = by_name.get(key)
        if spec is None:
            close = difflib.get_close_matches(key, by_name, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise ConfigError(f"--engine-arg {key}: not an SGLang ServerArgs field{hint}")
        try:
            typed[key] = coerce(value, spec.type)
        except ValueError as exc:
            raise ConfigError(f"--engine-arg {key}={json.dumps(value)}: {exc}") from None
    return typed


def engine_kwargs(options: EngineOptions, fields: Iterable[FieldSpec]) -> dict[str, Any]:
    """Keyword arguments for `sglang.Engine`: our fixed ones plus the typed --engine-args."""
    if not options.model:
        raise ConfigError("--engine sglang needs --model PATH (the model folder SGLang loads)")
    kwargs = {
        **type_engine_args(options.engine_args, fields),
        "model_path": options.model,
        "skip_tokenizer_init": True,
        "trust_remote_code": options.trust_remote_code,
    }
    if options.dtype is not None:
        kwargs["dtype"] = options.dtype  # never SGLang's "auto" (engines/__init__.py)
    if is_cpu_engine(kwargs):
        check_cpu_dtype(kwargs.get("dtype"))
    if options.priority:
        # Without it SGLang ignores a request's priority (or, with abort_on_priority_when_disabled,
        # aborts the request with 503: sglang 0.5.23 srt/managers/scheduler.py
        # `Scheduler._set_or_validate_priority`).
        if kwargs.get("enable_priority_scheduling") is False:
            raise ConfigError("--priority needs enable_priority_scheduling; drop --engine-arg "
                              "enable_priority_scheduling=false or --priority")
        kwargs["enable_priority_scheduling"] = True
    return kwargs


# SGLang's CPU backend (docs/docs/hardware-platforms/cpu_server.mdx): `device="cpu"` is the CPU
# platform only under this variable (sglang 0.5.23 srt/utils/common.py `is_cpu`); the spawned
# scheduler inherits it from this process.
CPU_ENGINE_VARIABLE = "SGLANG_USE_CPU_ENGINE"


def is_cpu_engine(kwargs: Mapping[str, Any]) -> bool:
    return kwargs.get("device") == "cpu" or os.environ.get(CPU_ENGINE_VARIABLE) == "1"


def check_cpu_dtype(dtype: str | None) -> None:
    """SGLang's CPU kernels compute bfloat16 only: a float32 model starts, then its first forward
    fails ("rmsnorm_kernel" not implemented for 'Float', srt/layers/layernorm.py) and SGLang kills
    the process that holds the engine; float16 gives wrong ids. Refused before the engine starts."""
    if dtype != "bfloat16":
        raise ConfigError(f"--engine sglang on a CPU runs bfloat16 only (SGLang's CPU kernels have no {dtype} path: "
                          "float32 fails at the first forward, float16 gives wrong ids); give --dtype bfloat16")


def is_vision_language(model_path: str) -> bool:
    """Whether a model folder's config.json describes a vision-language model (a `vision_config`,
    as Kimi-K2.5 and Qwen-VL keep their encoder's settings)."""
    path = Path(model_path) / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and isinstance(config.get("vision_config"), dict)


def language_model_only_hint(kwargs: dict[str, Any]) -> str | None:
    """A suggestion for a vision-language target launched without `language_model_only`: prompts
    here are text, and sglang 0.5.23 then never builds the vision tower, leaving its GPU memory to
    the KV cache (srt/arg_groups/fields/disagg.py `Disagg.language_model_only`)."""
    if kwargs.get("language_model_only") or kwargs.get("language_only") or not is_vision_language(kwargs["model_path"]):
        return None
    return (f"{kwargs['model_path']} is a vision-language model and every prompt here is text: "
            "--engine-arg language_model_only=true skips its vision encoder and leaves that GPU memory to the KV cache")
