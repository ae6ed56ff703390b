"""Shards: several processes generate parts of a config into one run directory, `build` assembles.

Covers what goes wrong on real clusters: shards run concurrently (prompt preparation included),
a shard never run (refused, or built with --partial), layouts mixed between runs, the same samples
generated twice, and a journal file from another run copied in.
"""

from __future__ import annotations

import shutil

from eagle3_synth.cli import main
from eagle3_synth.run.journal import JOURNAL_DIR
from eagle3_synth.run.directory import PROMPTS_FILE, RunDirectory

from ..support.built_datasets import KIMI_CONFIG
from ..support.cli_processes import SAMPLES, config_rows, exit_code, replay_inputs, start_cli_process


def generate(generation: list[str], run_dir, shard: int, shards: int, *extra: str) -> int:
    return main(["generate", KIMI_CONFIG, *generation, "--run-dir", str(run_dir),
                 "--num-shards", str(shards), "--shard-index", str(shard), *extra])


def test_four_shard_processes_assemble_to_the_single_process_build(tmp_path, kimi_tokenizer):
    generation = replay_inputs(tmp_path / "inputs", kimi_tokenizer)
    assert main(["build", KIMI_CONFIG, *generation, "--out", str(tmp_path / "single")]) == 0

    # Four CLI processes at once, on an fsspec URL; none finds prompts prepared, so all of them
    # prepare and publish prompts.jsonl concurrently.
    run_url = f"file://{tmp_path / 'run'}"
    outputs = [tmp_path / f"shard-{i}.txt" for i in range(4)]
    processes = [start_cli_process(["generate", KIMI_CONFIG, *generation, "--run-dir", run_url, "--num-shards", "4",
                                    "--shard-index", str(i)], output=outputs[i]) for i in range(4)]
    assert [exit_code(p) for p in processes] == [0, 0, 0, 0]
    for i, output in enumerate(outputs):
        printed = output.read_text()
        assert f"B1_glaive shard {i} of 4: {SAMPLES // 4 + (i < SAMPLES % 4)} prompts kept (0 rejected), 0 already" in printed
        assert f"eagle3-synth build B1_glaive --run-dir {run_url} --out DIR" in printed

    run = RunDirectory(run_url)
    assert sorted((tmp_path / "run").iterdir()) == sorted(
        tmp_path / "run" / name for name in ("run.json", PROMPTS_FILE, "rejects.jsonl", JOURNAL_DIR))
    index = run.scan()
    assert sorted((h["shard_index"], h["num_shards"]) for h in index.sessions) == [(i, 4) for i in range(4)]
    for header in index.sessions:  # each shard journaled exactly its own samples
        shard_ids = index.sample_ids[index.file_index == index.files.index(
            next(f for f in index.files if header["session"] in f))]
        assert set((shard_ids % 4).tolist()) == {header["shard_index"]}

    assert main(["build", KIMI_CONFIG, "--run-dir", run_url, "--out", str(tmp_path / "sharded")]) == 0
    assert config_rows(tmp_path / "sharded") == config_rows(tmp_path / "single")


def test_a_missing_shard_is_refused_by_name_unless_partial(tmp_path, kimi_tokenizer, capsys):
    generation = replay_inputs(tmp_path / "inputs", kimi_tokenizer)
    run_dir = tmp_path / "run"
    for shard in (0, 1, 2):
        assert generate(generation, run_dir, shard, 4) == 0
    capsys.readouterr()

    assert main(["build", KIMI_CONFIG, "--run-dir", str(run_dir), "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert f"B1_glaive: 7 of {SAMPLES} samples in {run_dir} have no result yet" in error
    assert "shard 3 of 4 (never started): 7 missing, e.g. sample_id 3, 7, 11" in error
    assert f"eagle3-synth generate B1_glaive --run-dir {run_dir} --num-shards 4 --shard-index I" in error
    assert "--partial" in error
    assert not (tmp_path / "out" / KIMI_CONFIG).exists()

    assert main(["build", KIMI_CONFIG, "--run-dir", str(run_dir), "--out", str(tmp_path / "out"), "--partial"]) == 0
    assert [r["sample_id"] for r in config_rows(tmp_path / "out")] == [i for i in range(SAMPLES) if i % 4 != 3]


def test_mixed_layouts_skip_what_is_done_and_name_the_gap(tmp_path, kimi_tokenizer, capsys):
    generation = replay_inputs(tmp_path / "inputs", kimi_tokenizer)
    assert main(["build", KIMI_CONFIG, *generation, "--out", str(tmp_path / "single")]) == 0
    run_dir = tmp_path / "run"
    assert generate(generation, run_dir, 0, 2) == 0  # even sample ids
    capsys.readouterr()
    assert generate(generation, run_dir, 2, 4) == 0  # ... all already done by shard 0 of 2
    assert f"shard 2 of 4: 7 prompts kept (0 rejected), 7 already in {run_dir}, 0 generated" in capsys.readouterr().out
    assert generate(generation, run_dir, 1, 4) == 0

    # Gap: sample ids 3 mod 4, named in the largest layout seen.
    assert main(["build", KIMI_CONFIG, "--run-dir", str(run_dir), "--out", str(tmp_path / "out")]) == 2
    assert "shard 3 of 4 (never started): 7 missing" in capsys.readouterr().err
    assert generate(generation, run_dir, 3, 4) == 0
    assert main(["build", KIMI_CONFIG, "--run-dir", str(run_dir), "--out", str(tmp_path / "out")]) == 0
    assert config_rows(tmp_path / "out") == config_rows(tmp_path / "single")


def test_overlapping_results_are_kept_once_the_first_journaled(tmp_path, kimi_tokenizer, capsys):
    generation = replay_inputs(tmp_path / "inputs", kimi_tokenizer)
    run_dir = tmp_path / "run"
    assert generate(generation, run_dir, 0, 1) == 0
    assert main(["build", KIMI_CONFIG, "--run-dir", str(run_dir), "--out", str(tmp_path / "first")]) == 0
    first = config_rows(tmp_path / "first")

    # A second process that generated the same samples (two nodes given one shard, a sampling
    # engine): its file sorts after the first session's, and its outputs differ.
    [original] = RunDirectory(run_dir).journal_files()
    lines = open(original, "rb").read().splitlines(keepends=True)
    changed = [lines[0]] + [line.replace(b'"output_ids":[', b'"output_ids":[7,') for line in lines[1:]]
    (run_dir / JOURNAL_DIR / "29991231T235959Z-other-1-abcdef-00000.jsonl").write_bytes(b"".join(changed))
    capsys.readouterr()
    assert main(["build", KIMI_CONFIG, "--run-dir", str(run_dir), "--out", str(tmp_path / "again")]) == 0
    assert f"{SAMPLES} samples generated more than once" in capsys.readouterr().out
    assert config_rows(tmp_path / "again") == first

    # Named to sort first, the other copy is the one kept: the rule is file order, not chance.
    shutil.move(run_dir / JOURNAL_DIR / "29991231T235959Z-other-1-abcdef-00000.jsonl",
                run_dir / JOURNAL_DIR / "19700101T000000Z-other-1-abcdef-00000.jsonl")
    assert main(["build", KIMI_CONFIG, "--run-dir", str(run_dir), "--out", str(tmp_path / "other")]) == 0
    assert [r["output_ids"] for r in config_rows(tmp_path / "other")] == [[7, *r["output_ids"]] for r in first]


def test_a_journal_from_another_run_is_refused(tmp_path, kimi_tokenizer, capsys):
    generation = replay_inputs(tmp_path / "inputs", kimi_tokenizer)
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    assert generate(generation, ours, 0, 2) == 0
    assert generate(generation, theirs, 1, 2, "--temperature", "0.7") == 0
    [foreign] = RunDirectory(theirs).journal_files()
    shutil.copy(foreign, ours / JOURNAL_DIR)
    capsys.readouterr()

    assert generate(generation, ours, 1, 2) == 2
    error = capsys.readouterr().err
    assert "journal files from another run" in error and foreign.rsplit("/", 1)[1] in error
    assert main(["build", KIMI_CONFIG, "--run-dir", str(ours), "--out", str(tmp_path / "out"), "--partial"]) == 2
    assert "results of different settings are never mixed" in capsys.readouterr().err


def test_shard_options_are_checked(tmp_path, kimi_tokenizer, capsys):
    generation = replay_inputs(tmp_path / "inputs", kimi_tokenizer)
    assert generate(generation, tmp_path / "run", 4, 4) == 2
    assert "--shard-index must be in 0..3 for --num-shards 4, got 4" in capsys.readouterr().err
    assert generate(generation, tmp_path / "run", 0, 0) == 2
    assert "--num-shards must be >= 1, got 0" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()  # refused before anything was written
