"""benchmarks/bench_onpolicy.py's own logic (on-policy against off-policy data), on the tiny model, without speculators:
the off-policy rows (replayed through a real build) against the template's rendering, the budget
cut, and the acceptance-length formula."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ..conftest import TINY_MODEL
from ..support.modules import root_on_path


@pytest.fixture(scope="module")
def bench():
    from benchmarks import bench_onpolicy

    return bench_onpolicy


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(TINY_MODEL))


def stop_ids() -> set[int]:
    return set(json.loads((TINY_MODEL / "generation_config.json").read_text())["eos_token_id"])


def test_answer_ids_are_the_assistant_span_of_the_rendering(bench, tokenizer):
    messages = [{"role": "user", "content": "What is 2 + 3?"}, {"role": "assistant", "content": "2 + 3 = 5."},
                {"role": "user", "content": "Tell me a fun fact."}, {"role": "assistant", "content": "Octopuses have three hearts."}]
    first, second = bench.answer_ids(tokenizer, messages, stop_ids())
    # The history turn renders with an empty reasoning block; what follows the prompt's "<think>" is
    # its close, the answer and the end-of-turn token, and nothing after it.
    assert tokenizer.decode(first) == "</think>2 + 3 = 5.<|im_end|>"
    assert tokenizer.decode(second) == "</think>Octopuses have three hearts.<|im_end|>"
    prompt = tokenizer(tokenizer.apply_chat_template(messages[:3], tokenize=False, add_generation_prompt=True),
                       add_special_tokens=False)["input_ids"]
    full = tokenizer(tokenizer.apply_chat_template(messages, tokenize=False), add_special_tokens=False)["input_ids"]
    assert prompt + second == full


def test_offpolicy_rows_are_the_source_rendering_and_masked_like_ours(bench, tokenizer, tmp_path):
    from datasets import load_dataset

    from eagle3_synth.cli import main as cli

    conversations = bench.source_conversations(3, 6)
    assert len({c["messages"][0]["content"] for c in conversations}) == 6  # no duplicate openings
    answers = [bench.answer_ids(tokenizer, c["messages"], stop_ids()) for c in conversations]
    bench.write_jsonl(tmp_path / "c.jsonl", conversations)
    bench.write_jsonl(tmp_path / "r.jsonl", bench.replay_records(conversations, answers))
    assert cli(["build", bench.CONFIG, "--prompts", str(tmp_path / "c.jsonl"), "--model", str(TINY_MODEL),
                "--turns", "all", "--engine", "replay", "--replay", str(tmp_path / "r.jsonl"), "--validation", "2",
                "--max-new-tokens", "64", "--out", str(tmp_path / "ds")]) == 0
    rows = sum(len(t) for t in answers)
    assert bench.check_offpolicy_rows(tmp_path / "ds", conversations, tokenizer) == rows
    # Every assistant turn became a row whose output is the source's answer, on the source's history.
    train = load_dataset(str(tmp_path / "ds"), bench.CONFIG, split="train")
    for row in train:
        conversation = next(i for i, c in enumerate(conversations) if c["id"] == row["source_id"])
        assert list(row["output_ids"]) == answers[conversation][row["turn"]]
    # The ids export masks exactly the output, as for on-policy rows.
    assert cli(["export", str(tmp_path / "ds"), bench.CONFIG, "--format", "ids", "--no-text",
                "--out", str(tmp_path / "a.jsonl")]) == 0
    exported = bench.read_jsonl(tmp_path / "a.jsonl")
    assert len(exported) == len(train)
    assert bench.loss_tokens(exported) == sum(len(r["output_ids"]) for r in train)


def test_a_wrong_replay_mapping_is_caught(bench, tokenizer, tmp_path):
    from eagle3_synth.cli import main as cli

    conversations = bench.source_conversations(3, 4)
    answers = [bench.answer_ids(tokenizer, c["messages"], stop_ids()) for c in conversations]
    answers[0], answers[1] = answers[1], answers[0]  # each conversation gets another's answers
    bench.write_jsonl(tmp_path / "c.jsonl", conversations)
    bench.write_jsonl(tmp_path / "r.jsonl", bench.replay_records(conversations, answers))
    cli(["build", bench.CONFIG, "--prompts", str(tmp_path / "c.jsonl"), "--model", str(TINY_MODEL), "--turns", "all",
         "--engine", "replay", "--replay", str(tmp_path / "r.jsonl"), "--max-new-tokens", "64", "--out", str(tmp_path / "ds")])
    with pytest.raises(SystemExit, match="is not its source's rendering"):
        bench.check_offpolicy_rows(tmp_path / "ds", conversations, tokenizer)


def test_cut_to_budget_is_exact_and_keeps_ids(bench):
    rows = [{"id": str(i), "input_ids": list(range(10)), "loss_mask": [0] * 4 + [1] * 6} for i in range(5)]
    cut = bench.cut_to_budget(rows, 15)
    assert bench.loss_tokens(cut) == 15
    assert [len(r["input_ids"]) for r in cut] == [10, 10, 10]
    assert cut[-1]["loss_mask"] == [0] * 4 + [1] * 3 + [0] * 3  # the tail beyond the budget unmasked
    assert bench.cut_to_budget(rows, 15) == cut  # seeded
    assert bench.loss_tokens(bench.cut_to_budget(rows, 30)) == 30
    with pytest.raises(SystemExit, match="30 supervised tokens, fewer than the budget 31"):
        bench.cut_to_budget(rows, 31)


def test_acceptance_length_and_summary(bench):
    assert bench.acceptance_length([0.5, 0.25, 0.125]) == 1.875
    assert bench.acceptance_length([]) == 1.0
    s = bench.summary([[0.4, 0.2], [0.6, 0.2]])
    assert s["mean"] == pytest.approx([0.5, 0.2, 1.7])
    assert s["min"] == pytest.approx([0.4, 0.2, 1.6]) and s["max"] == pytest.approx([0.6, 0.2, 1.8])
    assert bench.accuracies({"full_acc_10_epoch": 0.0, "full_acc_2_epoch": 0.1, "full_acc_0_epoch": 0.5, "loss": 1}) == [0.5, 0.1, 0.0]


@pytest.mark.slow
def test_the_benchmark_runs_end_to_end_small(tmp_path):
    """The whole script, tiny: three conditions at one supervised-token budget, trained by
    speculators' own loop, each evaluated on the same held-out on-policy rows, and (a) on its own;
    so a change that breaks the benchmark's path fails CI rather than the next person to rerun it."""
    from ..support.trainer_venvs import SPECULATORS, trainer_python

    python = trainer_python(SPECULATORS)
    out = tmp_path / "bench"
    argv = [sys.executable, "-m", "benchmarks.bench_onpolicy", "--out", str(out), "--conversations", "16",
            "--validation", "4", "--max-new-tokens", "24", "--steps", "2", "--seeds", "0",
            "--total-seq-len", "512", "--speculators-python", str(python)]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env=root_on_path(), check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    budgets = results["budgets"]
    assert len({b["supervised"] for b in budgets.values()}) == 1 == len(results["seeds"])
    assert set(results["runs"]) == {"offpolicy", "last", "all", "offpolicy on its own held-out rows"}
    for accuracies in (run for runs in results["runs"].values() for run in runs):
        assert len(accuracies) == 3 and all(0.0 <= a <= 1.0 for a in accuracies)
    assert results["route_check"]["in training"] == results["route_check"]["from the checkpoint"]


def test_the_table_shows_the_served_acceptance_beside_the_trainer_metric(bench):
    summary = {**bench.summary([[0.5, 0.25, 0.0], [0.3, 0.05, 0.0]]), "rows": 7}
    served = [{"acceptance_length": 1.2}, {"acceptance_length": 1.5}]
    table = bench.table({"eval": {"(c)": {**summary, "served": served}, "(a) own": {**summary, "served": []}}})
    header, _, with_served, without = table.splitlines()
    assert header.endswith("| tau = 1 + sum | served acceptance length |")
    assert with_served == "| (c) | 7 | 0.400 (0.300-0.500) | 0.150 (0.050-0.250) | 0.000 (0.000-0.000) | 1.550 (1.350-1.750) | 1.350 (1.200-1.500) |"
    assert without.endswith("| 1.550 (1.350-1.750) | - |")
