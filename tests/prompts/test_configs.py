"""Configs of one's own from a YAML file (`--config-file`), built end to end and loaded back."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datasets import load_dataset

from eagle3_synth.cli import main
from eagle3_synth.prompts.configs import CONFIGS, get_config, load_config_file
from eagle3_synth.errors import ConfigError

from ..conftest import KIMI_TOKENIZER
from ..support.prompt_cases import write_replay

SUPPORT_CHATS = [
    {"id": "chat-1", "conversations": [{"from": "human", "value": "My router blinks red. What now?"},
                                       {"from": "gpt", "value": "Restart it."}]},
    {"id": "chat-2", "conversations": [{"from": "human", "value": "How do I reset my password?"},
                                       {"from": "gpt", "value": "Use the link on the login page."},
                                       {"from": "human", "value": "The link has expired."}]},
    {"id": "chat-3", "conversations": [{"from": "human", "value": "Can I get an invoice for March?"},
                                       {"from": "gpt", "value": "Sure."}]},
    {"id": "chat-4", "conversations": [{"from": "human", "value": "Is there a student discount?"}]},
    {"id": "chat-5", "conversations": [{"from": "robot", "value": "beep"}]},
]


@pytest.fixture(autouse=True)
def restore_registry():
    """Configs loaded by a test stay in that test."""
    saved = dict(CONFIGS)
    yield
    CONFIGS.clear()
    CONFIGS.update(saved)


def write_yaml(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def write_chats(path: Path) -> Path:
    path.write_text("".join(json.dumps(chat) + "\n" for chat in SUPPORT_CHATS), encoding="utf-8")
    return path


CONFIG_YAML = """\
MY_support:
  adapter: sharegpt
  cap: 3
  pattern: customer-support chat
  license: cc-by-4.0
  max_new_tokens: 512
  template_kwargs: {thinking: false}
"""


def build_args(tmp_path: Path, config: str, *extra: str) -> list[str]:
    return ["build", config, "--config-file", str(tmp_path / "configs.yaml"), "--model", str(KIMI_TOKENIZER),
            "--engine", "replay", "--replay", str(tmp_path / "replay.jsonl"), "--out", str(tmp_path / "ds"), *extra]


def test_yaml_config_builds_end_to_end_and_loads(tmp_path, kimi_tokenizer):
    write_yaml(tmp_path / "configs.yaml", CONFIG_YAML)
    write_replay(tmp_path / "replay.jsonl", kimi_tokenizer, 10)
    chats = write_chats(tmp_path / "chats.jsonl")
    assert main(build_args(tmp_path, "MY_support", "--source-file", str(chats))) == 0

    ds = load_dataset(str(tmp_path / "ds"), "MY_support", split="train")
    assert len(ds) == 3  # the config's cap
    assert set(ds["source_id"]) <= {"chat-1", "chat-2", "chat-3", "chat-4"}
    chat_2 = [{"role": "user", "content": "How do I reset my password?"},
              {"role": "assistant", "content": "Use the link on the login page."},
              {"role": "user", "content": "The link has expired."}]
    for row in ds:
        # thinking=false from the config file reaches the template: the prompt closes reasoning itself
        assert kimi_tokenizer.decode(row["prompt_ids"]).endswith("<|im_assistant|>assistant<|im_middle|><think></think>")
        if row["source_id"] == "chat-2":
            assert json.loads(row["messages"]) == chat_2
    run = json.loads((tmp_path / "ds" / ".runs" / "MY_support" / "run.json").read_text())
    assert run["fields"]["sampling"]["max_new_tokens"] == 512
    assert run["fields"]["template_kwargs"] == {"thinking": False}
    assert "config_name: MY_support" in (tmp_path / "ds" / "README.md").read_text()


def test_dataset_folder_source_reads_like_the_same_file(tmp_path, kimi_tokenizer):
    """`--from-source` (datasets streaming) over a local dataset folder selects exactly what
    `--source-file` selects from the same file: same records, same sample_ids, same prompt ids."""
    folder = tmp_path / "support-chats"
    folder.mkdir()
    good = [chat for chat in SUPPORT_CHATS if chat["id"] != "chat-5"]
    (folder / "train.jsonl").write_text("".join(json.dumps(chat) + "\n" for chat in good), encoding="utf-8")
    write_yaml(tmp_path / "configs.yaml", CONFIG_YAML + f"  source: {folder}\n  split: train\n")
    write_replay(tmp_path / "replay.jsonl", kimi_tokenizer, 10)

    assert main(build_args(tmp_path, "MY_support", "--from-source", "--run-dir", str(tmp_path / "run-a"))) == 0
    streamed = load_dataset(str(tmp_path / "ds"), "MY_support", split="train")
    assert main(build_args(tmp_path, "MY_support", "--source-file", str(folder / "train.jsonl"),
                           "--run-dir", str(tmp_path / "run-b"), "--overwrite")) == 0
    from_file = load_dataset(str(tmp_path / "ds"), "MY_support", split="train")
    assert len(streamed) == 3
    assert list(streamed["sample_id"]) == list(from_file["sample_id"])
    assert list(streamed["source_id"]) == list(from_file["source_id"])
    assert list(streamed["prompt_ids"]) == list(from_file["prompt_ids"])


def test_columns_are_projected_for_parquet_and_ignored_otherwise(tmp_path, kimi_tokenizer, caplog):
    parquet_folder = tmp_path / "pq"
    parquet_folder.mkdir()
    rows = [{"uuid": f"u{i}", "conversations": [{"from": "human", "value": f"Question {i}?"}], "huge": "x" * 100}
            for i in range(4)]
    pq.write_table(pa.Table.from_pylist(rows), parquet_folder / "train-00000-of-00001.parquet")
    json_folder = tmp_path / "js"
    json_folder.mkdir()
    (json_folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    write_yaml(tmp_path / "configs.yaml", f"""\
MY_pq: {{adapter: sharegpt, source: {parquet_folder}, columns: [uuid, conversations], cap: 4}}
MY_js: {{adapter: sharegpt, source: {json_folder}, columns: [uuid, conversations], cap: 4}}
""")
    write_replay(tmp_path / "replay.jsonl", kimi_tokenizer, 10)
    for config in ("MY_pq", "MY_js"):
        assert main(build_args(tmp_path, config, "--from-source")) == 0
        assert sorted(load_dataset(str(tmp_path / "ds"), config, split="train")["source_id"]) == ["u0", "u1", "u2", "u3"]
    assert "not Parquet, reading all columns" in caplog.text


def test_a_custom_config_needs_a_source_of_prompts(tmp_path, capsys):
    write_yaml(tmp_path / "configs.yaml", CONFIG_YAML)
    (tmp_path / "replay.jsonl").write_text("", encoding="utf-8")  # there: a missing one is refused first
    assert main(build_args(tmp_path, "MY_support")) == 2
    assert "has no bundled sample prompts; pass --source-file FILE, --from-source or --prompts FILE" in capsys.readouterr().err
    assert main(build_args(tmp_path, "MY_support", "--from-source")) == 2
    assert "config MY_support has no source dataset" in capsys.readouterr().err


def test_loaded_configs_are_registered_with_defaults(tmp_path):
    names = load_config_file(write_yaml(tmp_path / "c.yaml",
                                        "A_one: {adapter: messages}\nB_two: {adapter: glaive, cap: 7, split: validation}\n"))
    assert names == ["A_one", "B_two"]
    one, two = get_config("A_one"), get_config("B_two")
    assert (one.cap, one.split, one.license, one.max_new_tokens, one.source) == (12_000, "train", "unspecified", 10_240, "")
    assert (two.adapter, two.cap, two.split) == ("glaive", 7, "validation")


@pytest.mark.parametrize("text,message", [
    ("MY_x: {adapter: sharegpt, capp: 3}", "unknown field(s) capp"),
    ("MY_x: {cap: 3}", "'adapter' is required"),
    ("MY_x: {adapter: csv}", "unknown adapter 'csv'"),
    ("MY_x: {adapter: sharegpt, cap: 0}", "cap must be an integer >= 1"),
    ("MY_x: {adapter: sharegpt, max_new_tokens: many}", "max_new_tokens must be an integer >= 1"),
    ("MY_x: {adapter: sharegpt, template_kwargs: [thinking]}", "template_kwargs must be a mapping"),
    ("MY_x: {adapter: sharegpt, source_configs: {a: 1}}", "source_configs must be a list of strings"),
    ("B1_glaive: {adapter: glaive}", "config 'B1_glaive': the name is built in"),
    ("'my config': {adapter: glaive}", "a name is letters, digits"),
    ("- just\n- a list\n", "expected a mapping of config names"),
    ("MY_x: [adapter]", "expected a mapping of fields"),
    ("MY_x: {adapter: sharegpt", "not valid YAML"),
])
def test_bad_config_files_are_named(tmp_path, capsys, text, message):
    write_yaml(tmp_path / "configs.yaml", text)
    assert main(build_args(tmp_path, "MY_x")) == 2
    err = capsys.readouterr().err
    assert message in err and "configs.yaml" in err
    assert "MY_x" not in CONFIGS


def test_missing_config_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="--config-file .*nope.yaml: no such file"):
        load_config_file(tmp_path / "nope.yaml")


def test_a_custom_configs_card_says_its_license_and_source_without_the_config_file(tmp_path, kimi_tokenizer):
    """The run records the config it was generated from, so the card of a folder built from a
    --config-file shows its source and license in a process that never loaded that file."""
    from huggingface_hub import DatasetCard

    from eagle3_synth.dataset.folder import write_readme

    write_yaml(tmp_path / "configs.yaml", CONFIG_YAML + "  source: my-org/support-chats\n")
    write_replay(tmp_path / "replay.jsonl", kimi_tokenizer, 10)
    assert main(build_args(tmp_path, "MY_support", "--source-file", str(write_chats(tmp_path / "chats.jsonl")))) == 0
    run = json.loads((tmp_path / "ds" / ".runs" / "MY_support" / "run.json").read_text())
    assert run["meta"]["config"]["license"] == "cc-by-4.0" and run["meta"]["config"]["source"] == "my-org/support-chats"

    del CONFIGS["MY_support"]  # as in another process: the config file was never loaded
    card = DatasetCard.load(write_readme(tmp_path / "ds"))
    assert card.data.to_dict()["license"] == "cc-by-4.0"
    assert ("| `MY_support` | 3 | [my-org/support-chats](https://huggingface.co/datasets/my-org/support-chats) "
            "| customer-support chat | cc-by-4.0 |") in card.text
