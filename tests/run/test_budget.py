"""`plan --hours`: caps per config from what the runs measured, keeping the configs' shares."""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone

import pytest

from eagle3_synth.cli import main
from eagle3_synth.prompts.configs import get_config

from ..conftest import KIMI_TOKENIZER
from ..support.built_datasets import encode_parts, write_prompts


def replay_build(root, tokenizer, config: str, lengths: list[int], seconds: float):
    """A replay run of `config` whose outputs have these lengths, its session `seconds` long."""
    root.mkdir(parents=True, exist_ok=True)
    write_prompts(root / "prompts.jsonl", len(lengths))
    filler = encode_parts(tokenizer, "word")[0]
    stop = encode_parts(tokenizer, "<|im_end|>")[0]
    replay = [{"sample_id": i, "output_ids": [filler] * (n - 1) + [stop], "finish_reason": "stop"}
              for i, n in enumerate(lengths)]
    (root / "replay.jsonl").write_text("".join(json.dumps(r) + "\n" for r in replay), encoding="utf-8")
    out = root / "ds"
    assert main(["build", config, "--model", str(KIMI_TOKENIZER), "--engine", "replay", "--replay",
                 str(root / "replay.jsonl"), "--prompts", str(root / "prompts.jsonl"), "--out", str(out)]) == 0
    for path in (out / ".runs" / config / "journal").glob("*.jsonl"):
        header = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
        start = datetime.strptime(header["started"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()
        os.utime(path, (start + seconds, start + seconds))
    return out


def test_plan_scales_every_cap_by_one_factor_to_fit(tmp_path, kimi_tokenizer, capsys):
    # B1: 4 rollouts of 100 tokens; B3: 2 of 300: 1,000 tokens in 10 + 10 s = 50 tokens/s.
    replay_build(tmp_path / "b1", kimi_tokenizer, "B1_glaive", [100] * 4, 10)
    replay_build(tmp_path / "b3", kimi_tokenizer, "B3_ultrachat", [300] * 2, 10)
    b1, b3 = get_config("B1_glaive").cap, get_config("B3_ultrachat").cap
    need_s = (b1 * 100 + b3 * 300) / 50
    hours = need_s / 3600 / 4  # a quarter of what the caps need
    capsys.readouterr()
    assert main(["plan", str(tmp_path / "b1" / "ds"), str(tmp_path / "b3" / "ds" / ".runs" / "B3_ultrachat"),
                 "--hours", str(hours)]) == 0
    out = capsys.readouterr().out
    assert "throughput: 50 output tokens/s per node (measured: 1,000 tokens in 20 s of generation)" in out
    assert "caps scaled by 0.250 to fit" in out
    assert f"pass: B1_glaive --limit {b1 // 4}; B3_ultrachat --limit {b3 // 4}" in out
    # Twice the nodes, or a faster engine: the caps fit as they are.
    assert main(["plan", str(tmp_path / "b1" / "ds"), "--hours", "1000", "--tokens-per-second", "5000"]) == 0
    assert "every config fits at its cap" in capsys.readouterr().out


def test_plan_errors_name_what_is_missing(tmp_path, capsys):
    assert main(["plan", str(tmp_path), "--hours", "2"]) == 2
    assert "neither a run directory (no run.json) nor a dataset folder (no .runs/)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["plan", str(tmp_path)])  # --hours is required
