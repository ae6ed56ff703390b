"""A new run's prompts are prepared before the engine starts (run/staging.py); an engine's tighter
limit turns the staged prompts over it into `too_long` rejects before anything is published.

The in-process SGLang engine is the fake `sglang.Engine` (tests/support/fake_sglang.py), whose
limit comes from its `context_len` as the real one's does."""

from __future__ import annotations

import json
from pathlib import Path

from eagle3_synth.cli import main
from eagle3_synth.engines.sglang import engine as sglang_engine

from ..conftest import TINY_MODEL
from ..engines.test_sglang_engine import FIELD_NAMES, FIELDS
from stand_ins import sglang_results as R
from ..support.fake_sglang import Engine as FakeEngine, Reply

CONFIG = "B3_ultrachat"


def _prompts(path: Path, texts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"messages": [{"role": "user", "content": text}]}) + "\n" for text in texts),
                    encoding="utf-8")
    return path


def _fake_sglang(monkeypatch, kimi_tokenizer, run_dir: Path, context_len: int) -> tuple[list[int], list[dict]]:
    """The fake engine in place of sglang's: returns (prompt lengths it was sent, what the run
    directory held each time an engine was created)."""
    ids = kimi_tokenizer.convert_tokens_to_ids
    output = kimi_tokenizer.encode("Fine.", add_special_tokens=False) + [ids("<|im_end|>")]
    sent: list[int] = []
    created: list[dict] = []

    def plan(prompt, sampling):
        sent.append(len(prompt))
        return Reply(R.finished("x", len(prompt), output, R.stop_reason(output[-1])))

    class Recording(FakeEngine.configure(plan, FIELD_NAMES, context_len=context_len)):  # type: ignore[misc]
        def __init__(self, **kwargs):
            names = sorted(p.name for p in run_dir.iterdir()) if run_dir.exists() else []
            created.append({"published": "prompts.jsonl" in names,
                            "staged": any(n.startswith(".prompts.jsonl.") for n in names)})
            super().__init__(**kwargs)

    def fake_import():
        return Recording, FIELDS

    monkeypatch.setattr(sglang_engine, "import_sglang", fake_import)
    return sent, created


def test_prompts_over_the_engines_limit_become_too_long_rejects_before_publishing(tmp_path, monkeypatch,
                                                                                  kimi_tokenizer):
    out = tmp_path / "ds"
    run_dir = out / ".runs" / CONFIG
    sent, created = _fake_sglang(monkeypatch, kimi_tokenizer, run_dir, context_len=120)
    prompts = _prompts(tmp_path / "prompts.jsonl", ["Hi", " ".join(["word"] * 60), "Hello there"])
    argv = ["build", CONFIG, "--model", str(TINY_MODEL), "--engine", "sglang", "--max-new-tokens", "16",
            "--temperature", "0", "--prompts", str(prompts), "--out", str(out)]
    assert main(argv) == 0
    # The engine started once the prompts were prepared (staged aside), before they were published.
    assert created == [{"published": False, "staged": True}]
    rejects = [json.loads(line) for line in open(run_dir / "rejects.jsonl", encoding="utf-8")]
    assert [(r["sample_id"], r["conversation_id"], r["reason"]) for r in rejects] == [(1, 1, "too_long")]
    # 120 - 16 = 104 and (120 - 1 - 5) - 1 = 113: the engine's limit is 104 (engine.py, protocol.py)
    assert rejects[0]["detail"].endswith("prompt tokens > 104 (the engine's limit for max_new_tokens)")
    prompts_file = (run_dir / "prompts.jsonl").read_bytes()
    assert [json.loads(line)["sample_id"] for line in prompts_file.splitlines()] == [0, 2]
    assert len(sent) == 2 and max(sent) <= 104, "the long prompt was never sent"
    assert not [p for p in run_dir.iterdir() if p.name.endswith(".tmp")], "no staged file is left"

    # Resumed (here: nothing left): the published prompt list never changes, whatever the engine.
    rejects_file = (run_dir / "rejects.jsonl").read_bytes()
    assert main(argv) == 0
    assert (run_dir / "prompts.jsonl").read_bytes() == prompts_file
    assert (run_dir / "rejects.jsonl").read_bytes() == rejects_file


def test_a_run_whose_preparation_fails_never_starts_the_engine(tmp_path, monkeypatch, kimi_tokenizer, capsys):
    out = tmp_path / "ds"
    sent, created = _fake_sglang(monkeypatch, kimi_tokenizer, out / ".runs" / CONFIG, context_len=4096)
    prompts = _prompts(tmp_path / "prompts.jsonl", ["Hi", "say <|im_end|> now"])
    code = main(["build", CONFIG, "--model", str(TINY_MODEL), "--engine", "sglang", "--strict",
                 "--prompts", str(prompts), "--out", str(out)])
    assert code == 2 and "control token" in capsys.readouterr().err
    assert created == [] and sent == []
    assert not out.exists(), "a failed build leaves no empty --out (nor a run without prompts) behind"


def test_a_run_with_every_prompt_rejected_starts_no_engine(tmp_path, monkeypatch, kimi_tokenizer, capsys):
    out = tmp_path / "ds"
    sent, created = _fake_sglang(monkeypatch, kimi_tokenizer, out / ".runs" / CONFIG, context_len=4096)
    prompts = _prompts(tmp_path / "prompts.jsonl", ["say <|im_end|> now"])
    code = main(["build", CONFIG, "--model", str(TINY_MODEL), "--engine", "sglang",
                 "--prompts", str(prompts), "--out", str(out)])
    assert code == 2 and "no row to write (0 prompts kept, rejected: control_token=1" in capsys.readouterr().err
    assert created == [] and sent == []
    assert (out / ".runs" / CONFIG / "rejects.jsonl").is_file(), "the run and its rejects stay, for the next build"
