"""`vocab`: counts under the loss mask checked by hand, the tie-break, padding, and each trainer's layout.

The hand-made dataset is built with `build --engine replay` over the tiny Kimi model (its
config.json says vocab_size 2048, recorded with the run). Its outputs, reasoning opened by the
prompt (2041 = `</think>`, 2034 = `<|im_end|>`):

    B1_glaive     [100, 100, 101, 2041, 102, 102, 2034]   response from index 4
                  [101, 103, 2041, 102, 2034]             response from index 3
                  [100, 104, 104]  (cut off)              reasoning never ended
    B3_ultrachat  [105, 2041, 102, 105, 2034]
                  [100, 2041, 106, 2034]

Counted over every output token: 100, 102, 2034 and 2041 four times each; 101, 104, 105 twice;
103 and 106 once -- 24 positions, 9 distinct ids. Over the response only: 102 and 2034 four
times, 105 and 106 once -- 10 positions, 4 distinct ids.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from eagle3_synth.cli import main
from eagle3_synth.dataset.stores import open_source
from eagle3_synth.train.export import loss_mask, masked_output_starts
from eagle3_synth.train.draft_vocab import select_draft_vocab

from ..conftest import TINY_MODEL
from ..support.built_datasets import KIMI_CONFIG, QWEN_CONFIG, build, checks_dataset, write_prompts

CLOSE, STOP = 2041, 2034
OUTPUTS = {
    KIMI_CONFIG: [([100, 100, 101, CLOSE, 102, 102, STOP], "stop"), ([101, 103, CLOSE, 102, STOP], "stop"),
                  ([100, 104, 104], "length")],
    QWEN_CONFIG: [([105, CLOSE, 102, 105, STOP], "stop"), ([100, CLOSE, 106, STOP], "stop")],
}
OUTPUT_COUNTS = {100: 4, 101: 2, 102: 4, 103: 1, 104: 2, 105: 2, 106: 1, CLOSE: 4, STOP: 4}
RESPONSE_COUNTS = {102: 4, 105: 1, 106: 1, STOP: 4}


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    root = tmp_path_factory.mktemp("vocab")
    out = root / "ds"
    for config, outputs in OUTPUTS.items():
        write_prompts(root / f"{config}-prompts.jsonl", len(outputs))
        replay = [{"sample_id": i, "output_ids": ids, "finish_reason": finish} for i, (ids, finish) in enumerate(outputs)]
        build(out, config, TINY_MODEL, replay, root / f"{config}-prompts.jsonl")
    return out


def vocab(tmp_path, capsys, *args: str) -> tuple[dict, str]:
    report = tmp_path / "report.json"
    code = main(["vocab", *args, "--out", str(tmp_path / "out"), "--json", str(report), "--overwrite"])
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(report.read_text(encoding="utf-8")), out


def by_config(report: dict) -> dict[str, dict]:
    return {row["config"]: row for row in report["configs"]}


def test_the_data_is_what_the_counts_assume(small):
    source = open_source(str(small))
    for config, outputs in OUTPUTS.items():
        table = source.table(config, ["output_ids", "response_start"]).to_pylist()
        assert [r["output_ids"] for r in table] == [ids for ids, _ in outputs]
    assert [r["response_start"] for r in source.table(KIMI_CONFIG, ["response_start"]).to_pylist()] == [4, 3, -1]


def test_counts_and_coverage_by_hand(small, tmp_path, capsys):
    report, out = vocab(tmp_path, capsys, str(small), "--draft-vocab-size", "5")
    rows = by_config(report)
    assert (rows[KIMI_CONFIG]["masked_positions"], rows[QWEN_CONFIG]["masked_positions"], rows["all"]["masked_positions"]) == (15, 9, 24)
    assert (rows[KIMI_CONFIG]["distinct_tokens"], rows[QWEN_CONFIG]["distinct_tokens"], rows["all"]["distinct_tokens"]) == (7, 6, 9)
    assert rows["all"]["rows"] == 5 and rows["all"]["rows_without_loss"] == 0
    # Kept: 100, 102, 2034, 2041 and 101. Out: 103 (B1), 104 x2 (B1), 105 x2 and 106 (B3).
    assert rows[KIMI_CONFIG]["covered_positions"] == 12 and rows[KIMI_CONFIG]["coverage"] == pytest.approx(12 / 15)
    assert rows[QWEN_CONFIG]["covered_positions"] == 6 and rows[QWEN_CONFIG]["coverage"] == pytest.approx(6 / 9)
    assert rows["all"]["coverage"] == pytest.approx(18 / 24)
    freq = torch.load(tmp_path / "out" / "speculators-2048-5" / "token_freq.pt", weights_only=True)
    assert freq == OUTPUT_COUNTS  # the prompt's ids (chat template, user text) are never counted
    assert report["target_vocab_size"] == 2048 and "tiny-kimi" in report["target_vocab_size_from"]
    assert "B1_glaive        3                15                7          80.00%" in out
    assert "all              5                24                9          75.00%" in out


def test_ties_at_the_cut_go_to_the_lower_id_and_each_layout_maps_them(small, tmp_path, capsys):
    report, out = vocab(tmp_path, capsys, str(small), "--draft-vocab-size", "5")
    # Count 4: 100, 102, 2034, 2041; then three ids with count 2 (101, 104, 105): 101 is kept.
    assert (report["cut_count"], report["tied_left_out"]) == (2, 2)
    assert "occurs 2 times; 2 more with that count left out (ties go to the lower token id)" in out
    selected = [100, 101, 102, STOP, CLOSE]
    d2t, t2d = (np.load(tmp_path / "out" / "speculators-2048-5" / f"{n}-5.npy") for n in ("d2t", "t2d"))
    assert d2t.dtype == np.int64 and d2t.shape == (5,) and list(d2t + np.arange(5)) == selected
    assert t2d.dtype == np.bool_ and t2d.shape == (2048,) and t2d.sum() == 5 and list(np.flatnonzero(t2d)) == selected
    specforge = torch.load(tmp_path / "out" / "specforge-vocab-2048-5.pt", weights_only=True)
    assert set(specforge) == {"d2t", "t2d"}
    assert specforge["d2t"].dtype == torch.int64 and specforge["d2t"].tolist() == d2t.tolist() == [100, 100, 100, 2031, 2037]
    assert specforge["t2d"].dtype == torch.bool and torch.equal(specforge["t2d"], torch.from_numpy(t2d))
    modelopt = torch.load(tmp_path / "out" / "modelopt-2048-5" / "d2t.pt", weights_only=True)
    # ModelOpt keeps frequency order (most common first), not sorted ids.
    assert modelopt.dtype == torch.int64 and (modelopt + torch.arange(5)).tolist() == [100, 102, STOP, CLOSE, 101]
    assert report["files"]["specforge"] == [str(tmp_path / "out" / "specforge-vocab-2048-5.pt")]


def test_response_only_and_padding_with_a_warning(small, tmp_path, capsys):
    report, out = vocab(tmp_path, capsys, str(small), "--draft-vocab-size", "6", "--train-on", "response")
    rows = by_config(report)
    assert rows["all"]["masked_positions"] == 10 and rows["all"]["distinct_tokens"] == 4
    assert rows[KIMI_CONFIG]["rows_without_loss"] == 1  # the row whose reasoning never ended
    assert report["padded"] == 2 and rows["all"]["coverage"] == 1.0
    assert ("warning: only 4 distinct tokens under the loss mask, fewer than --draft-vocab-size 6: "
            "padded with the 2 lowest unused ids (0, 1), count 0") in out
    freq = torch.load(tmp_path / "out" / "speculators-2048-6" / "token_freq.pt", weights_only=True)
    assert freq == RESPONSE_COUNTS
    d2t = np.load(tmp_path / "out" / "speculators-2048-6" / "d2t-6.npy")
    assert list(d2t + np.arange(6)) == [0, 1, 102, 105, 106, STOP]
    modelopt = torch.load(tmp_path / "out" / "modelopt-2048-6" / "d2t.pt", weights_only=True)
    assert (modelopt + torch.arange(6)).tolist() == [102, STOP, 105, 106, 0, 1]


def test_one_config_and_a_run_directory(small, tmp_path, capsys):
    report, _ = vocab(tmp_path, capsys, str(small / ".runs" / QWEN_CONFIG), "--draft-vocab-size", "3")
    assert [r["config"] for r in report["configs"]] == [QWEN_CONFIG, "all"]
    assert report["target_vocab_size"] == 2048  # the run directory records the model too
    # B3 alone: 105, 2034, 2041 twice each (kept), 100, 102, 106 once.
    assert report["configs"][0]["covered_positions"] == 6 and report["cut_count"] == 2
    assert report["files"]["modelopt"] == [str(tmp_path / "out" / "modelopt-2048-3" / "d2t.pt")]


def test_target_size_from_the_option_or_another_model(small, tmp_path, capsys):
    report, _ = vocab(tmp_path, capsys, str(small), KIMI_CONFIG, "--draft-vocab-size", "4", "--target-vocab-size", "4096")
    assert report["target_vocab_size"] == 4096 and report["target_vocab_size_from"] == "--target-vocab-size"
    assert np.load(tmp_path / "out" / "speculators-4096-4" / "t2d-4.npy").shape == (4096,)
    report, _ = vocab(tmp_path, capsys, str(small), "--draft-vocab-size", "4", "--model", str(TINY_MODEL))
    assert report["target_vocab_size"] == 2048 and str(TINY_MODEL) in report["target_vocab_size_from"]


def error_of(capsys, *args: str) -> str:
    assert main(["vocab", *args]) == 2
    return capsys.readouterr().err


def test_errors_name_what_to_pass(small, tmp_path, capsys, kimi_tokenizer, qwen_tokenizer, tmp_path_factory):
    out = ["--out", str(tmp_path / "out")]
    # The fixture datasets were made from tokenizer folders: no config.json, no vocab_size.
    folder = checks_dataset(tmp_path_factory, kimi_tokenizer, qwen_tokenizer)
    err = error_of(capsys, str(folder), "--draft-vocab-size", "8", *out)
    assert "the target vocabulary size is unknown" in err and "pass --target-vocab-size N" in err
    err = error_of(capsys, str(small), "--draft-vocab-size", "8", "--target-vocab-size", "1000", *out)
    assert "B1_glaive: token id 2041 is outside the target vocabulary of 1000 ids" in err
    assert "larger than the target vocabulary (2048)" in error_of(capsys, str(small), "--draft-vocab-size", "4096", *out)
    assert "no config 'nope'" in error_of(capsys, str(small), "nope", "--draft-vocab-size", "8", *out)
    assert not (tmp_path / "out").exists()  # nothing written on an error


def test_the_vectorised_mask_is_training_loss_mask(tmp_path_factory, kimi_tokenizer, qwen_tokenizer):
    """The column-wise first masked index equals `training.loss_mask` on every fixture row."""
    source = open_source(str(checks_dataset(tmp_path_factory, kimi_tokenizer, qwen_tokenizer)))
    for config in source.configs():
        rows = source.table(config, ["output_ids", "response_start"]).to_pylist()
        lengths = np.array([len(r["output_ids"]) for r in rows])
        starts = np.array([r["response_start"] for r in rows])
        assert -1 in starts.tolist() or config != KIMI_CONFIG
        for train_on in ("output", "response"):
            first = masked_output_starts(lengths, starts, train_on)
            for row, f in zip(rows, first):
                n = len(row["output_ids"])
                assert loss_mask(0, n, row["response_start"], train_on) == [0] * f + [1] * (n - f)


def test_selection_without_data():
    counts = np.zeros(16, dtype=np.int64)
    counts[[3, 9]] = [5, 5]
    vocab = select_draft_vocab(counts, 4)
    assert vocab.order.tolist() == [3, 9, 0, 1] and vocab.padded == 2 and vocab.selected().tolist() == [0, 1, 3, 9]
    assert (vocab.d2t() + np.arange(4)).tolist() == [0, 1, 3, 9] and int(vocab.t2d().sum()) == 4
