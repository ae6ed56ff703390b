"""`eagle3-synth evaluate`: a drafter served by SGLang's speculative decoding on the target's own rows.

Each row's exact prompt ids are sent with its own recorded sampling (or `temperature`), first to the
target alone (the baseline: its speed, and at temperature 0 the outputs speculation must equal),
then to the target with the drafter (SGLang's EAGLE-3). Nothing is decoded; the figures come from
SGLang's per-request counts (figures.py). The drafter is checked against the target before any
engine starts (drafter.py).
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from eagle3_synth.contract.sampling import SAMPLING_KEYS
from eagle3_synth.engines import (Engine, EngineOptions, GenerationRequest, GenerationResult, SamplingParams,
                                  create_engine)
from eagle3_synth.errors import ConfigError
from eagle3_synth.evaluate.drafter import Drafter, fit_problems, read_drafter, write_sglang
from eagle3_synth.evaluate.figures import Served, acceptance, first_difference, greedy_check

log = logging.getLogger(__name__)

# Our option -> SGLang's server argument (srt/server_args.py); None leaves SGLang's own choice.
# draft_window_size is not an option: it is the window the drafter was trained with (Drafter.sliding_window).
SPECULATIVE_ARGS = {"num_steps": "speculative_num_steps", "eagle_topk": "speculative_eagle_topk",
                    "num_draft_tokens": "speculative_num_draft_tokens", "draft_window_size": "speculative_draft_window_size"}
# Unset, SGLang 0.5.23 picks all three from the target's architecture
# (srt/arg_groups/speculative_hook.py `_auto_choose_speculative_params`).
SGLANG_DEFAULTS = "SGLang's own choice: 5 / 4 / 8 for LlamaForCausalLM (and Grok), 3 / 1 / 4 for the others"
SAMPLING_DEFAULTS = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0}


@dataclass(frozen=True)
class Row:
    """A dataset row to evaluate: where it is from, what to send, what it recorded."""

    config: str
    sample_id: int
    turn: int
    prompt_ids: list[int]
    output_ids: list[int]
    sampling: dict[str, Any]  # SamplingParams fields: the row's recorded sampling, or the override
    recorded_greedy: bool = False  # the row itself was generated at temperature 0

    @property
    def greedy(self) -> bool:
        return self.sampling.get("temperature") == 0


def evaluation_row(config: str, row: dict[str, Any], temperature: float | None, default_cap: int | None) -> Row:
    """The dataset row as evaluate sends it: its `sampling` column (the run's values, the sample's
    seed), with `temperature` over it when given; `max_new_tokens` the row's cap, else the run's,
    else its length. A row without a `sampling` column counts as sampled, not greedy."""
    recorded = json.loads(row["sampling"]) if row.get("sampling") else {}
    values = {**SAMPLING_DEFAULTS, **{k: v for k, v in recorded.items() if k in (*SAMPLING_KEYS, "seed") and v is not None}}
    values["max_new_tokens"] = recorded.get("max_new_tokens") or default_cap or max(1, len(row["output_ids"]))
    if temperature is not None:
        values["temperature"] = temperature
    values.setdefault("seed", None)
    return Row(config, row["sample_id"], row.get("turn") or 0, list(row["prompt_ids"]), list(row["output_ids"]), values,
               recorded_greedy=recorded.get("temperature") == 0)


@dataclass
class Pass:
    """One engine's results for every row, and the wall time from the first request to the last result."""

    results: dict[int, GenerationResult] = field(default_factory=dict)
    seconds: float = 0.0
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def tokens(self) -> int:
        return sum(r.completion_tokens for r in self.results.values())

    @property
    def tokens_per_second(self) -> float | None:
        return self.tokens / self.seconds if self.seconds > 0 else None


def run_pass(engine: Engine, rows: Sequence[Row], params: SamplingParams) -> Pass:
    """Every row through `engine` (request i is rows[i]); results by index. One untimed request
    first: an engine's first forward, and a speculative engine's first draft step, compile, which
    no timing of the rows should hold."""
    requests = [GenerationRequest(sample_id=i, prompt_ids=list(row.prompt_ids), sampling=row.sampling)
                for i, row in enumerate(rows)]
    warm_up = GenerationRequest(sample_id=len(rows), prompt_ids=list(rows[0].prompt_ids),
                                sampling={**rows[0].sampling, "max_new_tokens": min(8, rows[0].sampling["max_new_tokens"])})
    for _ in engine.generate(iter([warm_up]), params):
        pass
    started = time.perf_counter()
    done = Pass()
    for result in engine.generate(iter(requests), params):
        done.results[result.sample_id] = result
    done.seconds = time.perf_counter() - started
    done.settings = engine_settings(engine)
    return done


def engine_settings(engine: Engine) -> dict[str, Any]:
    """The speculative settings the engine resolved (its server info), {} when it has none."""
    info: Any = None
    try:
        info = engine.resolved_server_args()
    except Exception as exc:  # informational only
        log.debug("could not read the engine's settings: %s", exc)
    if not isinstance(info, dict):
        return {}
    keys = ("speculative_algorithm", "speculative_draft_model_path", *SPECULATIVE_ARGS.values())
    return {key: info.get(key) for key in keys if key in info}


@dataclass(frozen=True)
class Evaluation:
    engine: str
    options: EngineOptions  # the target alone (the baseline's); the speculative engine adds the drafter
    speculative: dict[str, int]  # our option name -> value given (the rest SGLang's)
    baseline: bool = True
    baseline_urls: tuple[str, ...] = ()  # sglang-http: servers of the target alone


def check_drafter(path: str | Path, model: str | None) -> tuple[Drafter, dict[str, Any], str]:
    """The drafter, the target's config and architecture; a ConfigError naming every misfit."""
    drafter = read_drafter(path)
    if not model or not (Path(model) / "config.json").is_file():
        raise ConfigError(f"--drafter is checked against the target's config.json: give --model, the target's folder "
                          f"({model or 'none recorded with the data'} has no config.json)")
    target = json.loads((Path(model) / "config.json").read_text(encoding="utf-8"))
    architecture = (target.get("architectures") or ["?"])[0]
    problems = fit_problems(drafter, target, architecture)
    if problems:
        raise ConfigError(f"--drafter {path} does not fit the target {model} ({architecture}): " + "; ".join(problems))
    return drafter, target, architecture


def served_drafter_path(drafter: Drafter, target: dict[str, Any], architecture: str, keep: Path | None,
                        scratch: Path) -> Path:
    """The folder SGLang loads: the drafter itself, or (speculators) its SGLang layout in `keep` or scratch."""
    if drafter.layout == "sglang":
        return drafter.path
    layers = (target.get("text_config") or target)["num_hidden_layers"]
    out = write_sglang(drafter, keep or scratch / "drafter-sglang", architecture, layers)
    log.info("drafter %s: speculators layout, served from its SGLang layout in %s", drafter.path, out)
    return out


def evaluate(rows: Sequence[Row], evaluation: Evaluation, drafter_path: Path, params: SamplingParams,
             make_engine: Callable[[str, EngineOptions], Engine] = create_engine) -> dict[str, Any]:
    """Both passes and the report (a JSON-able dict)."""
    baseline: Pass | None = None
    if evaluation.baseline:
        options = evaluation.options
        if evaluation.engine == "sglang-http":
            options = replace(options, urls=evaluation.baseline_urls)
        baseline = _run(make_engine, evaluation.engine, options, rows, params, "the target alone")
    spec_args = {"speculative_algorithm": "EAGLE3", "speculative_draft_model_path": str(drafter_path),
                 **{SPECULATIVE_ARGS[k]: v for k, v in evaluation.speculative.items() if v is not None}}
    options = evaluation.options
    if evaluation.engine == "sglang":
        options = replace(options, engine_args={**options.engine_args, **spec_args})
    speculative = _run(make_engine, evaluation.engine, options, rows, params, "the target with the drafter")
    return report(rows, speculative, baseline, evaluation)


def _run(make_engine: Callable[[str, EngineOptions], Engine], name: str, options: EngineOptions, rows: Sequence[Row],
         params: SamplingParams, what: str) -> Pass:
    log.info("evaluate: %d rows through %s (%s)", len(rows), what, name)
    engine = make_engine(name, options)
    try:
        return run_pass(engine, rows, params)
    finally:
        engine.close()


def report(rows: Sequence[Row], speculative: Pass, baseline: Pass | None, evaluation: Evaluation) -> dict[str, Any]:
    served = []
    for i, row in enumerate(rows):
        result = speculative.results[i]
        base = baseline.results.get(i) if baseline else None
        references = {}  # greedy only: what the output must equal (EAGLE's verification is lossless)
        if row.greedy and not result.error:
            if row.recorded_greedy:
                references["row"] = row.output_ids
            if base is not None and not base.error:
                references["baseline"] = base.output_ids
        differences = {name: first_difference(result.output_ids, ids) for name, ids in references.items()}
        served.append(Served(
            config=row.config, sample_id=row.sample_id, turn=row.turn, completion_tokens=result.completion_tokens,
            counts=result.speculative, error=result.error,
            equal_to_row=differences["row"] is None if "row" in differences else None,
            equal_to_baseline=differences["baseline"] is None if "baseline" in differences else None,
            differences={name: where for name, where in differences.items() if where is not None}))
    steps = speculative.settings.get("speculative_num_steps") or evaluation.speculative.get("num_steps")
    configs: dict[str, Any] = {}
    for config in dict.fromkeys(row.config for row in rows):
        mine = [s for s in served if s.config == config]
        turns = sorted({s.turn for s in mine})
        configs[config] = {**acceptance(mine, steps), "turns": {str(t): acceptance([s for s in mine if s.turn == t], steps)
                                                                for t in turns} if len(turns) > 1 else {}}
    speed: dict[str, Any] = {"speculative_tokens_per_second": speculative.tokens_per_second,
                             "speculative_seconds": speculative.seconds}
    if baseline is not None:
        speed.update(baseline_tokens_per_second=baseline.tokens_per_second, baseline_seconds=baseline.seconds,
                     speedup=(speculative.tokens_per_second / baseline.tokens_per_second)
                     if speculative.tokens_per_second and baseline.tokens_per_second else None)
    return {"engine": evaluation.engine, "settings": speculative.settings, "settings_given": dict(evaluation.speculative),
            "overall": acceptance(served, steps), "configs": configs, "greedy": greedy_check(served), "speed": speed,
            "errors": [f"{s.config}:{s.sample_id}: {s.error}" for s in served if s.error][:10],
            "requests": [s.as_dict() for s in served]}


def scratch_dir() -> tempfile.TemporaryDirectory:
    return tempfile.TemporaryDirectory(prefix="eagle3-synth-evaluate-")
