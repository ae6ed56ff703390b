"""Throughput signals: SGLang's `num_retractions` (KV thrashing) reported; the language_model_only hint."""

from __future__ import annotations

import io
import json

from eagle3_synth.run.journal import encode_result
from eagle3_synth.run.progress import Progress, RunSummary

from ..support import sglang_results as R
from .test_sglang_engine import PARAMS, STOP, Reply, body_ids, launch, requests  # noqa: F401 - the fixture


def test_retractions_are_read_journaled_and_reported(launch):  # noqa: F811
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
    assert any("1 samples were retracted 2 times in all" in line for line in summary.lines())


def test_a_vision_language_target_gets_the_language_model_only_hint(tmp_path):
    from eagle3_synth.engines.sglang.args import language_model_only_hint

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
