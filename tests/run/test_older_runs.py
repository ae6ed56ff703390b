"""A run directory started by an older eagle3-synth, before some fingerprint fields existed
(`fingerprint.LATER_FIELDS`), resumes when this command's values are the ones such a run had, and
is refused, naming the field, when they are not; nothing already generated is touched."""

from __future__ import annotations

import json

from eagle3_synth.cli import main
from eagle3_synth.run.fingerprint import LATER_FIELDS, fingerprint

from ..conftest import KIMI_TOKENIZER
from ..support.built_datasets import KIMI_CONFIG, kimi_outputs, write_prompts


def as_an_older_version_recorded(run_json) -> None:
    """run.json as a version without the later fields wrote it: those fields absent, its fingerprint theirs."""
    run = json.loads(run_json.read_text(encoding="utf-8"))
    for path in LATER_FIELDS:
        *parents, name = path.split(".")
        node = run["fields"]
        for parent in parents:
            node = node[parent]
        del node[name]
    run["fingerprint"] = fingerprint(run["fields"])
    run_json.write_text(json.dumps(run, indent=2), encoding="utf-8")


def test_an_older_run_resumes_and_a_changed_later_field_is_refused(tmp_path, kimi_tokenizer, capsys):
    write_prompts(tmp_path / "prompts.jsonl", 6)
    replay = tmp_path / "replay.jsonl"
    replay.write_text("".join(json.dumps(r) + "\n" for r in kimi_outputs(kimi_tokenizer, 6)), encoding="utf-8")
    argv = ["generate", KIMI_CONFIG, "--model", str(KIMI_TOKENIZER), "--engine", "replay", "--replay", str(replay),
            "--prompts", str(tmp_path / "prompts.jsonl"), "--run-dir"]
    # An older version claimed the run (its run.json) and stopped before generating anything.
    assert main([*argv, str(tmp_path / "scratch")]) == 0
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "run.json").write_bytes((tmp_path / "scratch" / "run.json").read_bytes())
    as_an_older_version_recorded(run_dir / "run.json")
    recorded = (run_dir / "run.json").read_bytes()
    argv.append(str(run_dir))
    capsys.readouterr()

    assert main(argv) == 0  # this version resumes it: everything generated under the run's own fingerprint
    assert "0 already in" in capsys.readouterr().out
    assert main(argv) == 0
    assert "6 already in" in capsys.readouterr().out
    assert main([*argv, "--min-p", "0.1"]) == 2
    err = capsys.readouterr().err
    assert "was started with different settings" in err
    assert "sampling.min_p: not recorded by the run (started by an eagle3-synth without this field" in err
    assert err.count("\n  ") == 1  # that field alone: no list/tuple look-alikes
    assert (run_dir / "run.json").read_bytes() == recorded
    assert main(["build", KIMI_CONFIG, "--run-dir", str(run_dir), "--out", str(tmp_path / "ds")]) == 0
    assert main(["validate", str(tmp_path / "ds")]) == 0
