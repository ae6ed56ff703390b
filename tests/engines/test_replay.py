"""The replay engine (the import path for outside results) checks each record as SGLang's results are
checked: the same contract, the same outcome, each problem named by FILE:LINE and sample."""

from __future__ import annotations

import json
import pytest

from eagle3_synth.engines import GenerationRequest, SamplingParams
from eagle3_synth.engines.replay import ReplayEngine, check_replay_file, index_replay_file
from eagle3_synth.engines.base import check_result
from eagle3_synth.errors import ConfigError, EngineError

from stand_ins import sglang_results as R

STOP = (2034, 2033)  # <|im_end|>, [EOS] of the kimi fixture tokenizer
PARAMS = SamplingParams(max_new_tokens=8, temperature=0.0, stop_token_ids=STOP, vocab_size=2048)
REQUEST = GenerationRequest(5, [11, 12, 13, 14])

# (output_ids, finish_reason, what the check must say): one case per rule of the shared check.
BROKEN = [
    ([1000, 5_000_000, STOP[0]], "stop",
     "output_ids[1] = 5000000 is outside the model's vocabulary (0 <= id < 2048)"),
    ([1000, -7, STOP[0]], "stop", "output_ids[1] = -7 is outside the model's vocabulary (0 <= id < 2048)"),
    ([1000] * 24, "length", "24 output ids, more than max_new_tokens = 8"),  # three times the cap
    ([], "stop", "finish_reason stop with no output ids (the stop token must be kept)"),
    ([1000, STOP[1], 1001], "length", "stop id 2033 at output position 1 of 3 (the engine should have stopped there)"),
]


def write_lines(path, lines: list[str]) -> str:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def record(sample_id: int, output_ids: list[int], finish_reason: str | None = None, **extra) -> str:
    fields = {"sample_id": sample_id, "output_ids": output_ids, **extra}
    if finish_reason is not None:
        fields["finish_reason"] = finish_reason
    return json.dumps(fields)


def replay(path: str, requests: list[GenerationRequest], params: SamplingParams = PARAMS) -> dict:
    """Play `requests` from the file."""
    engine = ReplayEngine(path)
    try:
        return {result.sample_id: result for result in engine.generate(requests, params)}
    finally:
        engine.close()


def violation(error: pytest.ExceptionInfo) -> str:
    """What a violation message says after naming the sample and the source."""
    return str(error.value).split("returned a result that breaks the contract: ", 1)[1]


@pytest.mark.parametrize("output_ids, finish_reason, what", BROKEN)
def test_replay_and_sglang_refuse_a_broken_result_alike(tmp_path, output_ids, finish_reason, what):
    path = write_lines(tmp_path / "replay.jsonl", [record(4, [1000, STOP[0]]), record(5, output_ids, finish_reason)])
    with pytest.raises(EngineError) as replayed:
        replay(path, [GenerationRequest(4, [11, 12]), REQUEST])
    assert str(replayed.value).startswith(f"sample_id 5: {path}:2 returned a result that breaks the contract")
    reason = R.stop_reason(output_ids[-1] if output_ids else STOP[0]) if finish_reason == "stop" else R.length_reason(8)
    with pytest.raises(EngineError) as served:
        check_result(REQUEST, R.finished("r", 4, output_ids, reason), "http://h:1", PARAMS)
    assert violation(replayed) == violation(served) == what


@pytest.mark.parametrize("output_ids, finish_reason, what", BROKEN)
def test_a_broken_record_is_refused_before_the_run_naming_its_line(tmp_path, output_ids, finish_reason, what):
    path = write_lines(tmp_path / "replay.jsonl",
                       [record(0, [1000, STOP[0]]), record(1, [1001], "length"), record(2, output_ids, finish_reason)])
    with pytest.raises(ConfigError) as error:
        check_replay_file(path, PARAMS)
    assert str(error.value) == (f"replay record {path}:3: sample_id 2: {what}; nothing was generated: "
                                "fix the file and run again")


def test_a_stop_without_its_stop_token_last_is_refused(tmp_path):
    path = write_lines(tmp_path / "replay.jsonl", [record(0, [1000, 1001], "stop")])
    with pytest.raises(ConfigError, match=r"replay\.jsonl:1: sample_id 0: finish_reason stop but the output ends "
                                          r"with 1001, not a stop id \[2033, 2034\]"):
        check_replay_file(path, PARAMS)
    with pytest.raises(EngineError, match=r"sample_id 0: .*replay\.jsonl:1 returned a result that breaks the contract: "
                                          "finish_reason stop but the output ends with 1001"):
        replay(path, [GenerationRequest(0, [11])])


def test_every_bad_line_is_counted_and_the_first_named(tmp_path):
    path = write_lines(tmp_path / "replay.jsonl", [record(0, [1000, 5_000_000]), record(1, [1000, STOP[0]]),
                                                   record(2, [-7]), "{\"sample_id\": 3, \"output_ids\": [5, 6"])
    with pytest.raises(ConfigError) as error:
        check_replay_file(path, PARAMS)
    message = str(error.value)
    assert message.startswith(f"replay record {path}:1: sample_id 0: output_ids[1] = 5000000 is outside")
    assert f"(and 2 more: {path}:3: sample_id 2: output_ids[0] = -7 is outside" in message
    assert f"; {path}:4: not valid JSON" in message and "\n" not in message


def test_a_sample_recorded_twice_is_refused_naming_both_lines(tmp_path):
    path = write_lines(tmp_path / "replay.jsonl", [record(0, [1000, STOP[0]]), record(1, [7, STOP[0]]),
                                                   record(1, [8, STOP[0]])])
    message = f"replay record {path}:3: sample_id 1 is recorded again (first at line 2); keep one record per sample"
    with pytest.raises(ConfigError) as error:
        index_replay_file(path)
    assert str(error.value) == message
    with pytest.raises(ConfigError) as error:
        check_replay_file(path, PARAMS)
    assert str(error.value) == f"{message}; nothing was generated: fix the file and run again"


MALFORMED = [
    ('{"sample_id": 0, "output_ids": [5, true, 7]}', "output_ids is not a list of ints"),
    ('{"sample_id": 0, "output_ids": [5, 6.0]}', "output_ids is not a list of ints"),
    ('{"sample_id": 0, "output_ids": [99999999999999999999999]}', "output_ids is not a list of ints"),
    ('{"sample_id": 0, "output_ids": "5 6"}', "output_ids is not a list of ints"),
    ('{"sample_id": 0, "output_ids": [5, 6', "not valid JSON"),
    ('[{"sample_id": 0}]', "not a JSON object"),
    ('{"sample_id": 0, "output_ids": [5], "finish_reason": "eos"}', "finish_reason 'eos' is not one of"),
    ('{"sample_id": "0", "other": {"sample_id": 0}, "output_ids": [5]}', "sample_id '0' is not an integer"),
]


@pytest.mark.parametrize("line, what", MALFORMED)
def test_a_malformed_line_is_named_by_its_line_number(tmp_path, line, what):
    path = write_lines(tmp_path / "replay.jsonl", [record(1, [1000, STOP[0]]), line])
    with pytest.raises(ConfigError) as error:
        check_replay_file(path, PARAMS)
    assert str(error.value).startswith(f"replay record {path}:2: {what}")
    with pytest.raises(ConfigError) as error:
        check_replay_file(path, PARAMS)
    assert str(error.value).startswith(f"replay record {path}:2: {what}")
    # Played back without the check first (the Python API): the run stops the same way.
    with pytest.raises(EngineError) as error:
        replay(path, [GenerationRequest(1, [11]), GenerationRequest(0, [11])])
    assert str(error.value).startswith(f"sample_id 0: {path}:2 returned a result that breaks the contract: {what}")


def test_a_line_without_a_sample_id_is_refused_with_its_number(tmp_path):
    path = write_lines(tmp_path / "replay.jsonl", [record(0, [1000, STOP[0]]), '{"output_ids": [1]}'])
    with pytest.raises(ConfigError, match=r"replay record .*replay\.jsonl:2: no integer sample_id; nothing was generated"):
        check_replay_file(path, PARAMS)


def test_a_leaked_prompt_is_caught_at_playback_like_sglangs(tmp_path):
    leaked = [*REQUEST.prompt_ids, 1000, STOP[0]]
    path = write_lines(tmp_path / "replay.jsonl", [record(5, leaked)])
    check_replay_file(path, PARAMS)  # the file alone is fine: only the prompt shows the leak
    with pytest.raises(EngineError) as replayed:
        replay(path, [REQUEST])
    with pytest.raises(EngineError) as served:
        check_result(REQUEST, R.finished("r", 4, leaked, R.stop_reason(STOP[0])), "x", PARAMS)
    assert violation(replayed) == violation(served) == "output_ids start with the prompt ids (the prompt leaked into the output)"


def test_an_abort_record_or_a_missing_one_is_that_samples_error(tmp_path):
    path = write_lines(tmp_path / "replay.jsonl", [record(0, [], "abort", error="server said no"),
                                                   record(2, [1000, STOP[0]])])
    check_replay_file(path, PARAMS)
    results = replay(path, [GenerationRequest(i, [11, 12]) for i in range(3)])
    assert (results[0].finish_reason, results[0].error) == ("abort", f"{path}:1: server said no")
    assert (results[1].finish_reason, results[1].error) == ("abort", f"replay file {path} has no record for sample_id 1")
    assert (results[2].output_ids, results[2].finish_reason, results[2].prompt_tokens) == ([1000, STOP[0]], "stop", 2)


def test_a_good_file_plays_back_exactly(tmp_path):
    lines = [record(0, [5, 6, STOP[1]], "length"), record(1, [1000, STOP[0]]), record(2, [1000, 1001]),
             record(3, [2047, 0] * 4, "length")]
    path = write_lines(tmp_path / "replay.jsonl", lines)
    check_replay_file(path, PARAMS)
    results = replay(path, [GenerationRequest(i, [11]) for i in range(4)])
    assert [(r.output_ids, r.finish_reason, r.error) for r in results.values()] == [
        ([5, 6, STOP[1]], "length", None),  # SGLang checks the length first: a stop id last may end a length
        ([1000, STOP[0]], "stop", None),  # no finish_reason: a final stop id says stop
        ([1000, 1001], "length", None),
        ([2047, 0] * 4, "length", None),  # exactly the cap, ids at both ends of the vocabulary
    ]


def test_a_missing_replay_file_is_named(tmp_path):
    with pytest.raises(ConfigError) as error:
        check_replay_file(str(tmp_path / "nothing.jsonl"), PARAMS)
    assert str(error.value).startswith(f"--replay {tmp_path / 'nothing.jsonl'}: no such file")


def test_a_record_is_checked_against_a_lower_cap_of_its_request(tmp_path):
    """A request's own max_new_tokens (a sampling mix) below the run's: the output is checked against it."""
    path = write_lines(tmp_path / "replay.jsonl", [record(0, [1000, 1001, 1002], "length")])
    check_replay_file(path, PARAMS)  # within the run's cap
    with pytest.raises(EngineError) as error:
        replay(path, [GenerationRequest(0, [11], sampling={"max_new_tokens": 2, "seed": None})])
    assert violation(error) == "3 output ids, more than max_new_tokens = 2"
