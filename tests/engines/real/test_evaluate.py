"""`eagle3-synth evaluate` on the real SGLang 0.5.23 (CPU, bf16), serving EAGLE-3 drafters with its own
speculative decoder: in-process (`--engine sglang`, eagle3-synth run in the SGLang venv) and over HTTP
against a real `launch_server` started with the drafter.

The drafter here is random (an SGLang-layout `LlamaForCausalLMEagle3` of the tiny model's shapes,
its two aux layers the ones SGLang can capture from a 2-layer target): it should be accepted about
never, and EAGLE's verification is lossless, so every greedy output equals the row's and the
target's own. A trained drafter is served at the end of the train demo (tests/examples/test_train_demo.py).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from eagle3_synth.cli import main
from stand_ins.drafters import random_drafter

from ...support.real_sglang import TINY_MODEL, RealServer, sglang_env, sglang_python


CONFIG = "B1_glaive"
SPECULATIVE = ["--num-steps", "3", "--eagle-topk", "2", "--num-draft-tokens", "4"]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    """B1's bundled prompts, greedy, through the transformers engine in bf16, two conversations held out."""
    sglang_python()  # skip (or fail under EAGLE3_SYNTH_REQUIRE_SGLANG=1) before building anything
    out = tmp_path_factory.mktemp("ds")
    assert main(["build", CONFIG, "--model", str(TINY_MODEL), "--temperature", "0", "--max-new-tokens", "48",
                 "--dtype", "bfloat16", "--validation", "2", "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def drafter(tmp_path_factory) -> Path:
    return random_drafter(tmp_path_factory.mktemp("drafter") / "random")


def check_report(report: dict, rows: int) -> None:
    """What every evaluation of the random drafter shows, and its figures recomputed from its requests."""
    requests, overall = report["requests"], report["overall"]
    assert report["split"] == "validation" and overall["rows"] == len(requests) == rows
    assert all(r["verify_steps"] > 0 and r["error"] is None for r in requests), requests
    # The figures are SGLang's counts summed: recomputed here from the per-request counts, and each
    # request's tokens per step equal to SGLang's own spec_accept_length for it.
    steps = sum(r["verify_steps"] for r in requests)
    assert overall["verify_steps"] == steps
    assert overall["acceptance_length"] == pytest.approx(1 + sum(r["correct_drafts"] for r in requests) / steps)
    assert overall["tokens_per_step"] == pytest.approx(sum(r["completion_tokens"] for r in requests) / steps)
    for r in requests:
        assert r["completion_tokens"] / r["verify_steps"] == pytest.approx(r["sglang_accept_length"])
        assert sum(r["correct_drafts_histogram"]) == r["verify_steps"]
    # A random drafter is (about) never accepted; every greedy output is the row's, speculation lossless.
    assert 1.0 <= overall["acceptance_length"] < 1.25, overall
    assert report["greedy"]["row"] == {"checked": rows, "unequal": 0, "unequal_rows": []}, report["greedy"]


def test_in_process_evaluation_of_a_random_drafter(dataset, drafter, tmp_path):
    report_file = tmp_path / "report.json"
    command = [str(Path(sglang_python()).parent / "eagle3-synth"), "evaluate", str(dataset), CONFIG, "--drafter", str(drafter),
               "--temperature", "0", "--dtype", "bfloat16", "--engine-arg", "device=cpu",
               "--engine-arg", "mem_fraction_static=0.1", *SPECULATIVE, "--report", str(report_file)]
    done = subprocess.run(command, capture_output=True, text=True, env={**sglang_env(), "SGLANG_USE_CPU_ENGINE": ""})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(report_file.read_text())
    check_report(report, rows=2)
    assert report["greedy"]["baseline"] == {"checked": 2, "unequal": 0, "unequal_rows": []}
    settings = report["settings"]
    assert (settings["speculative_num_steps"], settings["speculative_eagle_topk"],
            settings["speculative_num_draft_tokens"]) == (3, 2, 4)
    assert report["overall"]["per_position"] and len(report["overall"]["per_position"]) == 3
    assert report["speed"]["speedup"] > 0
    assert "speculative decoding: num_steps 3, eagle_topk 2, num_draft_tokens 4" in done.stdout
    assert "greedy: 2 of 2 outputs equal to the rows' recorded outputs" in done.stdout


def test_evaluation_over_http_against_a_server_started_with_the_drafter(dataset, drafter, tmp_path):
    # The server command evaluate --dry-run prints is the one started here (less its host and port).
    report_file = tmp_path / "report.json"
    spec_args = ("--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(drafter),
                 "--speculative-num-steps", "2", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "3")
    with RealServer(tmp_path / "server.log", TINY_MODEL, *spec_args) as server:
        assert main(["evaluate", str(dataset), CONFIG, "--drafter", str(drafter), "--engine", "sglang-http",
                     "--url", server.url, "--no-baseline", "--temperature", "0", "--report", str(report_file)]) == 0
    report = json.loads(report_file.read_text())
    check_report(report, rows=2)
    assert report["settings"]["speculative_num_steps"] == 2 and report["settings"]["speculative_algorithm"] == "EAGLE3"
    assert "baseline_tokens_per_second" not in report["speed"]
