"""Bad records are rejects, never aborts: undecodable bytes, lone surrogates, binary files, JSON arrays
cut mid-way and Parquet files of the wrong schema each become an `unparseable` reject naming
`file:line` (or `file#row`), the records around them kept; a file that cannot be read at all is a
one-line ConfigError naming it."""

from __future__ import annotations

import builtins
import json
import logging
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from eagle3_synth.cli import main
from eagle3_synth.errors import ConfigError, PromptError
from eagle3_synth.prompts.configs import get_config
from eagle3_synth.prompts.readers import iter_json_array, iter_source_files, readable_file
from eagle3_synth.prompts.selection import PromptPlan

from ..conftest import KIMI_TOKENIZER, QWEN_TOKENIZER, TINY_MODEL
from ..support.prompt_cases import Case, options, prepare, write_replay


def user(text: str, **extra) -> str:
    return json.dumps({"messages": [{"role": "user", "content": text}], **extra})


SURROGATE = '"caf\\ud800e"'  # valid JSON: a lone high surrogate escape
LATIN_1 = '{"messages": [{"role": "user", "content": "caf\xe9"}]}'.encode("latin-1")


def lines_file(path: Path, lines: list[str | bytes]) -> Path:
    path.write_bytes(b"".join((line if isinstance(line, bytes) else line.encode("utf-8")) + b"\n" for line in lines))
    return path


def by_detail(rejects: list[dict]) -> dict[str, dict]:
    return {r["detail"]: r for r in rejects}


# -- readers ------------------------------------------------------------------------------------------

def test_a_line_that_is_not_utf8_is_an_error_record_and_reading_goes_on(tmp_path):
    path = lines_file(tmp_path / "rows.jsonl", [user("one"), LATIN_1, user("three")])
    read = list(iter_source_files([str(path)]))
    assert [(r.locator, r.record is not None) for r in read] == [("rows.jsonl:1", True), ("rows.jsonl:2", False),
                                                                ("rows.jsonl:3", True)]
    assert read[1].error == "not UTF-8 text (byte 0xe9 at byte 47 of the line: invalid continuation byte)"


@pytest.mark.parametrize("name", ["blob.jsonl", "blob.json", "blob.ndjson"])
def test_a_binary_file_is_one_error_record_at_its_first_line(tmp_path, name, caplog):
    path = tmp_path / name
    path.write_bytes(b"PK\x03\x04" + bytes(range(256)) * 4 + b"\n{}\n")
    read = list(iter_source_files([str(path)]))
    # `.json` holding lines is read as lines, named by row like any `.json` record
    assert [(r.locator, r.record) for r in read] == [(f"{name}:1" if name != "blob.json" else "blob.json#0", None)]
    assert read[0].error == "not text: a NUL byte at offset 4 (a binary or UTF-16 file); nothing in it can be read"
    assert f"--source-file {path}: not text: a NUL byte at offset 4" in caplog.text


@pytest.mark.parametrize("chunk", [1, 7, 1 << 20])
def test_a_json_array_cut_mid_way_keeps_the_elements_before_the_cut(tmp_path, chunk, caplog):
    path = tmp_path / "cut.json"
    path.write_text('[\n  {"a": 1},\n  {"a": 2},\n  {"a": "thr', encoding="utf-8")
    read = list(iter_json_array(str(path), chunk_chars=chunk))
    assert [r.record for r in read] == [{"a": 1}, {"a": 2}, None]
    assert read[2].locator == "cut.json#2"
    assert read[2].error == ("not valid JSON (Unterminated string starting at: line 4 column 9 (char 34)); the elements "
                             "after it cannot be read (a JSON array cannot be read past a syntax error: is the file cut?)")
    assert f"--source-file {path} element 2: not valid JSON" in caplog.text


@pytest.mark.parametrize("text,error", [
    ('[{"a": 1},', "the file ends inside the array at line 1 column 11 (char 10)"),
    ('[{"a": 1} {"a": 2}]', "expected ',' or ']' at line 1 column 11 (char 10), found '{'"),
    ('[{"a": 1}, {"a": ]', "not valid JSON (Expecting value: line 1 column 18 (char 17))"),
    ("[", "the file ends inside the array at line 1 column 2 (char 1)"),
])
def test_a_json_array_broken_mid_way_ends_in_one_error_record(tmp_path, text, error):
    path = tmp_path / "broken.json"
    path.write_text(text, encoding="utf-8")
    read = list(iter_json_array(str(path)))
    assert read[0].record == {"a": 1} or text == "["
    assert read[-1].record is None and read[-1].error.startswith(error + "; the elements after it cannot be read")


@pytest.mark.parametrize("chunk", [1, 5, 1 << 20])
def test_an_array_element_that_is_not_utf8_is_rejected_and_the_next_ones_kept(tmp_path, chunk):
    path = tmp_path / "array.json"
    path.write_bytes(b'[{"a": 1},\n {"a": "caf\xe9"},\n {"a": 3}]')
    read = list(iter_json_array(str(path), chunk_chars=chunk))
    assert [r.record for r in read] == [{"a": 1}, None, {"a": 3}]
    assert read[1].locator == "array.json#1"
    assert read[1].error == "not UTF-8 text (byte 0xe9 at line 2 column 12 (char 22))"


def test_a_file_that_is_not_parquet_is_one_error_record(tmp_path, caplog):
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"messages": [[{"role": "user", "content": "hi"}]]}), path)
    path.write_bytes(path.read_bytes()[:-12])  # the footer cut off
    read = list(iter_source_files([str(path)]))
    assert [(r.locator, r.record) for r in read] == [("rows.parquet#0", None)]
    assert read[0].error.startswith("not readable as Parquet (ArrowInvalid: ")
    assert read[0].error.endswith("; the rows after it cannot be read")
    assert f"--source-file {path} row 0: not readable as Parquet" in caplog.text


@pytest.mark.parametrize("option", ["--source-file", "--prompts"])
def test_a_file_that_cannot_be_read_is_a_config_error_naming_it(tmp_path, monkeypatch, option):
    with pytest.raises(ConfigError, match=f"^{option} {tmp_path}: is a directory, not a file$"):
        readable_file(str(tmp_path), option)
    with pytest.raises(ConfigError, match=f"^{option} {tmp_path}/nope.jsonl: no such file$"):
        readable_file(str(tmp_path / "nope.jsonl"), option)
    locked = lines_file(tmp_path / "locked.jsonl", [user("hi")])
    real_open = builtins.open

    def refuse(file, *args, **kwargs):  # this suite may run as root, for whom chmod 000 reads anyway
        if str(file) == str(locked):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", refuse)
    with pytest.raises(ConfigError, match=f"^{option} {locked}: cannot be read \\(Permission denied\\)$"):
        readable_file(str(locked), option)


# -- prepared: rejects with file:line, the others kept ------------------------------------------------

def test_bad_records_among_good_ones_are_unparseable_rejects(tmp_path, qwen_tokenizer):
    rows = lines_file(tmp_path / "rows.jsonl", [
        user("first"),
        LATIN_1,
        '{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}, '
        f'{{"role": "user", "content": {SURROGATE}}}]}}',
        user("fourth", prompt_id="p-ID").replace("-ID", "\\udc00"),  # in the id, written to the rejects file
        user("fifth"),
    ])
    blob = tmp_path / "blob.jsonl"
    blob.write_bytes(b"\x00\x01binary")
    cut = tmp_path / "cut.json"
    cut.write_text(f'[{user("sixth")}, {user("seventh")}, {{"messages": [', encoding="utf-8")
    wrong = tmp_path / "wrong.parquet"
    pq.write_table(pa.table({"prompt": ["no messages column"], "n": [1]}), wrong)
    files = [str(rows), str(blob), str(cut), str(wrong)]
    prompts, rejects = prepare(options("B3_ultrachat", files, QWEN_TOKENIZER), qwen_tokenizer)
    assert sorted(p.messages[-1]["content"] for p in prompts) == ["fifth", "first", "seventh", "sixth"]
    details = {r["source_id"]: r["detail"] for r in rejects}
    assert {r["reason"] for r in rejects} == {"unparseable"} and len(rejects) == 6
    assert details["rows.jsonl:2"].endswith(": not UTF-8 text (byte 0xe9 at byte 47 of the line: invalid "
                                            "continuation byte)")
    assert details["rows.jsonl:3"].endswith(": messages[2].content has a lone surrogate U+D800 at character 3 "
                                            "(not valid Unicode: a \\ud800-style escape without its pair)")
    # The id keeps its surrogate as an escape, so rejects.jsonl stays UTF-8.
    assert details["p\\udc00"].startswith("rows.jsonl:4 (sample_id ")
    assert details["p\\udc00"].endswith(": the source id has a lone surrogate U+DC00 at character 1 (not valid "
                                         "Unicode: a \\ud800-style escape without its pair)")
    assert "not text: a NUL byte at offset 0" in details["blob.jsonl:1"]
    assert "not valid JSON (Expecting value: line 1 column 126 (char 125)); the elements after it" in details["cut.json#2"]
    assert details["wrong.parquet#0"].endswith(": field 'messages' is missing or not a list")
    json.dumps(rejects, ensure_ascii=False).encode("utf-8")


def test_a_surrogate_nested_deep_in_a_prompts_line_is_rejected_and_the_line_numbers_stay(tmp_path, qwen_tokenizer):
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"city": "PLACEHOLDER"}}}
    nested = json.dumps({"messages": [{"role": "user", "content": "go"},
                                      {"role": "assistant", "content": "", "tool_calls": [call]},
                                      {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
                                      {"role": "user", "content": "and?"}]}).replace("PLACEHOLDER", "Z\\udfffrich")
    tools = user("tools", tools=[{"type": "function", "function": {"name": "g", "description": "x"}}])
    tools = tools.replace('"x"', f'{{"k": {SURROGATE}}}')
    path = lines_file(tmp_path / "prompts.jsonl", [user("zero"), nested, LATIN_1, tools, b"\xff\xfe", user("five")])
    plan = PromptPlan(config=get_config("B3_ultrachat"), prompts_file=str(path))
    prompts, rejects = prepare(Case(plan), qwen_tokenizer)
    assert [p.sample_id for p in prompts] == [0, 5]
    assert [(r["sample_id"], r["reason"]) for r in rejects] == [(i, "unparseable") for i in (1, 2, 3, 4)]
    detail = {r["sample_id"]: r["detail"] for r in rejects}
    assert detail[1] == (f"{path}:2 (sample_id 1): messages[1].tool_calls[0].function.arguments.city has a lone "
                         "surrogate U+DFFF at character 1 (not valid Unicode: a \\ud800-style escape without its pair)")
    assert detail[2] == f"{path}:3 (sample_id 2): not UTF-8 text (byte 0xe9 at byte 47 of the line: invalid " \
                        "continuation byte)"
    assert detail[3].startswith(f"{path}:4 (sample_id 3): tools[0].function.description.k has a lone surrogate U+D800")
    assert detail[4] == f"{path}:5 (sample_id 4): not UTF-8 text (byte 0xff at byte 1 of the line: invalid start byte)"


def test_a_binary_prompts_file_is_one_reject(tmp_path, qwen_tokenizer, caplog):
    path = tmp_path / "prompts.jsonl"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    plan = PromptPlan(config=get_config("B3_ultrachat"), prompts_file=str(path))
    prompts, rejects = prepare(Case(plan), qwen_tokenizer)
    assert prompts == [] and [r["detail"] for r in rejects] == [
        f"{path}:1 (sample_id 0): not text: a NUL byte at offset 8 (a binary or UTF-16 file); nothing in it can be read"]
    assert f"--prompts {path}: not text" in caplog.text


def test_strict_stops_at_the_first_bad_record_naming_it(tmp_path, qwen_tokenizer):
    path = lines_file(tmp_path / "prompts.jsonl", [user("zero"), f'{{"messages": [{{"role": "user", "content": '
                                                                  f'{SURROGATE}}}]}}', user("two")])
    plan = PromptPlan(config=get_config("B3_ultrachat"), prompts_file=str(path))
    case = Case(plan, preparation=options("B3_ultrachat", strict=True).preparation)
    with pytest.raises(PromptError, match=f"^{path}:2 \\(sample_id 1\\): messages\\[0\\].content has a lone surrogate "
                                          "U\\+D800 .* \\(--strict stops at the first rejected prompt\\)$"):
        prepare(case, qwen_tokenizer)


# -- the command line ---------------------------------------------------------------------------------

def test_a_build_keeps_the_good_records_and_lists_the_bad_ones(tmp_path, kimi_tokenizer, capsys, caplog):
    caplog.set_level(logging.INFO, logger="eagle3_synth.prompts.prepare")
    rows = lines_file(tmp_path / "rows.jsonl", [user("first"), LATIN_1, f'{{"messages": [{{"role": "user", '
                                                f'"content": {SURROGATE}}}]}}', user("fourth")])
    cut = tmp_path / "more.json"
    cut.write_text(f'[{user("fifth")}, {{"messages": [{{"ro', encoding="utf-8")
    write_replay(tmp_path / "replay.jsonl", kimi_tokenizer, 10)
    out = tmp_path / "ds"
    code = main(["build", "B3_ultrachat", "--turns", "last", "--model", str(KIMI_TOKENIZER), "--engine", "replay",
                 "--replay", str(tmp_path / "replay.jsonl"), "--source-file", str(rows), "--source-file", str(cut),
                 "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    rejects = [json.loads(line) for line in open(out / ".runs" / "B3_ultrachat" / "rejects.jsonl", encoding="utf-8")]
    assert sorted(r["source_id"] for r in rejects) == ["more.json#1", "rows.jsonl:2", "rows.jsonl:3"]
    assert {r["reason"] for r in rejects} == {"unparseable"}
    assert "B3_ultrachat: 3 prompts kept of 6 records considered; rejected: unparseable=3" in caplog.text


def test_a_source_file_that_is_a_directory_fails_before_the_engine_loads(tmp_path, capsys):
    out = tmp_path / "ds"
    code = main(["build", "B3_ultrachat", "--model", str(TINY_MODEL), "--trust-remote-code",
                 "--source-file", str(tmp_path), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and f"error: --source-file {tmp_path}: is a directory, not a file" in err
    assert not (out / ".runs").exists()
