"""The per-sample hot paths, sped up, still produce exactly what the plain versions did.

Each fast path is held to a slow reference written out here: tool-call spans against a per-token
scan, journal lines against `json.dumps`, prompts.jsonl against `asdict`, one index lookup against
the vectorised one; the replay engine's checks still name each bad record's sample and line; and prompts
streamed into prompts.jsonl leave nothing behind when the stream fails.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict

import numpy as np
import pytest

from eagle3_synth.contract.row import ToolCallSpan, find_tool_calls, PreparedPrompt
from eagle3_synth.engines.base import GenerationRequest, GenerationResult, SamplingParams
from eagle3_synth.engines.replay import ReplayEngine
from eagle3_synth.errors import EngineError, PromptError
from eagle3_synth.run.journal import JournalIndex, encode_result
from eagle3_synth.run.directory import RunDirectory


def tool_calls_token_by_token(ids: list[int], begin: int, end: int) -> tuple[ToolCallSpan, ...]:
    """The contract's rule, one token at a time: each begin pairs with the next end; a begin
    before the previous call ended, or never ended, is cut off (`end=-1`)."""
    spans, open_at = [], -1
    for i, token in enumerate(ids):
        if token == begin:
            if open_at >= 0:
                spans.append(ToolCallSpan(open_at, -1))
            open_at = i
        elif token == end and open_at >= 0:
            spans.append(ToolCallSpan(open_at, i))
            open_at = -1
    if open_at >= 0:
        spans.append(ToolCallSpan(open_at, -1))
    return tuple(spans)


@pytest.mark.parametrize("which", ["kimi", "qwen"])
def test_tool_call_spans_equal_the_token_by_token_rule(which, kimi_markers, qwen_markers):
    markers = kimi_markers if which == "kimi" else qwen_markers
    begin, end = markers.tool_call_begin.id, markers.tool_call_end.id
    rng = random.Random(8)
    cases = [[], [begin], [end], [end, begin], [begin, begin, end, end], [begin, end, end, begin, 5, end]]
    for _ in range(3000):  # dense in markers: every order of begins and ends shows up
        length = rng.randrange(0, 40)
        cases.append([rng.choice((begin, end, 11, 12, 13)) for _ in range(length)])
    found_any = False
    for ids in cases:
        expected = tool_calls_token_by_token(ids, begin, end)
        assert find_tool_calls(ids, markers) == expected, ids
        found_any |= any(span.end == -1 for span in expected) and any(span.end >= 0 for span in expected)
    assert found_any


RESULTS = [
    GenerationResult(3, [5, 0, 2_147_483_647, 17], "stop", 12, 4, cached_tokens=8),
    GenerationResult(4, [], "abort", 12, 0,
                     error='engine said: "nö" \\ \n\t\x00\x1f\x7f \u2028 日本 🌧️'),
    GenerationResult(5, list(range(3000)), "length", 0, 3000),
]


def test_journal_lines_are_the_bytes_json_would_write():
    for result in RESULTS:
        record = {"sample_id": result.sample_id, "finish_reason": result.finish_reason,
                  "prompt_tokens": result.prompt_tokens, "completion_tokens": result.completion_tokens,
                  "cached_tokens": result.cached_tokens, "error": result.error, "output_ids": result.output_ids}
        expected = json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"
        assert encode_result(result) == expected


def test_journal_lines_read_back_unchanged(tmp_path):
    run = RunDirectory(tmp_path / "run")
    fingerprint = run.claim({"config": "x"})
    with run.open_journal(fingerprint) as journal:
        for result in RESULTS:
            journal.append(result)
    index = run.scan()
    with index.reader(run.fs) as read:
        back = [read(index.position(result.sample_id)) for result in RESULTS]
    assert [(r["output_ids"], r["error"], r["finish_reason"]) for r in back] == [
        (r.output_ids, r.error, r.finish_reason) for r in RESULTS]


def test_prompts_file_lines_are_what_asdict_gave(tmp_path):
    prompts = [
        PreparedPrompt(0, "src-0", [1, 2, 3], [{"role": "user", "content": "Grüße 🌍 \u2028"}], None),
        PreparedPrompt(2, "", [9], [{"role": "user", "content": "a", "tool_calls": [{"function": {"name": "f",
                       "arguments": {"x": 1.5, "y": [True, None]}}}]}], [{"type": "function", "function": {"name": "f"}}]),
    ]
    run = RunDirectory(tmp_path / "run")
    run.claim({"config": "x"})
    run.write_prompts(prompts, [])
    def record(prompt):  # asdict's keys and values, the head keys (read by prompt_slots) first
        fields = asdict(prompt)
        return {**{k: fields[k] for k in ("sample_id", "conversation_id", "turns")}, **fields}

    expected = "".join(json.dumps(record(p), ensure_ascii=False, separators=(",", ":")) + "\n" for p in prompts)
    assert (tmp_path / "run" / "prompts.jsonl").read_text(encoding="utf-8") == expected
    assert list(run.iter_prompts()) == prompts


def test_a_prompt_stream_that_fails_leaves_no_files(tmp_path):
    """Prompts stream into prompts.jsonl as they are prepared; a failure half way (`--strict`, a
    crash in templating) must not leave a partial file, visible or temporary."""
    run = RunDirectory(tmp_path / "run")
    run.claim({"config": "x"})
    rejects: list[dict] = []

    def prompts():
        yield PreparedPrompt(0, "", [1], [{"role": "user", "content": "a"}], None)
        rejects.append({"sample_id": 1, "reason": "unparseable"})
        raise PromptError("line 2: not valid JSON (--strict stops at the first rejected prompt)")

    with pytest.raises(PromptError, match="--strict"):
        run.write_prompts(prompts(), rejects)
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["run.json"]
    assert not run.prompts_ready


def test_one_index_lookup_equals_the_vectorised_one():
    ids = np.array([2, 3, 5, 8, 13, 100], dtype=np.int64)
    index = JournalIndex(files=[], sample_ids=ids, file_index=np.zeros(6, np.int32), offsets=np.zeros(6, np.int64),
                         reasons=np.zeros(6, np.int8), sessions=[])
    probe = np.arange(-2, 110, dtype=np.int64)
    assert [index.position(int(i)) for i in probe] == index.positions(probe).tolist()
    empty = JournalIndex(files=[], sample_ids=np.zeros(0, np.int64), file_index=np.zeros(0, np.int32),
                         offsets=np.zeros(0, np.int64), reasons=np.zeros(0, np.int8), sessions=[])
    assert empty.position(0) == -1


REPLAY_LINES = [
    '{"sample_id": 0, "output_ids": [5, 6, 7], "finish_reason": "length"}',
    '{"sample_id": 1, "output_ids": [5, true, 7]}',
    '{"sample_id": 2, "output_ids": [5, 6.0]}',
    '{"sample_id": 3, "output_ids": [5, 6',
    '{"sample_id": 4, "output_ids": [99999999999999999999999]}',
    '[{"sample_id": 5}]',
    '{"sample_id": 6, "output_ids": "5 6"}',
]


def test_replay_checks_name_each_bad_record(tmp_path):
    """Each bad record stops the run naming its sample and line (the shared result check's outcome)."""
    import re

    path = tmp_path / "replay.jsonl"
    path.write_text("\n".join(REPLAY_LINES) + "\n", encoding="utf-8")
    engine = ReplayEngine(str(path))
    params = SamplingParams(max_new_tokens=8, temperature=0.0, stop_token_ids=(7,))
    try:
        (result,) = engine.generate([GenerationRequest(0, [1, 2])], params)
        assert (result.output_ids, result.finish_reason, result.error) == ([5, 6, 7], "length", None)
        # a bool, a float, an unterminated line, an integer beyond 64 bits, not an object, a string
        for sample_id, what in [(1, "output_ids is not a list of ints"), (2, "output_ids is not a list of ints"),
                                (3, "not valid JSON"), (4, "output_ids is not a list of ints"),
                                (5, "not a JSON object"), (6, "output_ids is not a list of ints")]:
            message = f"sample_id {sample_id}: {path}:{sample_id + 1} returned a result that breaks the contract: {what}"
            with pytest.raises(EngineError, match=re.escape(message)):
                list(engine.generate([GenerationRequest(sample_id, [1, 2])], params))
    finally:
        engine.close()

