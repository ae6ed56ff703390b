"""Checks before anything loads: every input, output and number a run needs, each a one-line error.

A model takes minutes to load and a run hours to fill; a typo found after either is time lost, and
a value no engine reads right (a NaN temperature) is worse: rows that look fine. So `generate`
and `dry_run` call `check_before_loading` first, before the tokenizer, and the command line checks
its numbers as it parses (the one range table: `contract/ranges.py`). Each check names the option or
file at fault and raises `ConfigError`; none of them writes anything.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

from eagle3_synth.contract.ranges import check_ranges
from eagle3_synth.engines import LOADS_MODEL, EngineOptions, check_engine
from eagle3_synth.errors import ConfigError
from eagle3_synth.run.settings import GenerationSettings
from eagle3_synth.run.spec import RunSpec


def check_device(device: str | None) -> None:
    """`--device` names a torch device that exists here (which engines take it: `engines.ENGINE_OPTIONS`)."""
    if device is None:
        return
    import torch

    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError) as exc:
        raise ConfigError(f"--device {device}: not a torch device ({str(exc).splitlines()[0]})") from None
    if parsed.type == "cpu":
        return
    backend = getattr(torch, parsed.type, None)
    if parsed.type == "mps":
        backend = torch.backends.mps
    available = getattr(backend, "is_available", None)
    if available is None or not available():
        raise ConfigError(f"--device {device}: no {parsed.type} device is available in this process "
                          f"(torch {torch.__version__}); use --device cpu, or run where one is")
    count = getattr(backend, "device_count", None)
    if parsed.index is not None and count is not None and parsed.index >= count():
        raise ConfigError(f"--device {device}: only {count()} {parsed.type} device(s) here (0..{count() - 1})")


def check_input_file(path: str | None, option: str) -> None:
    """A file the run reads exists, is a file and can be opened."""
    if path is None or "://" in path:
        return
    file = Path(path)
    if not file.exists():
        raise ConfigError(f"{option} {path}: no such file")
    if not file.is_file():
        raise ConfigError(f"{option} {path}: " + ("is a directory, not a file" if file.is_dir() else "not a file"))
    try:
        with open(file, "rb") as handle:
            handle.read(1)
    except OSError as exc:
        raise ConfigError(f"{option} {path}: cannot be read ({exc.strerror or exc})") from None


def check_output_folder(path: str | Path, option: str) -> None:
    """A folder the run writes into can be made and written: it is a folder (or can be made under
    its nearest existing parent), and that folder takes a new file. Writes nothing."""
    if "://" in str(path):
        return  # an fsspec store: its own client says what it refuses
    folder = Path(path)
    existing = folder
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        what = "is a file" if existing == folder else f"cannot be made: {existing} is a file"
        raise ConfigError(f"{option} {path}: {what}, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        where = "" if existing == folder else f" (its nearest existing folder {existing} is not writable)"
        raise ConfigError(f"{option} {path}: not writable{where}")
    statvfs = getattr(os, "statvfs", None)
    if statvfs is not None and statvfs(existing).f_flag & getattr(os, "ST_RDONLY", 1):
        raise ConfigError(f"{option} {path}: on a read-only file system")


def _safetensors_problem(file: Path) -> str | None:
    """Why a .safetensors file cannot be a whole one (its header and sizes; no tensor is read), or None.

    The format (safetensors' docs, "Format"): 8 bytes little-endian header size N, N bytes of JSON
    header mapping names to {dtype, shape, data_offsets: [begin, end]} relative to the byte after
    the header, then the data; a truncated or damaged file breaks one of these."""
    size = file.stat().st_size
    with open(file, "rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            return f"{size} bytes, shorter than a header"
        (length,) = struct.unpack("<Q", head)
        if length > size - 8:
            return f"its header claims {length} bytes, the file has {size}"
        try:
            header = json.loads(handle.read(length))
        except ValueError as exc:
            return f"its header is not JSON ({exc})"
    if not isinstance(header, dict):
        return "its header is not a JSON object"
    ends = [entry["data_offsets"][1] for name, entry in header.items()
            if name != "__metadata__" and isinstance(entry, dict) and len(entry.get("data_offsets") or ()) == 2]
    if ends and 8 + length + max(ends) > size:
        return f"truncated: its tensors need {8 + length + max(ends)} bytes, the file has {size}"
    return None


# Weight files a model folder is loaded from: transformers' *.safetensors and *.bin, and SGLang's
# (sglang 0.5.23 srt/model_loader/loader.py `DefaultModelLoader._prepare_weights`: those two for
# load_format auto, *.pt as its fallback and for load_format pt).
WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.pt")


def check_model_folder(path: str | None, option: str = "--model", *, loaded_by: str | None = None,
                       weights: bool = True) -> None:
    """A model folder's config.json parses and its safetensors weights are whole (headers and
    sizes only, read in milliseconds), so a damaged download fails here, not after minutes.
    `loaded_by`: the engine that loads the model from it (`engines.LOADS_MODEL`), so the folder must
    hold one: a config.json with a model_type and (`weights`: the engine reads them from the
    folder) weight files, or a tokenizer's folder fails here, not after the prompts are prepared."""
    if path is None:
        return
    folder = Path(path)
    config = folder / "config.json"
    missing = []
    if config.is_file():
        try:
            value: Any = json.loads(config.read_text(encoding="utf-8"))
        except (ValueError, OSError) as exc:
            raise ConfigError(f"{option} {path}: config.json is not valid JSON ({exc})") from None
        if not isinstance(value, dict):
            raise ConfigError(f"{option} {path}: config.json is not a JSON object")
        if not value.get("model_type"):
            missing.append("its config.json has no model_type")
    else:
        missing.append("no config.json")
    if weights and not any(next(folder.glob(pattern), None) for pattern in WEIGHT_PATTERNS):
        missing.append(f"no weights ({', '.join(WEIGHT_PATTERNS)})")
    if loaded_by is not None and missing:
        raise ConfigError(f"{option} {path}: {' and '.join(missing)}, and --engine {loaded_by} loads the model from "
                          "this folder (a folder with only a tokenizer is --tokenizer, or --model of --engine replay)")
    for weights_file in sorted(folder.glob("*.safetensors")):
        try:
            problem = _safetensors_problem(weights_file)
        except OSError as exc:
            problem = f"cannot be read ({exc.strerror or exc})"
        if problem:
            raise ConfigError(f"{option} {path}: weights file {weights_file.name} is damaged ({problem}); "
                              "download it again")


def check_model_and_engine(engine: str, model: str | None, options: EngineOptions) -> None:
    """The model folder (`check_model_folder`; where this process loads the model, one that holds a
    model: its weights there unless `--engine-arg load_format` tells SGLang where they come from --
    dummy: none, remote ...), and the engine's own checks (`engines.check_engine`: every
    `--engine-arg` against the SGLang installed here)."""
    check_model_folder(model, loaded_by=engine if engine in LOADS_MODEL else None,
                       weights="load_format" not in options.engine_args)
    check_engine(engine, options)


def check_chat_template(tokenizer: Any, folder: str, option: str) -> None:
    """The tokenizer's chat template(s) compile, with transformers' own Jinja environment
    (transformers 5.25 utils/chat_template_utils.py `_compile_jinja_template`); a syntax error is one
    line naming the folder and the template line, not a failure of every prompt."""
    from jinja2 import TemplateSyntaxError
    from transformers.utils.chat_template_utils import _compile_jinja_template

    templates = getattr(tokenizer, "chat_template", None)
    named = templates.items() if isinstance(templates, dict) else [("", templates)]
    for name, template in named:
        if not isinstance(template, str):
            continue
        try:
            _compile_jinja_template(template)
        except TemplateSyntaxError as exc:
            which = f"chat template {name!r}" if name else "chat template"
            raise ConfigError(f"{option} {folder}: the {which} has a syntax error at line {exc.lineno}: "
                              f"{exc.message}") from None


def check_before_loading(spec: RunSpec, options: GenerationSettings) -> None:
    """Everything checkable before the tokenizer and the engine load (module doc)."""
    sampling = spec.sampling
    check_ranges({"temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": sampling.top_k})
    check_device(options.device)
    model = spec.model
    check_input_file(model.replay_file, "--replay")
    check_input_file(model.profile_file, "--profile-file")
    check_input_file(spec.prompts.prompts_file, "--prompts")
    for source in spec.prompts.selection.source_files:
        check_input_file(source, "--source-file")
    check_model_and_engine(options.engine, model.model, options.engine_options(spec))
    check_output_folder(options.run_dir, "--run-dir")
