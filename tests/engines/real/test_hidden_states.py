"""`hidden-states --engine sglang|sglang-http`: the real SGLang 0.5.23 (CPU backend, bf16) captures the
states, and every position of every row equals `--engine transformers --dtype bfloat16` within the
bound below, in both trainers' layouts, read back through each trainer's own reader.

Models: the tiny model (2 layers: the aux layer 1 and id 2, the final pre-norm state) and a random
8-layer copy of it (the trainers' default layers [2, 4, 5], all distinct and all SGLang's own aux
capture), in process and over HTTP against a server started with the flags `--dry-run` prints.

The bound: per row, position and state, max |SGLang - transformers bf16| <= BOUND x the largest
|value| of that state at that position. Two bf16 computations of the same layers differ by rounding
that grows with depth: here transformers bf16 against transformers float32 differs by up to 0.024 of
the scale at the 4-layer model's last state, SGLang against transformers bf16 by up to 0.023
(measured, benchmarks/README.md); BOUND leaves room for the 8-layer model. An off-by-one layer
differs by 0.7-20x the scale.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from eagle3_synth.cli import main

from ...support.real_sglang import TINY_MODEL, RealServer, sglang_env, sglang_python
from ...support.trainer_venvs import SPECFORGE, SPECULATORS, read_with, trainer_python
from ...train.test_hidden_states import prepare_like_speculators

CONFIG = "B1_glaive"
BOUND = 2 ** -4
# mem_fraction_static: a small KV cache beside the rest of the suite, not needed to start (the sizing test below).
ENGINE_ARGS = ["--engine-arg", "device=cpu", "--engine-arg", "mem_fraction_static=0.1"]
FLAGS_LINE = "SGLang server flags for these states: "


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """B1's bundled prompts, greedy, by the tiny model (bf16), and its ids export."""
    sglang_python()  # skip (or fail under EAGLE3_SYNTH_REQUIRE_SGLANG=1) before building anything
    root = tmp_path_factory.mktemp("hidden")
    assert main(["build", CONFIG, "--model", str(TINY_MODEL), "--temperature", "0", "--max-new-tokens", "32",
                 "--dtype", "bfloat16", "--out", str(root / "ds")]) == 0
    assert main(["export", str(root / "ds"), CONFIG, "--format", "ids", "--no-text", "--out", str(root / "ids.jsonl")]) == 0
    return root


@pytest.fixture(scope="module")
def eight_layers(tmp_path_factory) -> Path:
    """A random 8-layer model of the tiny model's shapes and tokenizer (seeded)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    dest = tmp_path_factory.mktemp("eight") / "tiny-8l"
    config = AutoConfig.from_pretrained(TINY_MODEL)
    config.num_hidden_layers = 8
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():  # larger weights than the 0.02 init, so the layers' states differ visibly
        for parameter in model.parameters():
            if parameter.dim() == 2:
                parameter.normal_(0.0, 0.08)
    model.save_pretrained(dest)
    for item in TINY_MODEL.iterdir():
        if item.is_file() and not (dest / item.name).exists() and item.suffix != ".safetensors":
            shutil.copy2(item, dest / item.name)
    return dest


def hidden_states(*args: str) -> list[str]:
    return ["hidden-states", *args, "--no-progress"]


def in_sglang_venv(argv: list[str]) -> str:
    """`eagle3-synth ARGV` in the SGLang venv (the in-process engine); its output."""
    command = [str(Path(sglang_python()).parent / "eagle3-synth"), *argv]
    done = subprocess.run(command, capture_output=True, text=True, env={**sglang_env(), "SGLANG_USE_CPU_ENGINE": ""})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def server_flags(capsys, argv: list[str]) -> list[str]:
    """The flags `--dry-run` prints for a server these states can be read from."""
    assert main([*argv, "--engine", "sglang-http", "--url", "http://127.0.0.1:9", "--dry-run"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if FLAGS_LINE in line)
    return shlex.split(line.split(FLAGS_LINE, 1)[1])


def assert_close_states(actual: torch.Tensor, expected: torch.Tensor, what: str) -> float:
    """Every position of [T, H] `actual` within BOUND of `expected`'s scale there; the worst ratio."""
    assert actual.shape == expected.shape, (what, actual.shape, expected.shape)
    a, e = actual.float(), expected.float()
    ratio = (a - e).abs().amax(dim=-1) / e.abs().amax(dim=-1).clamp_min(1e-6)
    worst = float(ratio.max())
    assert worst <= BOUND, f"{what}: position {int(ratio.argmax())} differs by {worst:.3f} of its scale (bound {BOUND})"
    return worst


def compare_specforge(got: Path, want: Path, n_aux: int) -> None:
    files = sorted(p.name for p in want.glob("*.ckpt"))
    assert files and sorted(p.name for p in got.glob("*.ckpt")) == files
    for name in files:
        g, w = torch.load(got / name, weights_only=True), torch.load(want / name, weights_only=True)
        assert torch.equal(g["input_ids"], w["input_ids"]) and torch.equal(g["loss_mask"], w["loss_mask"])
        assert g["hidden_state"].dtype == g["aux_hidden_state"].dtype == torch.bfloat16
        assert_close_states(g["hidden_state"][0], w["hidden_state"][0], f"{name} hidden_state")
        for k in range(n_aux):
            h = w["hidden_state"].shape[-1]
            assert_close_states(g["aux_hidden_state"][0, :, k * h:(k + 1) * h], w["aux_hidden_state"][0, :, k * h:(k + 1) * h],
                                f"{name} aux {k}")


def compare_speculators(got: Path, want: Path) -> None:
    from safetensors.torch import load_file

    files = sorted(p.name for p in (want / "hidden_states").glob("hs_*.safetensors"))
    assert files and sorted(p.name for p in (got / "hidden_states").glob("hs_*.safetensors")) == files
    for name in files:
        g, w = load_file(str(got / "hidden_states" / name)), load_file(str(want / "hidden_states" / name))
        assert torch.equal(g["token_ids"], w["token_ids"]) and g["hidden_states"].dtype == torch.bfloat16
        for k in range(w["hidden_states"].shape[1]):
            assert_close_states(g["hidden_states"][:, k], w["hidden_states"][:, k], f"{name} state {k}")


SIZING = """
import json, sys
from sglang.srt.arg_groups.overrides import resolved_view
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.common import get_device_memory_capacity
for given in json.loads(sys.argv[1]):
    args = ServerArgs(**given)
    args.resolve_once()
    print(json.dumps([get_device_memory_capacity("cpu"), resolved_view(args).mem_fraction_static]))
"""


def test_sglangs_own_sizing_of_the_capture_reserves_what_its_longest_row_needs():
    """SGLang 0.5.23 resolving the server arguments the capture starts it with (no engine started):
    with chunked prefill off it reserves 1.5 MB a token of max_prefill_tokens for activations, taken
    off the machine's memory for mem_fraction_static. Its default (16,384 tokens, ~25 GB) left a 24 GB
    machine a negative mem_fraction_static; the capture's (the longest row, at least 2,048) leaves a
    few GB, or SGLang's own 10 GB floor above 60 GB (srt/arg_groups/memory_hook.py)."""
    from transformers import AutoConfig

    from eagle3_synth.train.hidden_states.sglang_capture import plan_capture

    plan = plan_capture([1, 2], AutoConfig.from_pretrained(TINY_MODEL), longest=300)
    base = {"model_path": str(TINY_MODEL), "device": "cpu", "dtype": "bfloat16", "skip_tokenizer_init": True}
    ours = {**base, **plan.server_args()}
    default = {key: value for key, value in ours.items() if key != "max_prefill_tokens"}
    done = subprocess.run([str(sglang_python()), "-c", SIZING, json.dumps([ours, default])], capture_output=True,
                          text=True, env=sglang_env(), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (capacity, fraction), (_, default_fraction) = map(json.loads, done.stdout.splitlines()[-2:])
    rounding = capacity * 0.0005  # SGLang rounds the fraction to 3 decimals
    assert capacity * (1 - default_fraction) >= 16384 * 1.5 - rounding  # what the default reserves
    assert capacity * (1 - fraction) <= max(512 + 2048 * 1.5 + 1024, 10 * 1024) + rounding


def test_in_process_sglang_writes_the_transformers_states_and_passes_check(built, tmp_path):
    prepared = prepare_like_speculators(built, tmp_path / "prep")
    reference = prepare_like_speculators(built, tmp_path / "prep-transformers")
    layers = ["--layers", "1", "2"]  # the tiny model's: the aux layer 1 and id 2, the final pre-norm state
    assert main(hidden_states(str(built / "ds"), CONFIG, "--format", "speculators", "--prepared", str(reference),
                              *layers, "--dtype", "bfloat16")) == 0
    out = in_sglang_venv(hidden_states(str(built / "ds"), CONFIG, "--format", "speculators", "--prepared", str(prepared),
                                       *layers, "--engine", "sglang", *ENGINE_ARGS, "--check"))
    assert "wrote 6 files" in out and "check: 6 rows, logits reproduced within" in out, out
    assert "greedy positions compared" in out and "argmax is not" not in out, out
    compare_speculators(prepared, reference)

    # speculators' own reader takes every file (token ids matched to its prepared rows).
    samples = read_with(trainer_python(SPECULATORS), "speculators", str(prepared))
    assert len(samples) == 6 and all("unavailable" not in s for s in samples), samples
    assert all(s["hidden_states"]["shape"][1] == 2 * 128 and s["verifier_last_hidden_states"]["shape"][1] == 128
               for s in samples)

    assert not (prepared / "hidden_states" / ".sglang-states").exists()  # the hook's files, read and removed

    # A rerun finds every file whole and starts no engine.
    again = in_sglang_venv(hidden_states(str(built / "ds"), CONFIG, "--format", "speculators", "--prepared",
                                         str(prepared), *layers, "--engine", "sglang", *ENGINE_ARGS))
    assert "wrote 0 files" in again and "6 rows already written" in again

    # The states in SGLang's response instead of files: the same states.
    via_response = prepare_like_speculators(built, tmp_path / "prep-response")
    out = in_sglang_venv(hidden_states(str(built / "ds"), CONFIG, "--format", "speculators", "--prepared",
                                       str(via_response), *layers, "--engine", "sglang", *ENGINE_ARGS,
                                       "--states-via", "response"))
    assert "wrote 6 files" in out and "--forward-hooks" in out and '"config": {}' in out
    compare_speculators(via_response, reference)


def test_a_server_started_with_the_printed_flags_gives_both_layouts_of_an_eight_layer_model(built, eight_layers, tmp_path,
                                                                                             capsys):
    base = [str(built / "ds"), CONFIG, "--model", str(eight_layers)]  # default layers [2, 4, 5]
    specforge = [*base, "--format", "specforge"]
    flags = server_flags(capsys, [*hidden_states(*specforge, "--out", str(tmp_path / "dry"))])
    assert "--enable-return-aux-hidden-states" in flags and "--disable-radix-cache" in flags
    assert flags[flags.index("--return-aux-hidden-state-layer-ids") + 1:][:3] == ["1", "3", "4"]  # plus one: 2, 4, 5

    assert main(hidden_states(*specforge, "--out", str(tmp_path / "sf-transformers"), "--dtype", "bfloat16")) == 0
    prepared, reference = (prepare_like_speculators(built, tmp_path / name) for name in ("prep", "prep-transformers"))
    assert main(hidden_states(*base, "--format", "speculators", "--prepared", str(reference), "--dtype", "bfloat16")) == 0

    with RealServer(tmp_path / "server.log", eight_layers, *flags) as server:
        http = ["--engine", "sglang-http", "--url", server.url]
        assert main(hidden_states(*specforge, "--out", str(tmp_path / "sf"), *http)) == 0
        # Two shards, one after the other, write the folder one run would.
        for index in ("0", "1"):
            assert main(hidden_states(*base, "--format", "speculators", "--prepared", str(prepared), *http,
                                      "--num-shards", "2", "--shard-index", index)) == 0
    compare_specforge(tmp_path / "sf", tmp_path / "sf-transformers", n_aux=3)
    compare_speculators(prepared, reference)
    samples = read_with(trainer_python(SPECFORGE), "specforge", str(tmp_path / "sf"))
    # SpecForge's names: `hidden_state` is its input (our aux states), `target` the normed state.
    assert len(samples) == 6 and all(s["hidden_state"]["shape"][-1] == 3 * 128 and s["target"]["shape"][-1] == 128
                                     for s in samples), samples


def test_a_server_without_the_capture_flags_is_refused_before_any_row(built, tmp_path, capsys):
    prepared = prepare_like_speculators(built, tmp_path / "prep")
    with RealServer(tmp_path / "server.log", TINY_MODEL, "--enable-return-hidden-states") as server:
        code = main(hidden_states(str(built / "ds"), CONFIG, "--format", "speculators", "--prepared", str(prepared),
                                  "--layers", "1", "2", "--engine", "sglang-http", "--url", server.url))
    text = capsys.readouterr()
    assert code == 2, text
    assert f"--url {server.url}: this server cannot return the states asked for" in text.err
    assert "disable_radix_cache is False, not True" in text.err and "--disable-radix-cache" in text.err
    assert "--forward-hooks" in text.err
    assert not list((prepared / "hidden_states").glob("hs_*"))
