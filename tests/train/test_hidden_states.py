"""`hidden-states`: the states in both trainers' layouts against an independent forward, the row <->
file correspondence after speculators' shuffle, resume after a kill, layers, the size guard, --check.

The dataset is built by the tiny model itself (greedy), so `--check`'s argmax comparison is real.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

from eagle3_synth.cli import main
from eagle3_synth.errors import ConfigError
from eagle3_synth.train.hidden_states.layouts import resolve_layers

from ..conftest import TINY_MODEL
from ..support.built_datasets import rewrite_rows
from ..support.cli_processes import KILLED, run_cli_process
from ..support.cli_runs import run_cli
from ..support.trainer_venvs import SPECFORGE, SPECULATORS, read_with, trainer_python

pytestmark = pytest.mark.skipif(not (TINY_MODEL / "config.json").exists(),
                                reason="tiny model fixture missing: run python -m tests.fixtures.train_tiny_model")
CONFIG = "B1_glaive"
ROWS = 6  # the config's bundled sample prompts


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A dataset the tiny model generated greedily (one row per bundled sample prompt) and its ids export."""
    root = tmp_path_factory.mktemp("hidden")
    assert main(["build", CONFIG, "--model", str(TINY_MODEL), "--limit", str(ROWS), "--max-new-tokens", "24",
                 "--temperature", "0", "--batch-size", "4", "--out", str(root / "ds")]) == 0
    assert main(["export", str(root / "ds"), CONFIG, "--format", "ids", "--no-text", "--out", str(root / "ids.jsonl")]) == 0
    return root


@pytest.fixture(scope="module")
def model():
    """The tiny model per dtype, loaded in it (not cast with `.to`: that would also cast the rotary
    embedding's float32 `inv_freq` buffer, which loading in bf16 keeps in float32)."""
    from transformers import AutoModelForCausalLM

    loaded: dict = {}

    def get(dtype: torch.dtype):
        if dtype not in loaded:
            loaded[dtype] = AutoModelForCausalLM.from_pretrained(TINY_MODEL, dtype=dtype).eval()
        return loaded[dtype]

    return get


def records(root: Path) -> list[dict]:
    return [json.loads(line) for line in (root / "ids.jsonl").read_text().splitlines()]


def prepare_like_speculators(root: Path, dest: Path, extra: list[dict] | None = None) -> Path:
    """What `speculators prepare-data` saves from speculator-format rows: shuffled (seed 0) before and
    after the pass-through map, `seq_len` added, torch format, `save_to_disk`
    (data_generation/preprocessing.py: load_and_preprocess_dataset, _passthrough_pretokenized;
    cli/prepare_data.py: prepare_data)."""
    from datasets import Dataset

    rows = [{"input_ids": r["input_ids"], "loss_mask": r["loss_mask"]} for r in records(root)] + (extra or [])
    ds = Dataset.from_list(rows).shuffle(seed=0)
    ds = ds.map(lambda b: {**b, "seq_len": [len(x) for x in b["input_ids"]]}, batched=True).shuffle(seed=0)
    ds.set_format(type="torch")
    ds.save_to_disk(str(dest))
    return dest


def reference(model, ids: list[int], dtype: torch.dtype) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
    """Independently of the hooks: `output_hidden_states=True` row by row. hidden_states[i] is the
    input of layer i; the last entry is the normed state unless `tie_last_hidden_states` is off,
    then it is the last layer's raw output (transformers utils/output_capturing.py)."""
    m = model(dtype)
    with torch.no_grad():
        tied = m(input_ids=torch.tensor([ids]), output_hidden_states=True)
        m.config.tie_last_hidden_states = False
        try:
            raw = m(input_ids=torch.tensor([ids]), output_hidden_states=True)
        finally:
            m.config.tie_last_hidden_states = None
    per_layer = [h[0] for h in raw.hidden_states]  # ids 0..n, n before the norm
    return per_layer, tied.hidden_states[-1][0], tied.logits[0]


def same(actual: torch.Tensor, expected: torch.Tensor, batch_tokens: str) -> None:
    """Row by row (`--batch-tokens 1`) the states are the model's own, bit for bit; batched, a GEMM
    of another shape rounds a few bf16 values one step the other way."""
    if batch_tokens == "1":
        assert torch.equal(actual, expected)
    else:
        torch.testing.assert_close(actual, expected, atol=2 ** -6, rtol=2 ** -6)


# (compute dtype, --batch-tokens)
RUNS = [("float32", "1"), ("float32", "16384"), ("bfloat16", "1"), ("bfloat16", "16384")]


@pytest.mark.parametrize("dtype,batch_tokens", RUNS)
def test_specforge_files_hold_the_models_states_and_the_export_rows(built, model, tmp_path, capsys, dtype, batch_tokens):
    out = tmp_path / "sf"
    code, text = run_cli(["hidden-states", str(built / "ds"), CONFIG, "--format", "specforge", "--out", str(out),
                          "--layers", "0", "1", "2", "--dtype", dtype, "--batch-tokens", batch_tokens, "--no-progress"],
                         capsys)
    assert code == 0, text
    files = sorted(out.glob("*.ckpt"))
    assert [f.name for f in files] == [f"{CONFIG}-{i:09d}.ckpt" for i in range(ROWS)]
    for record, path in zip(records(built), files):
        data = torch.load(path, weights_only=True)
        assert data["input_ids"].tolist() == record["input_ids"] and data["loss_mask"].tolist() == record["loss_mask"]
        assert data["hidden_state"].dtype == data["aux_hidden_state"].dtype == torch.bfloat16
        layers, normed, _ = reference(model, record["input_ids"], getattr(torch, dtype))
        t = len(record["input_ids"])
        assert data["hidden_state"].shape == (1, t, 128) and data["aux_hidden_state"].shape == (1, t, 3 * 128)
        same(data["aux_hidden_state"][0], torch.cat(layers, dim=-1).to(torch.bfloat16), batch_tokens)
        same(data["hidden_state"][0], normed.to(torch.bfloat16), batch_tokens)
    # What SpecForge's offline target head needs from a single-file, tied-embedding model.
    index = json.loads((out / "target_model" / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"]) == {"lm_head.weight", "model.embed_tokens.weight"}
    assert "model.target_model_path=" + str(out / "target_model") in text


@pytest.mark.parametrize("dtype,batch_tokens", RUNS)
def test_speculators_files_follow_the_shuffled_prepared_rows(built, model, tmp_path, capsys, dtype, batch_tokens):
    prepared = prepare_like_speculators(built, tmp_path / "prep")
    code, text = run_cli(["hidden-states", str(built / "ds"), CONFIG, "--format", "speculators", "--prepared",
                          str(prepared), "--layers", "1", "0", "--dtype", dtype, "--batch-tokens", batch_tokens,
                          "--no-progress"], capsys)
    assert code == 0, text
    assert "--target-layer-ids 1 0" in text
    from datasets import load_from_disk
    from safetensors.torch import load_file

    rows = load_from_disk(str(prepared))
    ours = [r["input_ids"] for r in records(built)]
    assert [r["input_ids"].tolist() for r in rows] != ours  # the shuffle moved rows
    for i in range(len(rows)):
        data = load_file(str(prepared / "hidden_states" / f"hs_{i}.safetensors"))
        # speculators compares with torch.equal (train/data.py: ArrowDataset._get_raw_data): dtype included
        assert torch.equal(data["token_ids"], rows[i]["input_ids"])
        layers, _, _ = reference(model, rows[i]["input_ids"].tolist(), getattr(torch, dtype))
        expected = torch.stack([layers[1], layers[0], layers[2]], dim=1)  # the given order, then the pre-norm state
        assert data["hidden_states"].dtype == getattr(torch, dtype)
        same(data["hidden_states"], expected, batch_tokens)


def test_a_prepared_row_that_is_not_ours_is_named(built, tmp_path, capsys):
    foreign = {"input_ids": [5, 6, 7, 8], "loss_mask": [0, 0, 1, 1]}
    prepared = prepare_like_speculators(built, tmp_path / "prep", extra=[foreign])
    from datasets import load_from_disk

    index = [r["input_ids"].tolist() for r in load_from_disk(str(prepared))].index(foreign["input_ids"])
    code, text = run_cli(["hidden-states", str(built / "ds"), CONFIG, "--format", "speculators", "--prepared",
                          str(prepared), "--layers", "1", "2"], capsys)
    assert code == 2
    assert f"row {index} of the prepared dataset {prepared} (4 tokens) is not a row of {CONFIG}" in text
    assert not (prepared / "hidden_states").exists()


def as_tensor(described: dict) -> torch.Tensor:
    """A tensor the trainer's reader returned (tests/support/trainer_readers/described.py), rebuilt."""
    return torch.tensor(described["values"], dtype=getattr(torch, described["dtype"].removeprefix("torch.")))


@pytest.fixture(scope="module")
def speculators_python() -> Path:
    """Module-scoped and named before `built`, so it is resolved first: a skip costs no build."""
    return trainer_python(SPECULATORS)


@pytest.fixture(scope="module")
def specforge_python() -> Path:
    return trainer_python(SPECFORGE)


def test_speculators_own_reader_loads_every_file(speculators_python, built, tmp_path, capsys):
    prepared = prepare_like_speculators(built, tmp_path / "prep")
    assert run_cli(["hidden-states", str(built / "ds"), CONFIG, "--format", "speculators", "--prepared",
                    str(prepared), "--layers", "0", "1", "2"], capsys)[0] == 0
    from datasets import load_from_disk
    from safetensors.torch import load_file

    rows = load_from_disk(str(prepared))
    samples = read_with(speculators_python, "speculators", str(prepared))
    assert len(samples) == len(rows) == ROWS
    for i, sample in enumerate(samples):
        assert "unavailable" not in sample, f"row {i}: {sample}"  # token_ids matched the prepared row
        written = load_file(str(prepared / "hidden_states" / f"hs_{i}.safetensors"))
        t = len(rows[i]["input_ids"])
        assert sample["hidden_states"]["shape"] == [t, 3 * 128] and sample["verifier_last_hidden_states"]["shape"] == [t, 128]
        assert sample["hidden_states"]["dtype"] == str(written["hidden_states"].dtype) == "torch.bfloat16"
        # The aux layers in order, then the pre-norm state, as speculators slices them (train/data.py: _get_raw_data).
        assert torch.equal(as_tensor(sample["hidden_states"]), written["hidden_states"][:, :-1].flatten(1))
        assert torch.equal(as_tensor(sample["verifier_last_hidden_states"]), written["hidden_states"][:, -1])
        assert torch.equal(as_tensor(sample["input_ids"]), rows[i]["input_ids"])
        assert torch.equal(as_tensor(sample["loss_mask"]), rows[i]["loss_mask"])


def test_specforge_own_reader_loads_every_file(specforge_python, built, tmp_path, capsys):
    out = tmp_path / "sf"
    code, printed = run_cli(["hidden-states", str(built / "ds"), CONFIG, "--format", "specforge", "--out", str(out),
                             "--layers", "0", "1", "2"], capsys)
    assert code == 0
    # The next command it prints gives SpecForge only keys its config has (no `mode`: SpecForge 0.2.0
    # config/schema.py `apply_overrides`).
    assert f"train: specforge train --config run.yaml data.hidden_states_path={out} model.target_model_path={out / 'target_model'}" \
        in printed
    samples = read_with(specforge_python, "specforge", str(out))
    assert [s["file"] for s in samples] == [f"{CONFIG}-{i:09d}.ckpt" for i in range(ROWS)]
    for record, sample in zip(records(built), samples):
        written = torch.load(out / sample["file"], weights_only=True)
        t = len(record["input_ids"])
        assert sample["num_tokens"] == t  # validate_files=True opened the file and found the four keys
        # The bf16 SpecForge's target head is built in; `hidden_state` is its name for our aux states.
        assert (sample["hidden_state"]["shape"], sample["hidden_state"]["dtype"]) == ([1, t, 3 * 128], "torch.bfloat16")
        assert (sample["target"]["shape"], sample["target"]["dtype"]) == ([1, t, 128], "torch.bfloat16")
        assert torch.equal(as_tensor(sample["hidden_state"]), written["aux_hidden_state"])
        assert torch.equal(as_tensor(sample["target"]), written["hidden_state"])
        assert torch.equal(as_tensor(sample["input_ids"]), written["input_ids"].unsqueeze(0))
        assert as_tensor(sample["input_ids"]).tolist() == [record["input_ids"]]
        # SpecForge zeroes the last mask position at load (algorithms/eagle3/data.py: normalize_offline_sample).
        assert as_tensor(sample["loss_mask"]).tolist() == [record["loss_mask"][:-1] + [0]]


def test_a_killed_run_resumes_and_redoes_a_torn_file(built, tmp_path, capsys):
    def argv_to(out: Path) -> list[str]:
        return ["hidden-states", str(built / "ds"), CONFIG, "--format", "specforge", "--out", str(out),
                "--layers", "0", "1", "2"]

    out = tmp_path / "sf"
    argv = argv_to(out)
    # Killed with the third file written under its temporary name, before the rename.
    assert run_cli_process(argv, kill_at="hidden_states.before_rename:3") == KILLED
    assert len(list(out.glob("*.ckpt"))) == 2 and len(list(out.glob(".*.partial"))) == 1
    code, text = run_cli([*argv, "--no-progress"], capsys)
    assert code == 0 and f"to write: {ROWS - 2} rows" in text and f"wrote {ROWS - 2} files" in text
    assert not list(out.glob(".*.partial"))
    torn = out / f"{CONFIG}-000000004.ckpt"
    torn.write_bytes(torn.read_bytes()[:100])
    code, text = run_cli([*argv, "--no-progress"], capsys)
    assert code == 0 and "wrote 1 files" in text
    clean = tmp_path / "clean"
    assert run_cli(argv_to(clean), capsys)[0] == 0
    for path in sorted(clean.glob("*.ckpt")):
        resumed, whole = torch.load(out / path.name, weights_only=True), torch.load(path, weights_only=True)
        assert all(torch.equal(resumed[key], whole[key]) for key in whole)


def test_other_layers_in_a_written_folder_are_refused(built, tmp_path, capsys):
    out = tmp_path / "sf"
    base = ["hidden-states", str(built / "ds"), CONFIG, "--format", "specforge", "--out", str(out)]
    assert run_cli([*base, "--layers", "0", "1", "2"], capsys)[0] == 0
    code, text = run_cli([*base, "--layers", "1", "2", "0"], capsys)
    assert code == 2 and "layers: written with [0, 1, 2], now [1, 2, 0]" in text


def test_layers_are_checked_against_the_model(built, tmp_path, capsys):
    base = ["hidden-states", str(built / "ds"), CONFIG, "--format", "specforge", "--out", str(tmp_path / "sf")]
    code, text = run_cli(base, capsys)  # the tiny model has 2 decoder layers: [2, 1, -1] is no default
    assert code == 2
    assert "default layers of --drafter eagle3 ([2, n//2, n-3] = [2, 1, -1]) are invalid for a model with 2" in text
    assert "pass --layers with distinct ids in 0..2" in text
    code, text = run_cli([*base, "--layers", "0", "3", "1"], capsys)
    assert code == 2 and "--layers 0 3 1: layer ids must be distinct and within 0..2" in text
    code, text = run_cli([*base, "--layers", "1", "2"], capsys)
    assert code == 2 and "--format specforge (EAGLE-3) takes exactly 3 --layers, got [1, 2]" in text
    assert resolve_layers(None, 32, "eagle3") == [2, 16, 29] == resolve_layers(None, 32, "dspark")
    with pytest.raises(ConfigError, match=r"--layers 1 1: layer ids must be distinct"):
        resolve_layers([1, 1], 32, "dflash")


def test_dry_run_and_the_size_guard(built, tmp_path, capsys):
    out = tmp_path / "sf"
    base = ["hidden-states", str(built / "ds"), CONFIG, "--format", "specforge", "--out", str(out), "--layers", "0", "1", "2"]
    tokens = sum(len(r["input_ids"]) for r in records(built))
    code, text = run_cli([*base, "--dry-run"], capsys)
    per_token = 4 * 128 * 2 + 16
    assert code == 0 and f"{ROWS} rows, {tokens} tokens" in text and f"about {tokens * per_token} bytes" in text
    assert not out.exists()
    code, text = run_cli([*base, "--max-bytes", str(tokens * per_token - 1)], capsys)
    assert code == 2 and f"would write about {tokens * per_token} bytes, over --max-bytes" in text
    assert not list(out.glob("*.ckpt")) if out.exists() else True
    assert run_cli([*base, "--max-bytes", str(tokens * per_token)], capsys)[0] == 0
    written = sum(p.stat().st_size for p in out.glob("*.ckpt"))
    assert tokens * per_token <= written <= tokens * per_token + ROWS * 4096  # the estimate, plus each file's header


def test_shards_split_the_files(built, tmp_path, capsys):
    out = tmp_path / "sf"
    base = ["hidden-states", str(built / "ds"), CONFIG, "--format", "specforge", "--out", str(out), "--layers", "0", "1", "2",
            "--num-shards", "3"]
    names = []
    for index in range(3):
        before = set(out.glob("*.ckpt")) if out.exists() else set()
        assert run_cli([*base, "--shard-index", str(index)], capsys)[0] == 0
        names.append(sorted(p.name for p in set(out.glob("*.ckpt")) - before))
    assert names[0] == [f"{CONFIG}-{i:09d}.ckpt" for i in (0, 3)]
    assert sum(len(n) for n in names) == ROWS


def test_check_reproduces_the_logits_and_the_greedy_outputs(built, tmp_path, capsys):
    prepared = prepare_like_speculators(built, tmp_path / "prep")
    argv = ["hidden-states", str(built / "ds"), CONFIG, "--format", "speculators", "--prepared", str(prepared),
            "--layers", "1", "2", "--check"]
    code, text = run_cli(argv, capsys)
    assert code == 0, text
    assert f"check: {ROWS} rows, logits reproduced within" in text and "greedy positions compared" in text
    # A stored state that is not the model's: its logits no longer match.
    path = prepared / "hidden_states" / "hs_3.safetensors"
    from safetensors.torch import load_file, save_file

    data = load_file(str(path))
    data["hidden_states"][:, -1] = data["hidden_states"][:, -1].flip(0).clone()  # positions reversed (a scale would not do: the norm undoes it)
    save_file(data, str(path))
    code, text = run_cli(argv, capsys)
    assert code == 1 and "hs_3.safetensors" in text and "logits differ by" in text


def test_check_finds_an_output_id_the_greedy_model_would_not_write(built, tmp_path, capsys):
    ds = tmp_path / "ds"
    shutil.copytree(built / "ds", ds)

    def plant(row: dict) -> None:
        if row["sample_id"] == 2:
            row["output_ids"][5] = (row["output_ids"][5] + 1) % 2000

    rewrite_rows(ds, CONFIG, plant)
    code, text = run_cli(["hidden-states", str(ds), CONFIG, "--format", "specforge", "--out", str(tmp_path / "sf"),
                          "--layers", "0", "1", "2", "--check"], capsys)
    assert code == 1
    assert f"{CONFIG}-000000002.ckpt ({CONFIG}-2): at" in text and "the argmax is not the next output id" in text


def test_min_loss_tokens_leaves_rows_out_of_the_files_and_counts_them(built, tmp_path, capsys):
    lengths = sorted(sum(r["loss_mask"]) for r in records(built))
    threshold = lengths[len(lengths) // 2]
    few = sum(1 for n in lengths if n < threshold)
    assert 0 < few < ROWS
    base = ["hidden-states", str(built / "ds"), CONFIG, "--format", "specforge", "--out", str(tmp_path / "sf"),
            "--layers", "0", "1", "2", "--min-loss-tokens", str(threshold)]
    code, text = run_cli([*base, "--dry-run"], capsys)
    assert code == 0 and f"{ROWS - few} rows" in text
    assert f"left out {few} row{'s' if few != 1 else ''} that have fewer supervised tokens than --min-loss-tokens" in text


def test_several_configs_follow_one_prepared_mix(built, tmp_path, capsys):
    """prepare-data given several exports shuffles them into one dataset (its trainer reads one
    --data-path): the states of the mix are written in one run, and one config alone names the
    rows that are not its own. Configs made with different models are refused without --model."""
    ds = tmp_path / "ds"
    shutil.copytree(built / "ds", ds)
    other_model = shutil.copytree(TINY_MODEL, tmp_path / "tiny-copy")
    assert main(["build", "B7_magpie", "--model", str(other_model), "--max-new-tokens", "16", "--temperature", "0",
                 "--out", str(ds)]) == 0
    assert main(["export", str(ds), "B7_magpie", "--format", "ids", "--no-text", "--out", str(tmp_path / "b7.jsonl")]) == 0
    b7 = [json.loads(line) for line in (tmp_path / "b7.jsonl").read_text().splitlines()]
    prepared = prepare_like_speculators(built, tmp_path / "prep", extra=[{k: r[k] for k in ("input_ids", "loss_mask")}
                                                                          for r in b7])
    base = ["hidden-states", str(ds), "--format", "speculators", "--prepared", str(prepared), "--layers", "1", "2"]

    code, text = run_cli([*base[:2], CONFIG, "B7_magpie", *base[2:]], capsys)
    assert code == 2
    assert (f"these configs were made with different models ({CONFIG}: {TINY_MODEL.resolve()}, B7_magpie: "
            f"{other_model.resolve()})") in text
    code, text = run_cli([*base[:2], CONFIG, *base[2:], "--model", str(TINY_MODEL)], capsys)
    assert code == 2 and f"is not a row of {CONFIG} as selected here" in text
    code, text = run_cli([*base[:2], CONFIG, "B7_magpie", *base[2:], "--model", str(TINY_MODEL), "--no-progress"], capsys)
    assert code == 0, text
    assert f"{ROWS + len(b7)} rows" in text and f"wrote {ROWS + len(b7)} files" in text
    from datasets import load_from_disk
    from safetensors.torch import load_file

    rows = load_from_disk(str(prepared))
    for i in range(len(rows)):
        assert torch.equal(load_file(str(prepared / "hidden_states" / f"hs_{i}.safetensors"))["token_ids"],
                           rows[i]["input_ids"])
    manifest = json.loads((prepared / "hidden_states" / "eagle3_synth_hidden_states.json").read_text())
    assert manifest["config"] == [CONFIG, "B7_magpie"]


def test_the_validation_split_gets_a_folder_of_its_own(tmp_path, capsys):
    """`--split validation` writes the held-out rows' states; a folder holds one split (its manifest
    says which)."""
    assert main(["build", CONFIG, "--model", str(TINY_MODEL), "--limit", str(ROWS), "--max-new-tokens", "8",
                 "--temperature", "0", "--validation", "2", "--out", str(tmp_path / "ds")]) == 0
    held_out = pq.read_table(next((tmp_path / "ds" / CONFIG).glob("validation-*.parquet"))).num_rows
    base = ["hidden-states", str(tmp_path / "ds"), CONFIG, "--format", "specforge", "--layers", "0", "1", "2"]
    assert run_cli([*base, "--split", "validation", "--out", str(tmp_path / "val")], capsys)[0] == 0
    assert len(list((tmp_path / "val").glob("*.ckpt"))) == held_out
    code, text = run_cli([*base, "--out", str(tmp_path / "val")], capsys)
    assert code == 2 and "split: written with 'validation', now 'train'" in text
    assert run_cli([*base, "--out", str(tmp_path / "train")], capsys)[0] == 0
    assert json.loads((tmp_path / "train" / "eagle3_synth_hidden_states.json").read_text())["split"] == "train"
    code, text = run_cli([*base, "--split", "validation", "--out", str(tmp_path / "train")], capsys)
    assert code == 2 and "split: written with 'train', now 'validation'" in text


def test_device_map_spreads_the_model_and_writes_the_same_files(built, tmp_path, capsys):
    """`--device-map auto` (accelerate's dispatch, the route for a model larger than one GPU; here it
    places every module on the CPU) gives the files `--device cpu` gives, byte for byte in content."""
    pytest.importorskip("accelerate", reason="--device-map needs accelerate (the [hidden] extra)")
    written = {}
    for name, placement in (("device", ["--device", "cpu"]), ("map", ["--device-map", "auto"])):
        out = tmp_path / name
        code, text = run_cli(["hidden-states", str(built / "ds"), CONFIG, "--format", "specforge", "--out", str(out),
                              "--layers", "0", "1", "2", "--dtype", "float32", *placement, "--no-progress"], capsys)
        assert code == 0, text
        written[name] = {f.name: torch.load(f, weights_only=True) for f in sorted(out.glob("*.ckpt"))}
    assert list(written["map"]) == list(written["device"]) and len(written["map"]) == ROWS
    for name, data in written["map"].items():
        for key, value in data.items():
            assert torch.equal(value, written["device"][name][key]), (name, key)


def test_a_model_folder_without_a_model_is_refused_before_the_rows(built, tmp_path, capsys):
    """transformers and SGLang in this process load --model: a folder with only a tokenizer (or no
    weights) is named before the rows are read; an option the engine does not use, the same way."""
    from ..conftest import KIMI_TOKENIZER

    out = tmp_path / "sf"
    base = ["hidden-states", str(built / "ds"), CONFIG, "--format", "specforge", "--out", str(out),
            "--layers", "0", "1", "2"]
    code, text = run_cli([*base, "--model", str(KIMI_TOKENIZER), "--dry-run"], capsys)
    assert code == 2 and (f"--model {KIMI_TOKENIZER}: no config.json and no weights (*.safetensors, *.bin, *.pt), and "
                          "--engine transformers loads the model from this folder") in text
    weightless = tmp_path / "model"
    shutil.copytree(TINY_MODEL, weightless, ignore=shutil.ignore_patterns("*.safetensors"))
    code, text = run_cli([*base, "--model", str(weightless)], capsys)
    assert code == 2 and f"--model {weightless}: no weights (*.safetensors, *.bin, *.pt), and --engine transformers" \
        in text
    code, text = run_cli([*base, "--url", "http://127.0.0.1:9"], capsys)
    assert code == 2 and "--url is not used by --engine transformers, only by --engine sglang-http" in text
    assert not out.exists()
