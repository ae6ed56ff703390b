"""`eagle3-synth evaluate`: a drafter served by SGLang's speculative decoding on the target's own rows.

Each row's exact prompt ids are sent with its own recorded sampling (or `temperature`), first to the
target alone (the baseline: its speed, and at temperature 0 the outputs speculation must equal),
then to the target with the drafter (SGLang's EAGLE-3). Nothing is decoded; the figures come from
SGLang's per-request counts (below). The drafter is checked against the target before any
engine starts (`read_drafter`, `fit_problems`), and the figures are printed as one table (`report`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import statistics
import struct
import tempfile
import time
from collections.abc import Callable, Sequence, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from eagle3_synth.contract.row import SAMPLING_KEYS
from eagle3_synth.engines import (Engine, EngineOptions, GenerationRequest, GenerationResult, SamplingParams,
                                  create_engine)
from eagle3_synth.errors import ConfigError
from eagle3_synth.engines.base import SpeculativeCounts
from eagle3_synth.engines.sglang.aux_layers import capture_problem, captured_layers, sglang_ids_for

# An EAGLE-3 drafter as SGLang 0.5.23 serves it: read from its folder, checked against its target.
#
# Two layouts are read:
# - "sglang": SGLang's own `LlamaForCausalLMEagle3` (srt/models/llama_eagle3.py), which SpecForge
#   0.2.0's `export --to sglang` writes: config.json with that architecture, weights `midlayer.*` or
#   `layers.0.*`, `fc`, `norm`, `lm_head`, `d2t`, `t2d` (`LlamaForCausalLMEagle3.load_weights`).
# - "speculators": speculators 0.9.0's save (`speculators_model_type: "eagle3"`, the decoder layer's
#   settings in `transformer_layer_config`: models/eagle3/config.py `Eagle3SpeculatorConfig`). SGLang cannot load it (its
#   config has no `model_type`), so `sglang_config` rewrites the config for SGLang and `write_sglang`
#   puts it beside links to the same weights, whose names SGLang reads as they are.
#
# SGLang skips a weight whose name it does not know without a word (llama_eagle3.py
# `LlamaForCausalLMEagle3.load_weights`) and serves a drafter with that part random, and a drafter
# that does not fit its target fails in the scheduler after minutes of loading; `fit_problems` finds
# both before the engine starts.

SGLANG_ARCHITECTURE = "LlamaForCausalLMEagle3"
# Weight names SGLang's loader places (after its `midlayer` -> `layers.0` rename, `model.` optional).
_KNOWN = re.compile(
    r"(model\.)?(layers\.\d+\.(self_attn\.[qkvo]_proj|mlp\.(gate|up|down)_proj|input_layernorm|post_attention_layernorm"
    r"|hidden_norm)\.weight|fc\.weight|norm\.weight|lm_head\.weight|embed_tokens\.weight|input_norm\.weight"
    r"|fc_norm\.\d+\.weight|d2t|t2d)")
_LEGACY = {"midlayer": "layers.0", "aux_norm_low": "fc_norm.0", "aux_norm_mid": "fc_norm.1", "aux_norm_high": "fc_norm.2"}


@dataclass(frozen=True)
class Drafter:
    path: Path
    layout: str  # "sglang" | "speculators"
    config: dict[str, Any]  # config.json as written
    shapes: dict[str, tuple[int, ...]]  # every weight's name -> shape (from the safetensors headers)

    @property
    def layer_config(self) -> dict[str, Any]:
        """The decoder layer's settings (speculators keeps them apart, SGLang's layout at the top)."""
        return self.config.get("transformer_layer_config") or {} if self.layout == "speculators" else self.config

    @property
    def hidden_size(self) -> int | None:
        return self.layer_config.get("hidden_size")

    @property
    def target_hidden_size(self) -> int | None:
        return self.config.get("target_hidden_size") or self.hidden_size

    @property
    def vocab_size(self) -> int | None:
        return self.layer_config.get("vocab_size")

    @property
    def draft_vocab_size(self) -> int | None:
        return self.config.get("draft_vocab_size") or self.vocab_size

    @property
    def sliding_window(self) -> int | None:
        """The attention window the drafter layer was trained with (speculators writes a Llama layer
        config with `layer_types` ["sliding_attention"] and `sliding_window`, speculators 0.9.0
        models/eagle3/core.py `Eagle3DraftModel.__init__`),
        None for full attention. SGLang serves it only when told: `speculative_draft_window_size`
        (llama_eagle3.py `LlamaForCausalLMEagle3.__init__`)."""
        layer = self.layer_config
        sliding = layer.get("use_sliding_window") or "sliding_attention" in (layer.get("layer_types") or [])
        window = layer.get("sliding_window")
        return window if sliding and isinstance(window, int) and window > 0 else None

    def sglang_layer_ids(self, architecture: str, num_layers: int) -> list[int] | None:
        """The aux layer ids in SGLang's numbering (None: its default). speculators records vLLM's."""
        if self.layout == "speculators":
            ids = self.config.get("eagle_aux_hidden_state_layer_ids")
            return None if ids is None else sglang_ids_for(architecture, num_layers, ids)
        return (self.config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")

    def weight(self, name: str) -> tuple[int, ...] | None:
        for key in (name, f"model.{name}"):
            if key in self.shapes:
                return self.shapes[key]
        return None


def read_drafter(path: str | Path) -> Drafter:
    """The drafter in folder `path`: its config and its weights' shapes (no tensor is loaded)."""
    folder = Path(path)
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise ConfigError(f"--drafter {folder}: no config.json there (a drafter folder: SpecForge's `export --to sglang` "
                          "output, or the checkpoint folder speculators saved)")
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--drafter {config_file}: not a JSON config ({exc})") from None
    if config.get("speculators_model_type") == "eagle3":
        layout = "speculators"
    elif SGLANG_ARCHITECTURE in (config.get("architectures") or []):
        layout = "sglang"
    else:
        raise ConfigError(f"--drafter {config_file}: neither an SGLang EAGLE-3 drafter (architectures "
                          f"[{SGLANG_ARCHITECTURE!r}]) nor a speculators one (speculators_model_type 'eagle3'); "
                          f"it has architectures {config.get('architectures')}, "
                          f"speculators_model_type {config.get('speculators_model_type')!r}")
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ConfigError(f"--drafter {folder}: no .safetensors weights there")
    shapes: dict[str, tuple[int, ...]] = {}
    for file in files:
        shapes.update(safetensors_shapes(file))
    return Drafter(folder, layout, config, shapes)


def safetensors_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Each tensor's shape from a .safetensors file's JSON header (8-byte length, then the header)."""
    with open(path, "rb") as handle:
        try:
            (length,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(length))
        except (struct.error, ValueError) as exc:
            raise ConfigError(f"--drafter {path}: not a safetensors file ({exc})") from None
    return {name: tuple(entry["shape"]) for name, entry in header.items() if name != "__metadata__"}


def sglang_name(name: str) -> str:
    for legacy, new in _LEGACY.items():
        name = name.replace(legacy, new)
    return name


def fit_problems(drafter: Drafter, target: dict[str, Any], architecture: str) -> list[str]:
    """Every way `drafter` does not fit the target (its config.json as a dict), or SGLang would
    serve it other than trained; [] when it fits."""
    problems = []
    text = target.get("text_config") or target
    hidden, vocab, layers = text.get("hidden_size"), text.get("vocab_size"), text.get("num_hidden_layers")
    if drafter.target_hidden_size != hidden:
        problems.append(f"it takes the target's states of size {drafter.target_hidden_size}, the target's hidden size is {hidden}")
    if drafter.vocab_size != vocab:
        problems.append(f"its vocabulary is {drafter.vocab_size} ids, the target's {vocab}")
    unknown = sorted(n for n in drafter.shapes if not _KNOWN.fullmatch(sglang_name(n)))
    if unknown:
        problems.append(f"SGLang would skip its weights {', '.join(unknown[:4])}{' ...' if len(unknown) > 4 else ''} "
                        "without a word and serve those parts random (llama_eagle3.py:371-378)")
    if drafter.layout == "speculators":
        problems += _speculators_problems(drafter)
    if isinstance(layers, int):
        problems += _layer_problems(drafter, architecture, layers, hidden)
    draft_vocab = drafter.draft_vocab_size
    for name, expected in (("lm_head.weight", (draft_vocab, drafter.hidden_size)), ("d2t", (draft_vocab,)), ("t2d", (vocab,))):
        shape = drafter.weight(name)
        if shape is not None and shape != expected:
            problems.append(f"its {name} has shape {list(shape)}, expected {list(expected)}")
    if draft_vocab != vocab and drafter.weight("d2t") is None:
        problems.append(f"its draft vocabulary ({draft_vocab}) differs from the target's ({vocab}) but it has no d2t mapping")
    return problems


def _layer_problems(drafter: Drafter, architecture: str, num_layers: int, hidden: int | None) -> list[str]:
    """Whether SGLang can hand the drafter the layers it was trained on, as many as its fc takes."""
    named = drafter.sglang_layer_ids(architecture, num_layers)
    trained = drafter.config.get("eagle_aux_hidden_state_layer_ids")
    if drafter.layout == "speculators" and trained is not None and named is None:
        return [f"SGLang's {architecture} cannot capture its layers {trained} (aux_layers.py)"]
    problems = []
    captured = captured_layers(architecture, num_layers, named)
    problem = capture_problem(num_layers, captured)
    if problem:
        problems.append(f"its aux layers (vLLM's numbering) are {captured}: {problem}")
    fc = drafter.weight("fc.weight")
    if fc is not None and hidden and fc[-1] != len(captured) * hidden:
        problems.append(f"its fc takes {fc[-1]} features, SGLang hands it {len(captured)} layers x {hidden}")
    return problems


def _speculators_problems(drafter: Drafter) -> list[str]:
    """What of a speculators drafter SGLang's LlamaForCausalLMEagle3 has no counterpart for."""
    problems = []
    layer_type = drafter.layer_config.get("model_type")
    if layer_type != "llama":
        problems.append(f"its decoder layer is {layer_type!r} (transformer_layer_config.model_type): SGLang's EAGLE-3 "
                        "drafter is a Llama layer (llama_eagle3.py:46-120; a qwen3 layer's q/k norms would be skipped)")
    if drafter.config.get("norm_before_residual"):
        problems.append("it was trained with norm_before_residual=true (speculators' default: train/config/schema.py:145), "
                        "which SGLang's drafter layer does not do (residual = the state before hidden_norm, "
                        "llama_eagle3.py:98-101); train it with --no-norm-before-residual")
    return problems


def sglang_config(drafter: Drafter, architecture: str, num_layers: int) -> dict[str, Any]:
    """A speculators drafter's config as SGLang's LlamaForCausalLMEagle3 reads it.

    speculators 0.9.0 (models/eagle3/config.py) -> SGLang 0.5.23 (srt/models/llama_eagle3.py):
    transformer_layer_config.* -> the top level (a LlamaConfig: hidden_size, heads, rms_norm_eps, ...);
    draft_vocab_size -> draft_vocab_size (`LlamaForCausalLMEagle3.__init__`); target_hidden_size ->
    target_hidden_size when set; eagle_aux_hidden_state_layer_ids (vLLM's numbering) -> eagle_config.
    eagle_aux_hidden_state_layer_ids in SGLang's (aux_layers.py); norm_before_fc ->
    eagle_config.norm_before_fc; fc_norm -> fc_norm; norm_output -> norm_output (all read in
    `LlamaModel.__init__`; with norm_output, `LlamaModel.forward` feeds the normed state back between
    draft steps). tie_word_embeddings is false: the drafter's lm_head is its own, of
    draft_vocab_size rows (`LlamaForCausalLMEagle3.__init__`)."""
    config = {key: value for key, value in drafter.layer_config.items() if key not in ("architectures", "auto_map")}
    eagle_config: dict[str, Any] = {}
    named = drafter.sglang_layer_ids(architecture, num_layers)
    if named is not None:
        eagle_config["eagle_aux_hidden_state_layer_ids"] = named
    if drafter.config.get("norm_before_fc"):
        eagle_config["norm_before_fc"] = True
    config.update(architectures=[SGLANG_ARCHITECTURE], model_type="llama", tie_word_embeddings=False,
                  draft_vocab_size=drafter.draft_vocab_size, eagle_config=eagle_config)
    if drafter.config.get("target_hidden_size"):
        config["target_hidden_size"] = drafter.config["target_hidden_size"]
    for flag in ("fc_norm", "norm_output"):
        if drafter.config.get(flag):
            config[flag] = True
    return config


def write_sglang(drafter: Drafter, out: Path, architecture: str, num_layers: int) -> Path:
    """`out` holding the speculators drafter in SGLang's layout: the rewritten config.json and a
    link to each weights file (the tensors are not copied)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(sglang_config(drafter, architecture, num_layers), indent=2) + "\n",
                                     encoding="utf-8")
    for file in sorted(drafter.path.glob("*.safetensors")):
        link = out / file.name
        if link.is_symlink() or link.exists():
            link.unlink()
        os.symlink(file.resolve(), link)
    return out


# What a drafter is worth served: acceptance figures from SGLang's per-request counts.
#
# Per request SGLang reports its verify steps, the drafts accepted over them and a histogram of drafts
# accepted per step (`engines.base.SpeculativeCounts`). From them, over any set of requests:
# - acceptance length: tokens each verify step yields, the target's own token plus the accepted drafts,
#   1 + accepted / steps (the trainers' tau = 1 + sum of full_acc_k measures the same thing offline);
# - tokens per verify step: completion tokens / steps, SGLang's own `spec_accept_length` (it also
#   counts the token the prefill made, so it is a little above the acceptance length on short outputs);
# - per position: the share of steps that accepted at least k drafts, k = 1, 2, ... (from the
#   histogram: the served counterpart of a trainer's per-position accuracy);
# - acceptance rate: accepted / proposed drafts.
# Totals are ratios of sums (every verify step weighs the same); the spread is over requests.


@dataclass(frozen=True)
class Served:
    """One row evaluated: where it came from and what the speculative engine reported for it."""

    config: str
    sample_id: int
    turn: int
    completion_tokens: int
    counts: SpeculativeCounts | None  # None: no verify step (an output of one token, or an error)
    equal_to_row: bool | None = None  # greedy only: the output is the row's recorded output
    equal_to_baseline: bool | None = None  # greedy only: the output is the engine's without speculation
    error: str | None = None
    # Where an unequal output first differs: {"row"|"baseline": [output position, its id, the other's id]}
    # (an id is None past an output's end). A near-tie of two logits in the engine's dtype shows as one id
    # swapped for another that the other engine ranks a hair lower.
    differences: dict[str, list] = field(default_factory=dict)

    def as_dict(self) -> dict:
        counts = self.counts
        return {"config": self.config, "sample_id": self.sample_id, "turn": self.turn,
                "completion_tokens": self.completion_tokens,
                "verify_steps": counts.verify_steps if counts else 0,
                "correct_drafts": counts.correct_drafts if counts else 0,
                "proposed_drafts": counts.proposed_drafts if counts else 0,
                "correct_drafts_histogram": list(counts.correct_drafts_histogram) if counts else [],
                "sglang_accept_length": counts.accept_length if counts else None,
                "equal_to_row": self.equal_to_row, "equal_to_baseline": self.equal_to_baseline,
                "first_differences": self.differences, "error": self.error}


def first_difference(output: Sequence[int], reference: Sequence[int]) -> list | None:
    """[position, output's id, reference's id] of the first output position where they differ (an
    id None past its sequence's end), None when they are equal."""
    for position in range(max(len(output), len(reference))):
        mine = output[position] if position < len(output) else None
        theirs = reference[position] if position < len(reference) else None
        if mine != theirs:
            return [position, mine, theirs]
    return None


def _unequal_label(served: Served, reference: str) -> str:
    """"B1_glaive:6 (output token 36: 16, not 20)": the row, and where its output first left the reference's."""
    label = f"{served.config}:{served.sample_id}"
    where = served.differences.get(reference)
    return label + (f" (output token {where[0]}: {where[1]}, not {where[2]})" if where else "")


def quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def acceptance(served: Iterable[Served], draft_steps: int | None = None) -> dict:
    """The figures of the module doc over `served` (rows without a verify step counted apart);
    `draft_steps`, the draft steps per verify, gives every position its figure (SGLang's histogram ends
    at the most drafts any step accepted)."""
    rows = list(served)
    counted = [s for s in rows if s.counts is not None and s.counts.verify_steps > 0]
    steps = sum(s.counts.verify_steps for s in counted)
    correct = sum(s.counts.correct_drafts for s in counted)
    proposed = sum(s.counts.proposed_drafts for s in counted)
    tokens = sum(s.completion_tokens for s in counted)
    per_request = [1 + s.counts.correct_drafts / s.counts.verify_steps for s in counted]
    width = max([len(s.counts.correct_drafts_histogram) for s in counted] + [draft_steps + 1 if draft_steps and counted else 0])
    histogram = [sum(s.counts.correct_drafts_histogram[k] for s in counted if k < len(s.counts.correct_drafts_histogram))
                 for k in range(width)]
    figures = {
        "rows": len(rows), "rows_without_steps": len(rows) - len(counted), "verify_steps": steps,
        "completion_tokens": tokens, "correct_drafts": correct, "proposed_drafts": proposed,
        "acceptance_length": 1 + correct / steps if steps else None,
        "tokens_per_step": tokens / steps if steps else None,
        "acceptance_rate": correct / proposed if proposed else None,
        "correct_drafts_histogram": histogram,
        "per_position": [sum(histogram[k:]) / sum(histogram) for k in range(1, width)] if sum(histogram) else [],
    }
    if per_request:
        figures["acceptance_length_spread"] = {
            "std": statistics.pstdev(per_request), "p10": quantile(per_request, 0.1),
            "p50": quantile(per_request, 0.5), "p90": quantile(per_request, 0.9)}
    return figures


def greedy_check(served: Sequence[Served]) -> dict:
    """Counts of greedy outputs equal / unequal to the row and to the engine without speculation,
    with the first unequal rows named (EAGLE's verification is lossless: each is a bug or a dtype
    difference between the engine that wrote the row and this one)."""
    result = {}
    for name, attribute in (("row", "equal_to_row"), ("baseline", "equal_to_baseline")):
        checked = [s for s in served if getattr(s, attribute) is not None]
        unequal = [s for s in checked if not getattr(s, attribute)]
        result[name] = {"checked": len(checked), "unequal": len(unequal),
                        "unequal_rows": [_unequal_label(s, name) for s in unequal[:10]]}
    return result


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


# The evaluation report as a table for the terminal (the JSON report holds the same figures).


def _number(value: Any, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def figure_line(name: str, turn: str, figures: dict[str, Any], positions: int) -> str:
    spread = figures.get("acceptance_length_spread") or {}
    band = f"{_number(spread.get('p10'))}-{_number(spread.get('p90'))}" if spread else "-"
    per_position = figures.get("per_position") or []
    cells = [_number(per_position[k]) if k < len(per_position) else "-" for k in range(positions)]
    return (f"{name:<20} {turn:>4} {figures['rows']:>5} {figures['verify_steps']:>7} "
            f"{_number(figures['acceptance_length']):>9} {band:>11} {_number(figures['tokens_per_step']):>10} "
            f"{_number(figures['acceptance_rate']):>5}  " + " ".join(f"{c:>5}" for c in cells)).rstrip()


def format_report(report: dict[str, Any]) -> str:
    settings = report.get("settings") or {}
    given = report.get("settings_given") or {}
    resolved = ", ".join(f"{ours} {settings.get(theirs, given.get(ours))}" for ours, theirs in SPECULATIVE_ARGS.items()
                         if ours != "draft_window_size" or given.get(ours))
    unset = [ours for ours, value in given.items() if value is None and ours != "draft_window_size"]
    positions = max((len(f.get("per_position") or []) for f in [report["overall"], *report["configs"].values()]), default=0)
    lines = [
        f"drafter {report['drafter']} ({report['layout']} layout) on {report['target']}, engine {report['engine']}, "
        f"{report['split']} rows, temperature {report['temperature']}",
        f"speculative decoding: {resolved}" + (f" ({', '.join(unset)}: {SGLANG_DEFAULTS})" if unset else ""),
        "",
        f"{'config':<20} {'turn':>4} {'rows':>5} {'steps':>7} {'accept':>9} {'p10-p90':>11} {'tok/step':>10} "
        f"{'rate':>5}  " + " ".join(f"{'>=' + str(k):>5}" for k in range(1, positions + 1)),
    ]
    for config, figures in report["configs"].items():
        lines.append(figure_line(config, "all", figures, positions))
        for turn, by_turn in figures.get("turns", {}).items():
            lines.append(figure_line("", turn, by_turn, positions))
    lines.append(figure_line("overall", "all", report["overall"], positions))
    greedy = report["greedy"]
    for name, what in (("row", "the rows' recorded outputs"), ("baseline", "the target's own outputs without speculation")):
        checked = greedy[name]
        if checked["checked"]:
            line = f"greedy: {checked['checked'] - checked['unequal']} of {checked['checked']} outputs equal to {what}"
            if checked["unequal"]:
                line += f"; unequal: {', '.join(checked['unequal_rows'])}"
            lines.append(line)
    speed = report["speed"]
    line = f"speed: {_number(speed['speculative_tokens_per_second'], 1)} tokens/s with the drafter"
    if "baseline_tokens_per_second" in speed:
        line += (f", {_number(speed['baseline_tokens_per_second'], 1)} without: "
                 f"{_number(speed['speedup'])}x")
    lines.append(line)
    if report.get("errors"):
        lines.append("errors: " + "; ".join(report["errors"]))
    return "\n".join(lines)
