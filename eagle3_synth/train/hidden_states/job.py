"""One `hidden-states` job from start to end: the target model, the plan printed, the files written,
the trainer's command, and `--check`. `cli/hidden_states.py` maps the options onto it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from eagle3_synth.contract.ranges import check_range
from eagle3_synth.engines import EngineOptions
from eagle3_synth.errors import ConfigError
from eagle3_synth.run.preflight import check_model_and_engine
from eagle3_synth.train.hidden_states import specforge_target
from eagle3_synth.train.hidden_states.check import check_files
from eagle3_synth.train.hidden_states.compute import (HiddenStatesOptions, greedy, load_model, prepare, record_manifest,
                                                      transformers_states, write_states)
from eagle3_synth.train.hidden_states.sglang_capture import sglang_engine, states_of_rows
from eagle3_synth.train.hidden_states.layouts import LAYOUTS


def target_model(source: Any, configs: Sequence[str], model: str | None) -> str:
    """The model whose states go with these configs: `model` when given, else the one recorded with
    the data (one model for all the configs, and a folder that is here)."""
    provenance = source.provenance(configs[0])
    models = {config: source.provenance(config).model for config in configs}
    if not model and len(set(models.values())) > 1:
        raise ConfigError("these configs were made with different models "
                          f"({', '.join(f'{c}: {m}' for c, m in models.items())}); one target's states go together: "
                          "give the configs of one model, or --model PATH")
    chosen = model or provenance.model
    if not chosen:
        raise ConfigError(f"which model made this data is not recorded ({provenance.origin}); pass --model PATH")
    if not model and not Path(chosen).exists():
        raise ConfigError(f"the data was made with the model {chosen!r} (from {provenance.origin}), which is not here; "
                          "pass --model PATH")
    return str(Path(chosen).resolve()) if Path(chosen).exists() else chosen


def run_job(source: Any, options: HiddenStatesOptions, *, dry_run: bool = False, max_bytes: int | None = None,
            check: bool = False, progress: bool | None = None, echo: Callable[[str], None] = print) -> bool:
    """Plan, write and (with `check`) check this shard's files, saying each step through `echo`;
    False when the check found a problem."""
    from transformers import AutoConfig

    check_range("max_bytes", max_bytes)
    # Before anything loads: a folder that holds the model where this process loads it, the engine's --engine-args.
    check_model_and_engine(options.engine, options.model, EngineOptions(
        model=options.model, dtype=options.dtype, engine_args=options.engine_args,
        trust_remote_code=options.trust_remote_code))
    try:
        model_config = AutoConfig.from_pretrained(options.model, trust_remote_code=options.trust_remote_code)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the config of the model {options.model!r}: {exc}") from exc
    plan, layout = prepare(source, options, model_config)
    echo(f"{' '.join(options.configs)} -> {layout.folder} ({options.fmt}, {options.shard}):")
    for line in plan.lines():
        echo(f"  {line}")
    if dry_run:
        return True
    if max_bytes is not None and plan.pending_bytes > max_bytes:
        raise ConfigError(f"this run would write about {plan.pending_bytes} bytes, over --max-bytes {max_bytes}")
    record_manifest(plan, layout, options)
    target_folder = layout.folder / "target_model"
    needs_target = options.fmt == "specforge" and not specforge_target.usable_as_is(Path(options.model))
    model = None
    if (plan.pending and options.engine == "transformers") or check or \
            (needs_target and not (target_folder / specforge_target.INDEX_FILE).is_file()):
        model = load_model(options)
    written = 0
    if plan.pending and options.engine == "transformers":
        written = write_states(transformers_states(model, plan, options), plan, layout, progress=progress)
    elif plan.pending:
        with sglang_engine(options, plan.capture) as (engine, capture):
            longest_first = sorted(plan.pending, key=lambda item: -len(item.input_ids))
            rows = states_of_rows(engine, capture, longest_first, options.dtype)
            written = write_states(rows, plan, layout, progress=progress)
    echo(f"  wrote {written} files")
    if options.fmt == "speculators":
        echo(f"  train: speculators train --data-path {options.folder} --target-layer-ids {' '.join(map(str, plan.layers))} "
             "--on-missing raise ...")
    else:
        target = options.model
        if needs_target:
            if model is not None:
                specforge_target.write_target_folder(model, Path(options.model), target_folder)
            target = str(target_folder)
        # SpecForge 0.2.0's overrides name existing keys only (config/schema.py `apply_overrides`); the run is
        # offline because data.hidden_states_path is set (`Config.mode`), there is no `mode` key to give.
        key = "data.eval_hidden_states_path" if options.split == "validation" else "data.hidden_states_path"
        echo(f"  train: specforge train --config run.yaml {key}={layout.folder} model.target_model_path={target}")
    if check:
        report = check_files(model, layout, plan.items, LAYOUTS[options.fmt].fixed_dtype or options.dtype,
                             greedy(source, options.configs))
        for line in report.lines():
            echo(f"  {line}")
        return report.ok
    return True
