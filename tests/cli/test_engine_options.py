"""No silent option: an option the chosen engine does not use, an `--engine-arg` that is no SGLang
server argument, a `--model` folder that holds no model, each refused in one line naming it before
anything loads (--dry-run too)."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest

from eagle3_synth.cli import main
from eagle3_synth.engines import ENGINE_OPTIONS, ENGINES
from eagle3_synth.engines.sglang import engine as sglang_engine
from eagle3_synth.errors import ConfigError
from eagle3_synth.prompts.configs import sample_prompts_path
from eagle3_synth.run.preflight import check_before_loading
from eagle3_synth.run.settings import GenerationSettings

from ..conftest import KIMI_TOKENIZER, TINY_MODEL
from ..support.fake_sglang import FIELDS
from ..support.cli_runs import write_replay

CONFIG = "B1_glaive"
PROMPTS = str(sample_prompts_path(CONFIG))
HAS_SGLANG = importlib.util.find_spec("sglang") is not None


def refused(argv: list[str], capsys) -> str:
    """The one stderr line of a command that exits 2 (argparse's own errors exit through SystemExit)."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    assert code == 2 and "Traceback" not in captured.err, captured.err
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    return lines[0]


def build(out: Path, *extra: str, model: Path = TINY_MODEL) -> list[str]:
    return ["build", CONFIG, "--model", str(model), "--prompts", PROMPTS, "--out", str(out), *extra]


# -- an option the engine does not use -------------------------------------------------------------

UNUSED = [
    # The issue's own: someone who forgot --engine sglang-http.
    ((), ("--url", "http://localhost:1"), "--url is not used by --engine transformers, only by --engine sglang-http: "
                                          "give --engine sglang-http, or drop --url"),
    ((), ("--max-in-flight", "5"), "--max-in-flight is not used by --engine transformers, only by --engine sglang "
                                   "and sglang-http"),
    ((), ("--engine-arg", "tp_size=8"), "--engine-arg is not used by --engine transformers, only by --engine sglang: "
                                        "give --engine sglang, or drop --engine-arg"),
    ((), ("--engine-arg", "foo=bar"), "--engine-arg is not used by --engine transformers, only by --engine sglang"),
    ((), ("--priority", "turns-left"), "--priority is not used by --engine transformers, only by --engine sglang and "
                                       "sglang-http"),
    ((), ("--request-timeout", "60"), "--request-timeout is not used by --engine transformers, only by --engine "
                                      "sglang-http"),
    ((), ("--max-retries", "2"), "--max-retries is not used by --engine transformers, only by --engine sglang and "
                                 "sglang-http"),
    ((), ("--replay", PROMPTS), "--replay is not used by --engine transformers, only by --engine replay"),
    (("--engine", "sglang"), ("--device", "cuda"), "--device is not used by --engine sglang, only by --engine "
                                                   "transformers; SGLang places the model itself"),
    (("--engine", "sglang"), ("--batch-size", "4"), "--batch-size is not used by --engine sglang, only by --engine "
                                                    "transformers"),
    (("--engine", "sglang-http", "--url", "http://127.0.0.1:1"), ("--engine-arg", "tp_size=8"),
     "--engine-arg is not used by --engine sglang-http, only by --engine sglang; an SGLang server takes its "
     "arguments as its own launch flags (python -m sglang.launch_server --tp-size 8 ...)"),
    (("--engine", "replay", "--replay", PROMPTS), ("--dtype", "bfloat16"),
     "--dtype is not used by --engine replay, only by --engine transformers, sglang and sglang-http; no model "
     "runs: the replay file holds the outputs"),
]


@pytest.mark.parametrize("engine, option, message", UNUSED, ids=[" ".join(case[0][:2] + case[1]) for case in UNUSED])
@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry-run"])
def test_an_option_the_engine_does_not_use_is_refused_before_anything_loads(tmp_path, capsys, monkeypatch,
                                                                           engine, option, message, dry_run):
    def no_engine(*args):
        raise AssertionError("an engine was created")

    monkeypatch.setattr("eagle3_synth.run.generate.create_engine", no_engine)
    out = tmp_path / "ds"
    line = refused(build(out, *engine, *option, *(["--dry-run"] if dry_run else [])), capsys)
    assert line.startswith(f"eagle3-synth build: error: {message}")
    assert not out.exists()


def test_generate_refuses_the_same(tmp_path, capsys):
    line = refused(["generate", CONFIG, "--model", str(TINY_MODEL), "--prompts", PROMPTS, "--run-dir",
                    str(tmp_path / "run"), "--url", "http://localhost:1"], capsys)
    assert line.startswith("eagle3-synth generate: error: --url is not used by --engine transformers")
    assert not (tmp_path / "run").exists()


def test_every_option_of_the_table_is_one_of_the_generating_commands_or_of_hidden_states_and_evaluate():
    from eagle3_synth.cli import make_parser

    parser = make_parser()
    helps = " ".join(parser.commands[command].format_help() for command in ("build", "hidden-states", "evaluate"))
    assert [name for name in ENGINE_OPTIONS if not re.search(rf"(?<![\w-]){name}(?![\w-])", helps)] == []
    assert {engine for users in ENGINE_OPTIONS.values() for engine in users} <= set(ENGINES)


def test_defaults_given_on_the_command_line_are_not_refused(tmp_path, kimi_tokenizer, capsys):
    """Only a value other than the default counts as given: `--max-retries 8` is what every run has."""
    write_replay(tmp_path / "replay.jsonl", kimi_tokenizer, 3)
    argv = ["build", CONFIG, "--model", str(KIMI_TOKENIZER), "--engine", "replay", "--replay",
            str(tmp_path / "replay.jsonl"), "--prompts", PROMPTS, "--limit", "3", "--out", str(tmp_path / "ds"),
            "--batch-size", "8", "--max-retries", "8", "--request-timeout", "3600", "--priority", "none", "--dry-run"]
    assert main(argv) == 0, capsys.readouterr().err


def test_the_builders_kwargs_are_refused_the_same(tmp_path):
    """The builder's config is the same settings: its kwargs go through the same table."""
    from builders.eagle3_synth_builder import Eagle3Synth

    with pytest.raises(ConfigError, match=r"^--url is not used by --engine transformers, only by --engine sglang-http"):
        Eagle3Synth(config_name=CONFIG, model=str(TINY_MODEL), urls=["http://localhost:1"], cache_dir=str(tmp_path))
    with pytest.raises(ConfigError, match=r"^--engine-arg is not used by --engine transformers"):
        GenerationSettings(model=str(TINY_MODEL), engine_args={"tp_size": 8})
    GenerationSettings(model=str(TINY_MODEL), engine="sglang", engine_args={"tp_size": 8}, max_in_flight=4,
                       priority="turns-left", max_retries=2)
    GenerationSettings(model=str(TINY_MODEL), engine="sglang-http", urls=("http://x:1",), request_timeout=60.0,
                       dtype="bfloat16")


# -- --engine-arg against SGLang's ServerArgs ------------------------------------------------------

@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry-run"])
def test_an_engine_arg_that_is_no_server_argument_is_refused_before_the_prompts(tmp_path, capsys, monkeypatch,
                                                                              dry_run):
    """Where SGLang is installed (here: its ServerArgs fields, the engine class never started), an
    unknown key names the nearest real ones, before the prompts are prepared or the engine starts."""
    started = []

    class NeverStarted:
        def __init__(self, **kwargs):
            started.append(kwargs)

    monkeypatch.setattr(sglang_engine, "import_sglang", lambda: (NeverStarted, FIELDS))
    monkeypatch.setattr(sglang_engine, "import_server_args", lambda: FIELDS)
    out = tmp_path / "ds"
    line = refused(build(out, "--engine", "sglang", "--engine-arg", "tp_sise=2", *(["--dry-run"] if dry_run else [])),
                   capsys)
    assert line == ("eagle3-synth build: error: --engine-arg tp_sise: not an SGLang ServerArgs field; did you mean "
                    "tp_size, dp_size, attn_dp_size?")
    line = refused(build(out, "--engine", "sglang", "--engine-arg", "mem_fraction_static=lots"), capsys)
    assert line == 'eagle3-synth build: error: --engine-arg mem_fraction_static="lots": expected a number'
    assert started == [] and not out.exists()


@pytest.mark.skipif(HAS_SGLANG, reason="sglang is installed here")
def test_without_sglang_the_engine_args_are_left_to_the_engine(tmp_path, capsys):
    """No ServerArgs to check against: a dry run (no engine) goes on; the engine's start says SGLang is missing."""
    out = tmp_path / "ds"
    assert main(build(out, "--engine", "sglang", "--engine-arg", "tp_sise=2", "--dry-run")) == 0
    line = refused(build(out, "--engine", "sglang", "--engine-arg", "tp_sise=2"), capsys)
    assert line.startswith("eagle3-synth build: error: --engine sglang needs SGLang in this environment")


# -- a --model folder that holds no model ----------------------------------------------------------

def model_copy(tmp_path: Path, change) -> Path:  # noqa: ANN001 - a function of the folder
    folder = tmp_path / "model"
    shutil.copytree(TINY_MODEL, folder)
    change(folder)
    return folder


def without_model_type(folder: Path) -> None:
    config = json.loads((folder / "config.json").read_text())
    del config["model_type"]
    (folder / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize("engine", ["transformers", "sglang"])
def test_a_tokenizer_folder_as_model_is_refused_before_the_prompts(tmp_path, capsys, monkeypatch, engine):
    monkeypatch.setattr(sglang_engine, "import_sglang", lambda: (object, FIELDS))
    monkeypatch.setattr(sglang_engine, "import_server_args", lambda: FIELDS)
    prepared = []
    for step in ("stage", "survey"):  # the prompts' preparation, of a run and of a dry run
        monkeypatch.setattr(f"eagle3_synth.run.generate.{step}", lambda *a, **k: prepared.append(a))
    out = tmp_path / "ds"
    for extra in ([], ["--dry-run"]):
        line = refused(build(out, "--engine", engine, *extra, model=KIMI_TOKENIZER), capsys)
        assert line == (f"eagle3-synth build: error: --model {KIMI_TOKENIZER}: no config.json and no weights "
                        f"(*.safetensors, *.bin, *.pt), and --engine {engine} loads the model from this folder "
                        "(a folder with only a tokenizer is --tokenizer, or --model of --engine replay)")
    assert prepared == [] and not out.exists()


def test_a_model_folder_without_model_type_or_weights_names_what_is_missing(tmp_path, capsys):
    folder = model_copy(tmp_path, without_model_type)
    line = refused(build(tmp_path / "ds", model=folder), capsys)
    assert line.startswith(f"eagle3-synth build: error: --model {folder}: its config.json has no model_type, and "
                           "--engine transformers loads the model from this folder")
    shutil.rmtree(folder)
    folder = model_copy(tmp_path, lambda f: (f / "model.safetensors").unlink())
    line = refused(build(tmp_path / "ds", model=folder, *["--dry-run"]), capsys)
    assert line.startswith(f"eagle3-synth build: error: --model {folder}: no weights (*.safetensors, *.bin, *.pt), and "
                           "--engine transformers loads")


def test_load_format_tells_sglang_where_the_weights_come_from(tmp_path, capsys, monkeypatch):
    """`--engine-arg load_format=dummy` (random weights) needs none in the folder; a config.json still."""
    monkeypatch.setattr(sglang_engine, "import_sglang", lambda: (object, FIELDS))
    monkeypatch.setattr(sglang_engine, "import_server_args", lambda: FIELDS)
    monkeypatch.setattr(sglang_engine, "check_options", lambda options: None)  # FIELDS has no load_format
    folder = model_copy(tmp_path, lambda f: (f / "model.safetensors").unlink())
    argv = build(tmp_path / "ds", "--engine", "sglang", "--engine-arg", "load_format=dummy", "--dry-run", model=folder)
    assert main(argv) == 0, capsys.readouterr().err


def test_replay_and_sglang_http_take_a_folder_without_weights(tmp_path, kimi_tokenizer, capsys):
    """Replay's --model is the tokenizer's folder; an sglang-http server loaded the model itself."""
    write_replay(tmp_path / "replay.jsonl", kimi_tokenizer, 3)
    assert main(["build", CONFIG, "--model", str(KIMI_TOKENIZER), "--engine", "replay", "--replay",
                 str(tmp_path / "replay.jsonl"), "--prompts", PROMPTS, "--limit", "3", "--dry-run",
                 "--out", str(tmp_path / "ds")]) == 0
    settings = GenerationSettings(model=str(KIMI_TOKENIZER), engine="sglang-http", urls=("http://127.0.0.1:9",),
                                  prompts=PROMPTS, run_dir=str(tmp_path / "run"))
    check_before_loading(*settings.resolve(CONFIG))  # every check before the server is asked
