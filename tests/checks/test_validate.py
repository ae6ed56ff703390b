"""`validate`: clean data passes; each planted corruption is caught, by kind, at its sample id."""

from __future__ import annotations

import json
import shutil

import pytest

from eagle3_synth.cli import main
from eagle3_synth.contract.row import make_row
from eagle3_synth.checks import KINDS, RowValidator

from ..support.built_datasets import KIMI_CONFIG, QWEN_CONFIG, checks_dataset, copy_dataset, rewrite_rows
from ..conftest import KIMI_TOKENIZER


@pytest.fixture(scope="module")
def folder(tmp_path_factory, kimi_tokenizer, qwen_tokenizer):
    return checks_dataset(tmp_path_factory, kimi_tokenizer, qwen_tokenizer)


def validate(tmp_path, *args: str) -> tuple[int, list[dict]]:
    report = tmp_path / "report.json"
    code = main(["validate", *args, "--report", str(report), "--overwrite"])
    return code, json.loads(report.read_text())


def test_clean_data_passes(folder, tmp_path, capsys):
    code, reports = validate(tmp_path, str(folder))
    assert code == 0
    assert [(r["config"], r["ok"]) for r in reports] == [(KIMI_CONFIG, True), (QWEN_CONFIG, True)]
    assert reports[0]["rows"] == 24 and reports[1]["rows"] == 9
    assert f"{KIMI_CONFIG}: 24 rows, all valid" in capsys.readouterr().out


def test_a_run_directory_in_progress_validates_too(folder, tmp_path):
    code, reports = validate(tmp_path, str(folder / ".runs" / QWEN_CONFIG))
    assert code == 0 and reports[0]["rows"] == 9


def corrupt(folder, tmp_path, change) -> tuple[int, dict]:
    """Copy the dataset, apply `change(row)` to B1_glaive rows, validate that config."""
    copy = copy_dataset(folder, tmp_path / "corrupt")
    rewrite_rows(copy, KIMI_CONFIG, change)
    code, reports = validate(tmp_path, str(copy), KIMI_CONFIG)
    return code, reports[0]


def test_shifted_think_end(folder, tmp_path):
    def change(row):
        if row["sample_id"] == 6:
            assert row["think_end"] > 0
            row["think_end"] += 1

    code, report = corrupt(folder, tmp_path, change)
    assert code == 1
    assert report["counts"] == {"think_end": 1} and report["sample_ids"]["think_end"] == [6]


def test_truncated_output_ids(folder, tmp_path):
    def change(row):
        if row["sample_id"] == 0:
            row["output_ids"] = row["output_ids"][:-3]

    code, report = corrupt(folder, tmp_path, change)
    assert code == 1
    for kind in ("completion_tokens", "stop_token", "stop_index"):
        assert report["sample_ids"][kind] == [0], kind


def test_truncated_output_with_consistent_counts(folder, tmp_path, kimi_markers):
    """Even with every derived column recomputed, a cut-off stop row is caught by its last token."""

    def change(row):
        if row["sample_id"] == 12:
            row.update(make_row(sample_id=12, source_id=row["source_id"], prompt_ids=row["prompt_ids"],
                                output_ids=row["output_ids"][:-2], finish_reason="stop",
                                messages_json=row["messages"], tools_json=row["tools"], markers=kimi_markers))

    code, report = corrupt(folder, tmp_path, change)
    assert code == 1 and report["counts"] == {"stop_token": 1} and report["sample_ids"]["stop_token"] == [12]


def test_prompt_that_does_not_re_template(folder, tmp_path):
    def change(row):
        if row["sample_id"] == 3:
            messages = json.loads(row["messages"])
            messages[-1]["content"] += " (edited after templating)"
            row["messages"] = json.dumps(messages)

    code, report = corrupt(folder, tmp_path, change)
    assert code == 1
    assert report["counts"] == {"prompt_mismatch": 1} and report["sample_ids"]["prompt_mismatch"] == [3]


def test_wrong_template_kwargs_fail_every_prompt(folder, tmp_path):
    code, reports = validate(tmp_path, str(folder), KIMI_CONFIG, "--template-kwarg", "thinking=false")
    assert code == 1 and reports[0]["counts"]["prompt_mismatch"] == 24


def test_leaked_prompt_prefix(folder, tmp_path, kimi_markers):
    """An engine that returned prompt + output: counts and boundaries made consistent, still caught."""

    def change(row):
        if row["sample_id"] == 5:
            row.update(make_row(sample_id=5, source_id=row["source_id"], prompt_ids=row["prompt_ids"],
                                output_ids=row["prompt_ids"] + row["output_ids"], finish_reason=row["finish_reason"],
                                messages_json=row["messages"], tools_json=row["tools"], markers=kimi_markers))

    code, report = corrupt(folder, tmp_path, change)
    assert code == 1
    assert report["sample_ids"]["prompt_leak"] == [5]
    assert set(report["counts"]) <= {"prompt_leak", "stop_inside"}  # the prompt holds <|im_end|> ids too


def test_duplicate_sample_id(folder, tmp_path):
    def change(row):
        if row["sample_id"] == 8:
            row["sample_id"] = 7

    code, report = corrupt(folder, tmp_path, change)
    assert code == 1 and report["sample_ids"]["duplicate_sample_id"] == [7]


def test_report_lines_name_kinds_and_ids(folder, tmp_path, capsys):
    def change(row):
        if row["sample_id"] in (1, 2):
            row["prompt_tokens"] += 1

    corrupt(folder, tmp_path, change)
    out = capsys.readouterr().out
    assert f"{KIMI_CONFIG}: 24 rows, 2 violations (1 kind)" in out
    assert f"prompt_tokens: 2 rows -- {KINDS['prompt_tokens']}" in out and "sample ids: 1, 2" in out


def test_row_validator_kinds(kimi_tokenizer, kimi_markers, folder):
    from datasets import load_dataset

    row = dict(load_dataset(str(folder), KIMI_CONFIG, split="train")[0])
    validator = RowValidator(kimi_tokenizer, kimi_markers)
    assert validator.check(row) == []
    stop = kimi_markers.stop_ids[0]
    early = {**row, "output_ids": [stop, *row["output_ids"]], "completion_tokens": row["completion_tokens"] + 1}
    assert "stop_inside" in {kind for kind, _ in validator.check(early)}
    assert [kind for kind, _ in validator.check({**row, "finish_reason": "done"})] == ["finish_reason"]
    assert [kind for kind, _ in validator.check({**row, "messages": "not json"})] == ["messages_unreadable"]


def test_the_wrong_tokenizer_is_refused(folder, tmp_path, capsys):
    from ..conftest import QWEN_TOKENIZER

    assert main(["validate", str(folder), KIMI_CONFIG, "--tokenizer", str(QWEN_TOKENIZER)]) == 2
    assert "'<|tool_calls_section_begin|>' is not in the tokenizer's vocabulary" in capsys.readouterr().err
    # A tokenizer with the same marker strings but other ids than the data's: refused before any row.
    copy = copy_dataset(folder, tmp_path / "other-ids")
    info_path = copy / KIMI_CONFIG / "run_info.json"
    info = json.loads(info_path.read_text())
    slots = info["meta"]["markers"]["reasoning_close"][0]["slots"]  # one pattern of one token
    slots[0] = [slots[0][0] + 1]
    info_path.write_text(json.dumps(info))
    assert main(["validate", str(copy), KIMI_CONFIG]) == 2
    assert "resolves the markers differently" in capsys.readouterr().err


def test_without_recorded_provenance_a_tokenizer_is_required(folder, tmp_path, capsys):
    copy = copy_dataset(folder, tmp_path / "bare")
    shutil.rmtree(copy / ".runs")
    for info in copy.glob("*/run_info.json"):
        info.unlink()
    assert main(["validate", str(copy), KIMI_CONFIG]) == 2
    assert "pass --tokenizer PATH" in capsys.readouterr().err
    code, reports = validate(tmp_path, str(copy), KIMI_CONFIG, "--tokenizer", str(KIMI_TOKENIZER))
    assert code == 0 and reports[0]["ok"]


def test_workers_give_the_same_report(folder, tmp_path, kimi_tokenizer, kimi_markers):
    from eagle3_synth.dataset.stores import open_source
    from eagle3_synth.checks import validate_batches

    copy = copy_dataset(folder, tmp_path / "workers")
    rewrite_rows(copy, KIMI_CONFIG, lambda row: row.update(think_end=row["think_end"] + (row["sample_id"] % 5 == 0)))
    source = open_source(str(copy))
    validator = RowValidator(kimi_tokenizer, kimi_markers)
    one = validate_batches(source.iter_batches(KIMI_CONFIG, batch_size=4), validator, KIMI_CONFIG)
    two = validate_batches(source.iter_batches(KIMI_CONFIG, batch_size=4), validator, KIMI_CONFIG, workers=2)
    assert one.as_dict() == two.as_dict()
    assert one.sample_ids["think_end"] == [0, 5, 10, 15, 20] and one.rows == 24


def test_ids_outside_the_vocabulary_are_named_by_sample(folder, tmp_path, capsys):
    """A replayed id of 5,000,000 or -7, or a prompt id past the tokenizer: no row may hold one."""

    def change(row):
        if row["sample_id"] == 4:
            row["output_ids"][1] = 5_000_000  # inside the reasoning text: no boundary moves
        if row["sample_id"] == 9:
            row["output_ids"][0] = -7
        if row["sample_id"] == 11:
            row["prompt_ids"][-1] = 2048

    code, report = corrupt(folder, tmp_path, change)
    assert code == 1
    assert report["sample_ids"]["id_out_of_range"] == [4, 9, 11] and report["counts"]["id_out_of_range"] == 3
    assert report["details"]["id_out_of_range"] == ("sample 4: output_ids[1] = 5000000 is outside 0 <= id < 2048 "
                                                    "(len(tokenizer): no config.json with a vocab_size)")
    assert set(report["counts"]) == {"id_out_of_range", "prompt_mismatch"}  # the changed prompt re-templates otherwise
    assert "  id_out_of_range: 3 rows -- a prompt or output id is outside the model's vocabulary" in capsys.readouterr().out


def test_the_recorded_vocabulary_size_is_what_ids_are_checked_against(folder, tmp_path):
    """validate needs no model: the size the run recorded decides; a run that recorded none falls
    back to the recorded model's config.json, else len(tokenizer)."""
    copy = copy_dataset(folder, tmp_path / "copy")
    rewrite_rows(copy, KIMI_CONFIG, lambda row: row["output_ids"].__setitem__(1, 3000) if row["sample_id"] == 4 else None)
    info_path = copy / KIMI_CONFIG / "run_info.json"
    info = json.loads(info_path.read_text())
    assert info["meta"]["vocab_size"]["size"] == 2048
    code, reports = validate(tmp_path, str(copy), KIMI_CONFIG)
    assert code == 1 and reports[0]["sample_ids"] == {"id_out_of_range": [4]}
    info["meta"]["vocab_size"] = {"size": 4096, "from": "vocab_size in /models/x/config.json"}
    info_path.write_text(json.dumps(info))
    code, reports = validate(tmp_path, str(copy), KIMI_CONFIG)
    assert code == 0, reports
    del info["meta"]["vocab_size"]  # none recorded: the tokenizer's length
    info_path.write_text(json.dumps(info))
    code, reports = validate(tmp_path, str(copy), KIMI_CONFIG)
    assert code == 1 and "output_ids[1] = 3000 is outside 0 <= id < 2048 (len(tokenizer)" in reports[0]["details"]["id_out_of_range"]


def test_an_output_longer_than_the_runs_max_new_tokens(folder, tmp_path, kimi_tokenizer):
    """A `length` row three times the cap (a replay of another run's outputs, say), counts consistent."""
    cap = json.loads((folder / KIMI_CONFIG / "run_info.json").read_text())["fields"]["sampling"]["max_new_tokens"]
    filler = kimi_tokenizer.encode(" more", add_special_tokens=False)

    def change(row):
        if row["sample_id"] == 2:
            assert row["finish_reason"] == "length" and row["think_end"] == -1
            row["output_ids"] += filler * (3 * cap - len(row["output_ids"]))
            row["completion_tokens"] = len(row["output_ids"])

    code, report = corrupt(folder, tmp_path, change)
    assert code == 1 and report["counts"] == {"over_max_new_tokens": 1}
    assert report["details"]["over_max_new_tokens"] == f"sample 2: {3 * cap} output ids, the run's max_new_tokens is {cap}"
