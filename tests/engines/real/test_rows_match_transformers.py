"""The real SGLang 0.5.23 (CPU backend, bf16) writes the rows the transformers engine writes.

Every config's bundled prompts at temperature 0, over HTTP against one real `launch_server` and
in-process through `--engine sglang` (eagle3-synth run in the SGLang venv), against `--engine
transformers --dtype bfloat16 --batch-size 1`; B2 also with `--turns all` tool loops and two
samples per prompt. A row that differs fails with both ids and the logit margin there
(support/row_parity.py).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from eagle3_synth.cli import main
from eagle3_synth.prompts.configs import BUILTIN_CONFIGS

from ...support.cli_processes import config_rows
from ...support.real_sglang import TINY_MODEL, sglang_env, sglang_python
from ...support.row_parity import assert_same_rows


GREEDY = ["--model", str(TINY_MODEL), "--temperature", "0", "--max-new-tokens", "256", "--dtype", "bfloat16"]
TOOL_LOOPS = ("--turns", "all", "--samples-per-prompt", "2")
CASES = [(config, ()) for config in sorted(BUILTIN_CONFIGS)] + [("B2_hermes_fc", TOOL_LOOPS)]


def case_id(case: tuple[str, tuple[str, ...]]) -> str:
    config, extra = case
    return config + ("-turns-all" if extra else "")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """config, extra -> the transformers engine's rows (bf16, one prompt per generate call)."""
    built: dict[tuple[str, tuple[str, ...]], list[dict]] = {}

    def rows(config: str, extra: tuple[str, ...]) -> list[dict]:
        if (config, extra) not in built:
            out = tmp_path_factory.mktemp("transformers")
            assert main(["build", config, *GREEDY, *extra, "--engine", "transformers", "--batch-size", "1",
                         "--out", str(out)]) == 0
            built[(config, extra)] = config_rows(out, config)
        return built[(config, extra)]

    return rows


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_sglang_http_rows_equal_the_transformers_engine_rows(case, server, reference, tmp_path):
    config, extra = case
    assert main(["build", config, *GREEDY, *extra, "--engine", "sglang-http", "--url", server.url,
                 "--out", str(tmp_path)]) == 0
    assert_same_rows(config_rows(tmp_path, config), reference(config, extra), TINY_MODEL)


@pytest.mark.parametrize("case", [("B1_glaive", ()), ("B2_hermes_fc", TOOL_LOOPS)], ids=case_id)
def test_the_in_process_sglang_engine_rows_equal_the_transformers_engine_rows(case, reference, tmp_path):
    """`--engine sglang`: SGLang's offline Engine inside eagle3-synth, which therefore runs with the
    SGLang venv's interpreter; `device=cpu` switches SGLang's CPU backend on by itself."""
    config, extra = case
    command = [str(Path(sglang_python()).parent / "eagle3-synth"), "build", config, *GREEDY, *extra,
               "--engine", "sglang", "--engine-arg", "device=cpu", "--engine-arg", "mem_fraction_static=0.1",
               "--out", str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, env={**sglang_env(), "SGLANG_USE_CPU_ENGINE": ""})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert_same_rows(config_rows(tmp_path, config), reference(config, extra), TINY_MODEL)
