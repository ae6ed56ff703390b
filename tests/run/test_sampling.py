"""Per-row sampling: every row's `sampling` column is what its engine was sent, a `--sampling-mix`
is drawn per rollout and reproduced from its seed, and a `length` row under its cap is counted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from eagle3_synth.cli import main
from eagle3_synth.dataset.stats import config_stats
from eagle3_synth.dataset.stores import open_source
from eagle3_synth.engines.replay import ReplayEngine
from eagle3_synth.engines.sglang import engine as sglang_engine
from eagle3_synth.engines.transformers_engine import TransformersEngine
from eagle3_synth.errors import ConfigError

from ..conftest import KIMI_TOKENIZER, TINY_MODEL
from ..engines.test_sglang_engine import FIELD_NAMES, FIELDS
from stand_ins import sglang_results as R
from ..support.cli_processes import config_rows
from ..support.fake_sglang import Engine as FakeEngine, Reply
from stand_ins.sglang_server import SGLangLoopbackServer, ServerThread, TinyModelBackend

CONFIG = "B2_hermes_fc"
MIX = "temperature=0.0:0.5,temperature=1.0+top_k=20+min_p=0.05:0.5"
SAMPLED = ("temperature", "top_p", "top_k", "min_p", "max_new_tokens", "seed")


def conversations(path: Path) -> Path:
    chats = [{"id": f"c{i}", "messages": [{"role": "user", "content": f"Tell me about the number {i}."},
                                          {"role": "assistant", "content": "It is a number."},
                                          {"role": "user", "content": "And more?"}]} for i in range(4)]
    path.write_text("".join(json.dumps(c) + "\n" for c in chats), encoding="utf-8")
    return path


def build(out: Path, prompts: Path, *extra: str) -> list[dict]:
    assert main(["build", CONFIG, "--prompts", str(prompts), "--turns", "all", "--samples-per-prompt", "2",
                 "--max-new-tokens", "24", "--sampling-mix", MIX, "--out", str(out), *extra]) == 0
    return sorted(config_rows(out, CONFIG), key=lambda row: row["sample_id"])


def from_sglang(sampling: dict) -> dict:
    """SGLang's sampling_params as the column writes them (its seed key is sampling_seed)."""
    return {**{k: sampling[k] for k in SAMPLED if k != "seed"}, "seed": sampling.get("sampling_seed")}


def check_rows(rows: list[dict], sent: dict[int, dict]) -> None:
    """Each row's column is what the engine was sent for it; a rollout's turns share its draw."""
    assert rows and {row["sample_id"] for row in rows} == set(sent)
    by_rollout: dict[tuple[int, int], dict] = {}
    for row in rows:
        sampling = json.loads(row["sampling"])
        assert sampling == sent[row["sample_id"]]
        assert sampling["seed"] == 0 + row["sample_id"]  # --seed 0 + the sample id
        drawn = {k: v for k, v in sampling.items() if k != "seed"}
        assert by_rollout.setdefault((row["conversation_id"], row["sample_index"]), drawn) == drawn
    assert {json.loads(row["sampling"])["temperature"] for row in rows} == {0.0, 1.0}, "the mix drew both"


def test_transformers_rows_say_what_each_request_was_sampled_with(tmp_path, monkeypatch):
    sent: dict[int, dict] = {}
    batch = TransformersEngine._generate_batch

    def recording(self, requests, run):
        for request in requests:
            params = request.params(run)
            sent[request.sample_id] = {k: getattr(params, k) for k in SAMPLED}
        return batch(self, requests, run)

    monkeypatch.setattr(TransformersEngine, "_generate_batch", recording)
    rows = build(tmp_path / "ds", conversations(tmp_path / "p.jsonl"), "--model", str(TINY_MODEL))
    check_rows(rows, sent)
    greedy = [row for row in rows if json.loads(row["sampling"])["temperature"] == 0.0]
    sampled = [row for row in rows if json.loads(row["sampling"])["top_k"] == 20]
    assert greedy and sampled and all(json.loads(r["sampling"])["min_p"] == 0.05 for r in sampled)


def test_replay_rows_say_what_each_request_was_sampled_with(tmp_path, monkeypatch):
    tokenizer = AutoTokenizer.from_pretrained(KIMI_TOKENIZER)
    done = tokenizer.encode("Done.", add_special_tokens=False) + [tokenizer.convert_tokens_to_ids("<|im_end|>")]
    replay = tmp_path / "replay.jsonl"
    replay.write_text("".join(json.dumps({"sample_id": i, "output_ids": done, "finish_reason": "stop"}) + "\n"
                              for i in range(32)), encoding="utf-8")
    sent: dict[int, dict] = {}
    result = ReplayEngine._result

    def recording(self, request, run):
        params = request.params(run)
        sent[request.sample_id] = {k: getattr(params, k) for k in SAMPLED}
        return result(self, request, run)

    monkeypatch.setattr(ReplayEngine, "_result", recording)
    rows = build(tmp_path / "ds", conversations(tmp_path / "p.jsonl"), "--model", str(KIMI_TOKENIZER),
                 "--engine", "replay", "--replay", str(replay), "--turns", "last")
    check_rows(rows, sent)


def test_sglang_engine_rows_are_what_the_engine_was_sent(tmp_path, monkeypatch):
    tokenizer = AutoTokenizer.from_pretrained(KIMI_TOKENIZER)
    done = tokenizer.encode("Done.", add_special_tokens=False) + [tokenizer.convert_tokens_to_ids("<|im_end|>")]
    sent: dict[int, dict] = {}

    def plan(prompt, sampling):  # with --seed 0 a request's sampling_seed is its sample id
        sent[sampling["sampling_seed"]] = from_sglang(sampling)
        return Reply(R.finished("x", len(prompt), done, R.stop_reason(done[-1])))

    cls = FakeEngine.configure(plan, FIELD_NAMES)
    monkeypatch.setattr(sglang_engine, "import_sglang", lambda: (cls, FIELDS))
    rows = build(tmp_path / "ds", conversations(tmp_path / "p.jsonl"), "--model", str(TINY_MODEL),
                 "--engine", "sglang", "--turns", "last")
    check_rows(rows, sent)


def test_sglang_http_rows_are_what_the_server_was_sent_and_a_lowered_cap_is_counted(tmp_path):
    prompts = conversations(tmp_path / "p.jsonl")
    server = SGLangLoopbackServer(TinyModelBackend(str(TINY_MODEL)))
    with ServerThread(server) as thread:
        rows = build(tmp_path / "ds", prompts, "--model", str(TINY_MODEL), "--engine", "sglang-http",
                     "--url", thread.url)
    # With --seed 0 a request's sampling_seed is its sample id.
    check_rows(rows, {s["sampling_params"]["sampling_seed"]: from_sglang(s["sampling_params"]) for s in server.sent})
    assert config_stats(open_source(str(tmp_path / "ds")).table(CONFIG)).share_lowered == 0
    # A server whose KV room is a few tokens past the longest prompt lowers max_new_tokens to fit
    # (srt/managers/scheduler.py): `length` rows shorter than the 24 their column says.
    longest = max(row["prompt_tokens"] for row in rows)
    tight = SGLangLoopbackServer(TinyModelBackend(str(TINY_MODEL)), kv_capacity=longest + 8)
    with ServerThread(tight) as thread:
        lowered = build(tmp_path / "tight", prompts, "--model", str(TINY_MODEL), "--engine", "sglang-http",
                        "--url", thread.url)
    cut = [row for row in lowered if row["finish_reason"] == "length" and row["completion_tokens"] < 24]
    assert cut and all(json.loads(row["sampling"])["max_new_tokens"] == 24 for row in cut)
    stats = config_stats(open_source(str(tmp_path / "tight")).table(CONFIG))
    assert stats.share_lowered == pytest.approx(len(cut) / len(lowered))
    assert main(["stats", str(tmp_path / "tight")]) == 0


def test_a_mix_is_reproduced_from_its_seed_and_moves_with_it(tmp_path):
    prompts = conversations(tmp_path / "p.jsonl")
    common = ("--model", str(TINY_MODEL), "--turns", "last")

    def drawn(rows):
        return [(row["sample_id"], json.loads(row["sampling"])["temperature"]) for row in rows]

    first = build(tmp_path / "a", prompts, *common, "--selection-seed", "1")
    again = build(tmp_path / "b", prompts, *common, "--selection-seed", "1")
    other = build(tmp_path / "c", prompts, *common, "--selection-seed", "3")
    assert first == again
    assert drawn(first) != drawn(other)


@pytest.mark.parametrize("mix, message", [
    ("max_new_tokens=64:1", "--sampling-mix: 'max_new_tokens' cannot be mixed (per run: --max-new-tokens"),
    ("seed=3:1", "--sampling-mix: 'seed' cannot be mixed (per sample: --seed + its sample id)"),
    ("temperature=-1:1", "--sampling-mix: temperature must be >= 0, got -1"),
    ("min_p=2:1", "--sampling-mix: min_p must be >= 0 and <= 1, got 2"),
    ("temperature=0.5", "--sampling-mix: 'temperature=0.5' is not KEY=VALUE[+KEY=VALUE...]:WEIGHT"),
])
def test_a_bad_sampling_mix_is_named(mix, message):
    from eagle3_synth.run.settings import GenerationSettings

    with pytest.raises(ConfigError) as caught:
        GenerationSettings(sampling_mix=mix)
    assert message in str(caught.value)
