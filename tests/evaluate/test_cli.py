"""`eagle3-synth evaluate`'s checks before any engine starts, run where SGLang is not installed: a
refusal here is proof it came before the engine (which would fail first on the missing SGLang)."""

from __future__ import annotations

import json

import pytest

from eagle3_synth.cli import main

from ..conftest import TINY_MODEL
from .test_drafter import sglang_drafter, speculators_drafter


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("ds")
    assert main(["build", "B1_glaive", "--model", str(TINY_MODEL), "--temperature", "0", "--max-new-tokens", "8",
                 "--validation", "1", "--out", str(out)]) == 0
    return out


def test_a_misfit_drafter_is_refused_before_the_engine_starts(dataset, tmp_path, capsys):
    drafter = speculators_drafter(tmp_path / "d", norm_before_residual=True)
    assert main(["evaluate", str(dataset), "B1_glaive", "--drafter", str(drafter), "--engine-arg", "device=cpu",
                 "--dtype", "bfloat16"]) == 2
    err = capsys.readouterr().err
    assert f"--drafter {drafter} does not fit the target {TINY_MODEL} (LlamaForCausalLM)" in err
    assert "norm_before_residual=true" in err and "sglang" not in err.lower().split("does not fit")[0]


def test_sampled_speculative_decoding_on_sglangs_cpu_backend_is_refused(dataset, tmp_path, capsys):
    drafter = str(sglang_drafter(tmp_path / "d"))
    assert main(["evaluate", str(dataset), "B1_glaive", "--drafter", drafter, "--engine-arg", "device=cpu",
                 "--dtype", "bfloat16", "--temperature", "0.7"]) == 2
    assert ("--engine sglang on a CPU serves speculative decoding greedy only (1 of 1 rows would be sampled): SGLang "
            "0.5.23 has no CPU kernel for speculative sampling") in capsys.readouterr().err


def test_sglang_http_needs_its_servers(dataset, tmp_path, capsys):
    drafter = str(sglang_drafter(tmp_path / "d"))
    assert main(["evaluate", str(dataset), "--drafter", drafter, "--engine", "sglang-http"]) == 2
    assert "--engine sglang-http needs --url: a server started with the drafter (see --dry-run)" in capsys.readouterr().err
    assert main(["evaluate", str(dataset), "--drafter", drafter, "--engine", "sglang-http", "--url", "http://x:1"]) == 2
    assert "give --baseline-url (a server of the target alone) or --no-baseline" in capsys.readouterr().err
    assert main(["evaluate", str(dataset), "--drafter", drafter, "--num-steps", "0"]) == 2
    assert "--num-steps must be >= 1, got 0" in capsys.readouterr().err


def test_dry_run_prints_the_server_command_of_the_converted_drafter(dataset, tmp_path, capsys):
    drafter = speculators_drafter(tmp_path / "d")
    config = json.loads((drafter / "config.json").read_text())
    config["transformer_layer_config"].update(layer_types=["sliding_attention"], sliding_window=512, use_sliding_window=True)
    (drafter / "config.json").write_text(json.dumps(config))
    served = tmp_path / "served"
    assert main(["evaluate", str(dataset), "B1_glaive", "--drafter", str(drafter), "--dry-run", "--num-steps", "3",
                 "--sglang-drafter", str(served), "--dtype", "bfloat16", "--engine-arg", "device=cpu"]) == 0
    out = capsys.readouterr().out
    assert (f"python -m sglang.launch_server --model-path {TINY_MODEL} --skip-tokenizer-init --speculative-algorithm EAGLE3 "
            f"--speculative-draft-model-path {served} --dtype bfloat16 --speculative-num-steps 3 "
            "--speculative-draft-window-size 512 --device cpu") in out
    assert json.loads((served / "config.json").read_text())["architectures"] == ["LlamaForCausalLMEagle3"]


def test_an_option_the_engine_does_not_use_is_refused(dataset, tmp_path, capsys):
    """--url with the in-process engine, --engine-arg and --dtype with servers that run their own
    arguments: refused before anything is read; --dry-run prints them into the server's command."""
    drafter = str(sglang_drafter(tmp_path / "d"))
    http = ["evaluate", str(dataset), "--drafter", drafter, "--engine", "sglang-http", "--url", "http://x:1",
            "--no-baseline"]
    assert main(["evaluate", str(dataset), "--drafter", drafter, "--url", "http://x:1"]) == 2
    assert capsys.readouterr().err == ("eagle3-synth evaluate: error: --url is not used by --engine sglang, only by "
                                       "--engine sglang-http: give --engine sglang-http, or drop --url\n")
    assert main(["evaluate", str(dataset), "--drafter", drafter, "--baseline-url", "http://x:2"]) == 2
    assert "--baseline-url is not used by --engine sglang, only by --engine sglang-http" in capsys.readouterr().err
    assert main([*http, "--engine-arg", "device=cpu"]) == 2
    assert ("--engine-arg is not used by --engine sglang-http, only by --engine sglang; an SGLang server takes its "
            "arguments as its own launch flags") in capsys.readouterr().err
    assert main([*http, "--dtype", "bfloat16"]) == 2
    assert "--dtype is not used by --engine sglang-http, only by --engine sglang" in capsys.readouterr().err
    assert main([*http, "--dtype", "bfloat16", "--engine-arg", "device=cpu", "--dry-run"]) == 0
    assert "--dtype bfloat16" in capsys.readouterr().out


def test_a_target_folder_without_weights_is_refused_before_the_engine_starts(dataset, tmp_path, capsys):
    import shutil

    weightless = tmp_path / "model"
    shutil.copytree(TINY_MODEL, weightless, ignore=shutil.ignore_patterns("*.safetensors"))
    drafter = str(sglang_drafter(tmp_path / "d"))
    assert main(["evaluate", str(dataset), "--drafter", drafter, "--model", str(weightless), "--temperature", "0"]) == 2
    assert (f"--model {weightless}: no weights (*.safetensors, *.bin, *.pt), and --engine sglang loads the model "
            "from this folder") in capsys.readouterr().err
