"""`inspect`: each marked region holds exactly the tokens its boundary column says, on every source."""

from __future__ import annotations

import re

import pytest
from datasets import load_dataset

from eagle3_synth.cli import main
from eagle3_synth.view import render_row
from eagle3_synth.dataset.stores import FolderSource, LoadDatasetSource, RunSource, open_source

from ..support.built_datasets import KIMI_CONFIG, QWEN_CONFIG, checks_dataset

TAG = re.compile(r"\[((?:reasoning|think_end|response|tool_call \d+|stop)) (\d+)(?::(\d+))?\](.*?)\[/\1\]", re.DOTALL)
SHOWN = re.compile(r"^sample (\d+) \(", re.MULTILINE)


@pytest.fixture(scope="module")
def folder(tmp_path_factory, kimi_tokenizer, qwen_tokenizer):
    return checks_dataset(tmp_path_factory, kimi_tokenizer, qwen_tokenizer)


def regions(text: str) -> list[tuple[str, int, int, str]]:
    """(label, start, end, body) of every tagged output region, in order."""
    output = text.split("[/prompt]", 1)[1]
    return [(m[1], int(m[2]), int(m[3]) if m[3] else int(m[2]) + 1, m[4]) for m in TAG.finditer(output)]


@pytest.mark.parametrize("config, tokenizer_fixture", [(KIMI_CONFIG, "kimi_tokenizer"), (QWEN_CONFIG, "qwen_tokenizer")])
def test_each_region_is_at_its_tokens(folder, config, tokenizer_fixture, request):
    tokenizer = request.getfixturevalue(tokenizer_fixture)
    seen = set()
    for row in load_dataset(str(folder), config, split="train"):
        out = row["output_ids"]
        text = render_row(row, tokenizer)
        found = regions(text)
        for label, start, end, body in found:
            assert body == tokenizer.decode(out[start:end], skip_special_tokens=False), (row["sample_id"], label)
            seen.add(label.split()[0])
        by_label = {}
        for label, start, end, _ in found:
            by_label.setdefault(label, []).append((start, end))
        if row["think_end"] >= 0:
            assert by_label["think_end"] == [(row["think_end"], row["think_end"] + 1)]
        else:
            assert "think_end" not in by_label
        if row["reasoning_start"] >= 0:
            assert by_label["reasoning"][0][0] == row["reasoning_start"]
        if row["response_start"] >= 0 and row["response_start"] < len(out):
            first = min(s for label, spans in by_label.items() if label.split()[0] in ("response", "tool_call", "stop")
                        for s, _ in spans)
            assert first == row["response_start"]
        else:
            assert "response" not in by_label
        for number, call in enumerate(row["tool_calls"], start=1):
            end = call["end"] + 1 if call["end"] >= 0 else len(out)
            assert by_label[f"tool_call {number}"] == [(call["start"], end)]
        if row["stop_index"] >= 0:
            assert by_label["stop"] == [(row["stop_index"], row["stop_index"] + 1)]
            assert found[-1][0] == "stop"
        else:
            assert "stop" not in by_label
        # Nothing lost: tagged and untagged text together are the whole output, decoded.
        untagged = TAG.sub(lambda m: m[4], text.split("[/prompt]", 1)[1])
        assert untagged == tokenizer.decode(out, skip_special_tokens=False)
    assert seen == {"reasoning", "think_end", "response", "tool_call", "stop"}


def test_ids_mode_shows_each_id(folder, kimi_tokenizer, kimi_markers):
    row = load_dataset(str(folder), KIMI_CONFIG, split="train")[0]
    found = {label: body for label, _, _, body in regions(render_row(row, kimi_tokenizer, show_ids=True))}
    assert found["think_end"] == f"</think>⟨{kimi_markers.reasoning_close.id}⟩"
    assert found["stop"] == f"<|im_end|>⟨{row['output_ids'][-1]}⟩"


def inspect(capsys, *args: str) -> tuple[int, str]:
    code = main(["inspect", *args, "--colour", "never"])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def shown(text: str) -> list[int]:
    return [int(s) for s in SHOWN.findall(text)]


def test_sample_shows_messages_header_and_sequence(folder, capsys):
    code, text = inspect(capsys, str(folder), KIMI_CONFIG, "--sample", "7")
    assert code == 0 and shown(text) == [7]
    assert "user: Question number 7: what is 7 + 7?" in text
    assert "tools: " in text  # sample 7 has tool definitions
    assert re.search(r"sample 7 \(source id p-7\): prompt \d+ tokens, output \d+ tokens, finish_reason=stop", text)
    assert "\033[" not in text


def test_where_shortest_longest_random_pick_the_right_rows(folder, capsys):
    rows = list(load_dataset(str(folder), KIMI_CONFIG, split="train"))
    unclosed = [r["sample_id"] for r in rows if r["think_end"] == -1]
    code, text = inspect(capsys, str(folder), KIMI_CONFIG, "--where", "think_end == -1")
    assert code == 0
    assert f"{len(unclosed)} of 24 rows match 'think_end == -1'" in text and shown(text) == unclosed[:5]

    by_length = sorted(rows, key=lambda r: (len(r["output_ids"]), r["sample_id"]))
    longest = sorted(rows, key=lambda r: (-len(r["output_ids"]), r["sample_id"]))
    code, text = inspect(capsys, str(folder), KIMI_CONFIG, "--shortest", "2", "--longest", "1", "--no-messages")
    assert shown(text) == [by_length[0]["sample_id"], by_length[1]["sample_id"], longest[0]["sample_id"]]

    stopped_calls = [r["sample_id"] for r in rows if len(r["tool_calls"]) > 1 and r["finish_reason"] == "stop"]
    code, text = inspect(capsys, str(folder), KIMI_CONFIG, "--where", 'len(tool_calls) > 1 and finish_reason == "stop"',
                         "--first", "100", "--no-messages")
    assert stopped_calls and shown(text) == stopped_calls

    _, first = inspect(capsys, str(folder), KIMI_CONFIG, "--random", "3", "--seed", "4", "--no-messages")
    _, again = inspect(capsys, str(folder), KIMI_CONFIG, "--random", "3", "--seed", "4", "--no-messages")
    assert len(set(shown(first))) == 3 and first == again


def test_colour_always_adds_escapes_but_keeps_tags(folder, capsys):
    assert main(["inspect", str(folder), QWEN_CONFIG, "--sample", "0", "--colour", "always"]) == 0
    text = capsys.readouterr().out
    assert "\033[1;35m" in text and "[think_end " in text


def test_every_source_renders_the_same_sample(folder, kimi_tokenizer):
    sources = [FolderSource(str(folder)), RunSource(str(folder / ".runs")), RunSource(str(folder / ".runs" / KIMI_CONFIG)),
               LoadDatasetSource(str(folder))]
    rendered = [render_row(s.rows_by_id(KIMI_CONFIG, [9])[0], kimi_tokenizer) for s in sources]
    assert all(text == rendered[0] for text in rendered)
    assert isinstance(open_source(str(folder)), FolderSource)
    assert isinstance(open_source(str(folder / ".runs")), RunSource)
    assert isinstance(open_source("someone/some-dataset"), LoadDatasetSource)


@pytest.mark.parametrize("args, message", [
    (["--sample", "999"], "no sample_id 999"),
    (["--where", "think_end = 1"], "not a valid expression"),
    (["--where", "thinking == 1"], "unknown column"),
    (["--random", "0"], "--random must be >= 1"),
])
def test_bad_requests_are_clear_errors(folder, capsys, args, message):
    code, text = inspect(capsys, str(folder), KIMI_CONFIG, *args)
    assert code == 2 and message in text


def test_not_a_dataset(tmp_path, capsys):
    code, text = inspect(capsys, str(tmp_path), KIMI_CONFIG)
    assert code == 2 and "neither a dataset folder" in text
    code, text = inspect(capsys, str(tmp_path / "missing" / "deeper"), KIMI_CONFIG)
    assert code == 2 and "no such folder" in text


def test_a_run_directory_at_an_fsspec_url(folder, kimi_tokenizer):
    """Runs may live on object stores: the same rows come back from a `memory://` copy."""
    import fsspec

    memory = fsspec.filesystem("memory")
    for path in (folder / ".runs").rglob("*"):
        if path.is_file():
            memory.pipe(f"/checks-runs/{path.relative_to(folder / '.runs').as_posix()}", path.read_bytes())
    try:
        source = open_source("memory://checks-runs")
        assert isinstance(source, RunSource) and source.configs() == [KIMI_CONFIG, QWEN_CONFIG]
        assert source.rows_by_id(KIMI_CONFIG, [9]) == FolderSource(str(folder)).rows_by_id(KIMI_CONFIG, [9])
        assert len(list(open_source(f"memory://checks-runs/{QWEN_CONFIG}").iter_rows(QWEN_CONFIG))) == 9
    finally:
        memory.rm("/checks-runs", recursive=True)


def test_a_published_repo_id(folder, tmp_path, monkeypatch):
    """A repo id goes through `load_dataset(repo, config)` and the repo's run_info.json, against the
    loopback Hub (tests/support/hub_server.py) in a fresh process, as a user runs the commands."""
    import json
    import os
    import subprocess
    import sys

    import huggingface_hub.constants as constants
    from huggingface_hub import HfApi

    from ..support.hub_server import HubServer

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    repo = "checks-org/eagle3-synth-checks"
    with HubServer() as hub:
        api = HfApi(endpoint=hub.url, token="unused")
        api.create_repo(repo, repo_type="dataset")
        api.upload_folder(folder_path=str(folder), repo_id=repo, repo_type="dataset", ignore_patterns=[".runs/**"])
        code = (
            "import sys\n"
            "from eagle3_synth.cli import main\n"
            f"sys.exit(max(main(['stats', {repo!r}, '--json']), "
            f"main(['inspect', {repo!r}, {KIMI_CONFIG!r}, '--sample', '9', '--colour', 'never']), "
            f"main(['validate', {repo!r}, {QWEN_CONFIG!r}])))\n"
        )
        env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": "0", "HF_DATASETS_OFFLINE": "0",
               "HF_HUB_DISABLE_XET": "1", "HF_HOME": str(tmp_path / "hf_home")}
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    stats_json, rest = done.stdout.split("\n]\n", 1)
    assert [s["config"] for s in json.loads(stats_json + "\n]")] == [KIMI_CONFIG, QWEN_CONFIG]
    assert f"{KIMI_CONFIG} in {repo} (repo); showing 1" in rest and shown(rest) == [9]
    assert f"{QWEN_CONFIG}: 9 rows, all valid" in rest  # tokenizer + template kwargs from run_info.json


@pytest.mark.parametrize("show_ids", [True, False])
def test_a_row_with_ids_outside_the_vocabulary_is_shown_not_crashed_on(folder, tmp_path, capsys, show_ids):
    """A row that breaks the contract (ids 5,000,000 and -7; a stop_index past the output) is shown,
    each bad id marked in its place, so the row can be looked at."""
    from ..support.built_datasets import copy_dataset, rewrite_rows

    bad = copy_dataset(folder, tmp_path / "bad")

    def plant(row):
        if row["sample_id"] == 4:
            row["output_ids"][1], row["output_ids"][2] = 5_000_000, -7
            row["stop_index"] = len(row["output_ids"]) + 3

    rewrite_rows(bad, KIMI_CONFIG, plant)
    args = ["inspect", str(bad), KIMI_CONFIG, "--sample", "4", "--colour", "never", *(["--ids"] if show_ids else [])]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "⟨5000000: not in the tokenizer⟩⟨-7: not in the tokenizer⟩" in out
    row = load_dataset(str(folder), KIMI_CONFIG, split="train")[4]
    first = f"⟨{row['output_ids'][0]}⟩" if show_ids else ""
    assert f"[reasoning 0:" in out and first + "⟨5000000: not in the tokenizer⟩" in out
