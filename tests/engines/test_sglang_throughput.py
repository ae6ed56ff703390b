"""Throughput: SGLang's `num_retractions` (KV thrashing) reported, the language_model_only hint, `--priority`."""

from __future__ import annotations

import io
import json

import pytest

from eagle3_synth.contract.row import PreparedPrompt
from eagle3_synth.engines import GenerationRequest
from eagle3_synth.engines.sglang.args import language_model_only_hint
from eagle3_synth.engines.sglang.http import SGLangHTTPEngine
from eagle3_synth.errors import ConfigError
from eagle3_synth.run.conversations import Turn, TurnFeed
from eagle3_synth.run.journal import encode_result
from eagle3_synth.run.progress import Progress, RunSummary

from stand_ins import sglang_results as R
from stand_ins.sglang_server import DeterministicBackend, SGLangLoopbackServer
from .test_sglang_engine import PARAMS, STOP, Reply, body_ids, requests


def test_retractions_are_read_journaled_and_reported(launch):
    def plan(ids, sampling):
        output = body_ids(ids) + [STOP[0]]
        return Reply(R.finished("x", len(ids), output, R.stop_reason(STOP[0]), retractions=2 if ids[0] == 101 else 0))

    results = {r.sample_id: r for r in launch(plan).generate(requests(3), PARAMS)}
    assert [results[i].retractions for i in range(3)] == [0, 2, 0]
    assert "retractions" not in json.loads(encode_result(results[0]))  # a quiet run's lines are unchanged
    assert json.loads(encode_result(results[1]))["retractions"] == 2

    summary = RunSummary(config="B1_glaive", run_dir="r")
    progress = Progress(summary, total=3, done=0, stream=io.StringIO())
    for result in results.values():
        progress.update(result)
    assert "retractions 2" in progress.line()
    assert any("1 sample retracted 2 times in all" in line for line in summary.lines())


def test_a_vision_language_target_gets_the_language_model_only_hint(tmp_path):
    vlm = tmp_path / "kimi"
    vlm.mkdir()
    (vlm / "config.json").write_text(json.dumps({"architectures": ["KimiK25ForConditionalGeneration"],
                                                 "vision_config": {"patch_size": 14}, "text_config": {}}))
    hint = language_model_only_hint({"model_path": str(vlm)})
    assert hint is not None and "--engine-arg language_model_only=true" in hint and str(vlm) in hint
    assert language_model_only_hint({"model_path": str(vlm), "language_model_only": True}) is None
    text_only = tmp_path / "qwen"
    text_only.mkdir()
    (text_only / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"]}))
    assert language_model_only_hint({"model_path": str(text_only)}) is None


def test_priority_turns_left_reaches_the_engine_and_needs_priority_scheduling(launch, tmp_path):
    rollout = PreparedPrompt(sample_id=10, source_id="", prompt_ids=[5, 6], messages=[], tools=None, turns=4)
    feed = TurnFeed(iter([Turn(rollout, 1, [5, 6, 7], [])]), priority=True)
    assert next(feed).priority == 3  # turns 1, 2 and 3 may still come
    assert next(iter(TurnFeed(iter([Turn(rollout, 0, [5, 6], [])])))).priority is None

    engine = launch(lambda ids, sp: Reply(R.finished("x", len(ids), body_ids(ids) + [STOP[0]], R.stop_reason(STOP[0]))),
                    priority=True)
    assert engine.engine.server_args["enable_priority_scheduling"] is True
    results = list(engine.generate([GenerationRequest(0, [101, 7], priority=5), GenerationRequest(1, [102, 7])], PARAMS))
    assert all(r.error is None for r in results)
    assert {c["priority"] for c in engine.engine.calls} == {5, None}


def test_http_priority_says_what_each_server_does_with_it(serve, caplog):
    """sglang 0.5.23 `Scheduler._set_or_validate_priority`: without priority scheduling a request's priority is
    ignored (a warning says --priority changes nothing there), unless the server aborts such
    requests (refused before any is sent); a server that runs low values first gets them negated."""
    plain = SGLangLoopbackServer(DeterministicBackend())
    engine = SGLangHTTPEngine((serve(plain).url,), priority=True, max_in_flight=4)
    try:
        with caplog.at_level("WARNING"):
            engine.check_servers()
        assert "runs without --enable-priority-scheduling: it serves each request and ignores its priority" in caplog.text
        results = list(engine.generate([GenerationRequest(0, [11, 12], priority=2)], PARAMS))
        assert results[0].error is None and plain.priorities == [2]
    finally:
        engine.close()
    aborting = serve(SGLangLoopbackServer(DeterministicBackend(), server_args={"abort_on_priority_when_disabled": True}))
    engine = SGLangHTTPEngine((aborting.url,), priority=True)
    try:
        with pytest.raises(ConfigError, match="runs with --abort-on-priority-when-disabled and without "
                                              "--enable-priority-scheduling, so it aborts every request that has a priority"):
            engine.check_servers()
    finally:
        engine.close()
    for server_args, sent in (({"enable_priority_scheduling": True}, [2]),
                              ({"enable_priority_scheduling": True, "schedule_low_priority_values_first": True}, [-2])):
        server = SGLangLoopbackServer(DeterministicBackend(), server_args=server_args)
        engine = SGLangHTTPEngine((serve(server).url,), priority=True, max_in_flight=4)
        try:
            engine.check_servers()
            results = list(engine.generate([GenerationRequest(0, [11, 12], priority=2)], PARAMS))
            assert results[0].error is None and server.priorities == sent
        finally:
            engine.close()
