"""On-policy conversations through the tiny model: every turn written by the target, on its own history.

Real components throughout: the tiny Kimi-style model generating with transformers, its fixture
tokenizer and chat template, the journal, the builder, Parquet. Greedy decoding, so a second
run (or a resumed one) gives the same ids.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from eagle3_synth.cli import main
from eagle3_synth.contract.profiles import get_profile
from eagle3_synth.contract.row import PreparedPrompt
from eagle3_synth.prompts.conversation import Conversation
from eagle3_synth.prompts.forms import MessageForm
from eagle3_synth.prompts.history import history_message
from eagle3_synth.prompts.templating import ChatTokenizer
from eagle3_synth.run.conversations import Turn, grouped_by_prefix
from eagle3_synth.run.directory import RunDirectory

from ..conftest import TINY_MODEL
from ..support.built_datasets import copy_dataset, rewrite_rows
from ..support.cli_processes import KILLED, config_rows, run_cli_process
from stand_ins.sglang_server import SGLangLoopbackServer, ServerThread, TinyModelBackend

CONFIG = "B2_hermes_fc"
WEATHER = {"type": "function", "function": {
    "name": "get_current_weather", "description": "Get the current weather in a location",
    "parameters": {"type": "object", "properties": {"location": {"type": "string"}, "unit": {"type": "string"}},
                   "required": ["location"]}}}
FORECAST = {"type": "function", "function": {
    "name": "lookup_forecast", "description": "Weather forecast of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
SYSTEM = {"role": "system", "content": "You are a function calling AI model. You may call one or more functions."}
WEATHER_RESULT = '{"temperature": 18, "unit": "celsius", "description": "light rain"}'
# 0: the target calls get_current_weather, as the source did: the source's result is appended and
#    the turn after it is generated, then the next user turn's answer.
LOOP = {"id": "loop", "tools": [WEATHER], "messages": [
    SYSTEM, {"role": "user", "content": "What is the weather like in Paris right now?"},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "functions.get_current_weather:0", "type": "function",
     "function": {"name": "get_current_weather", "arguments": {"location": "Paris"}}}]},
    {"role": "tool", "tool_call_id": "functions.get_current_weather:0", "name": "get_current_weather",
     "content": WEATHER_RESULT},
    {"role": "assistant", "content": "It is 18 C with light rain in Paris."},
    {"role": "user", "content": "Thanks! Should I take an umbrella?"}]}
# 1: the source called a function the target does not call (it calls get_current_weather for
#    weather, the only weather function it was trained on).
OTHER = {"id": "other", "tools": [FORECAST, WEATHER], "messages": [
    SYSTEM, {"role": "user", "content": "I am flying to Tokyo. How warm is it there?"},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "functions.lookup_forecast:0", "type": "function",
     "function": {"name": "lookup_forecast", "arguments": {"city": "Tokyo"}}}]},
    {"role": "tool", "tool_call_id": "functions.lookup_forecast:0", "name": "lookup_forecast",
     "content": '{"high": 24}'},
    {"role": "assistant", "content": "It will be 24 C in Tokyo."}]}
# 2: plain chat, two user turns.
CHAT = {"id": "chat", "messages": [
    {"role": "user", "content": "Write a short story about a lighthouse keeper."},
    {"role": "assistant", "content": "The keeper climbed the stairs every evening..."},
    {"role": "user", "content": "Make the ending happier."}]}


def write(path: Path, *conversations: dict) -> Path:
    path.write_text("".join(json.dumps(c) + "\n" for c in conversations), encoding="utf-8")
    return path


def build(out: Path, prompts: Path, *extra: str, max_new_tokens: int = 128) -> list[dict]:
    assert main(["build", CONFIG, "--model", str(TINY_MODEL), "--prompts", str(prompts), "--turns", "all",
                 "--max-new-tokens", str(max_new_tokens), "--temperature", "0", "--out", str(out), *extra]) == 0
    return sorted(config_rows(out, CONFIG), key=lambda row: row["sample_id"])


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(TINY_MODEL)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, list[dict]]:
    root = tmp_path_factory.mktemp("conversations")
    out = root / "ds"
    return out, build(out, write(root / "prompts.jsonl", LOOP, OTHER, CHAT))


def by_conversation(rows: list[dict]) -> dict[int, list[dict]]:
    grouped: dict[int, list[dict]] = {}
    for row in rows:
        grouped.setdefault(row["conversation_id"], []).append(row)
    return grouped


def chat_of(out: Path, tokenizer, kwargs: dict) -> ChatTokenizer:
    fields = RunDirectory(out / ".runs" / CONFIG).read_run_file()["fields"]
    return ChatTokenizer(tokenizer, kwargs, form=MessageForm.from_json(fields["template"]["message_form"]),
                         template_date=fields["template"]["date"])


def test_every_turn_is_generated_on_the_history_the_target_wrote(built, tokenizer):
    out, rows = built
    conversations = by_conversation(rows)
    assert {c: [r["turn"] for r in turns] for c, turns in conversations.items()} == {0: [0, 1, 2], 1: [0], 2: [0, 1]}
    assert [r["sample_id"] for r in rows] == [0, 1, 2, 3, 5, 6]  # each conversation owns one id per point
    markers = RunDirectory(out / ".runs" / CONFIG).markers()
    profile = get_profile("kimi_k2", tokenizer)
    for turns in conversations.values():
        for previous, row in zip(turns, turns[1:]):
            history = json.loads(previous["messages"])
            messages = json.loads(row["messages"])
            tools = json.loads(row["tools"]) if row["tools"] else None
            # Turn k's history is turn k-1's, then turn k-1's output as the parsers return it.
            assert messages[: len(history)] == history
            assert messages[len(history)] == history_message(previous["output_ids"], previous, tokenizer, markers,
                                                             profile, tools=tools,
                                                             first_call_index=sum(len(m.get("tool_calls") or ())
                                                                                  for m in history))
    for row in rows:  # every prompt is the template over its history, exactly the ids sent
        tools = json.loads(row["tools"]) if row["tools"] else None
        chat = chat_of(out, tokenizer, json.loads(row["template_kwargs"]))
        assert chat.prompt_ids(Conversation(json.loads(row["messages"]), tools)) == row["prompt_ids"]


def test_a_tool_loop_continues_with_the_source_result(built, tokenizer):
    _, rows = built
    first, after_result, answer = by_conversation(rows)[0]
    assert first["tool_calls"] and "get_current_weather" in tokenizer.decode(first["output_ids"])
    messages = json.loads(after_result["messages"])
    generated_call = messages[-2]["tool_calls"][0]
    assert messages[-1] == {"role": "tool", "tool_call_id": generated_call["id"], "name": "get_current_weather",
                            "content": WEATHER_RESULT}
    assert generated_call["id"] == "functions.get_current_weather:0"  # Kimi's own id, as the model wrote it
    # ... and the user turn after the source's answer is answered on the target's answer.
    assert json.loads(answer["messages"])[-1] == LOOP["messages"][-1]
    assert json.loads(answer["messages"])[-2]["content"] != LOOP["messages"][-2]["content"]


def test_a_call_to_another_function_ends_the_conversation(built, tokenizer):
    _, rows = built
    (only,) = by_conversation(rows)[1]
    assert only["turn"] == 0 and only["finish_reason"] == "stop" and only["tool_calls"]
    text = tokenizer.decode(only["output_ids"])
    assert "functions.get_current_weather:0" in text and "lookup_forecast" not in text


def test_a_cut_off_turn_is_kept_and_ends_its_conversation(tmp_path):
    rows = build(tmp_path / "ds", write(tmp_path / "p.jsonl", LOOP), max_new_tokens=8)
    assert [(r["turn"], r["finish_reason"], len(r["output_ids"])) for r in rows] == [(0, "length", 8)]


def test_samples_per_prompt_and_a_kwarg_mix_expand_each_conversation(tmp_path, tokenizer):
    prompts = write(tmp_path / "p.jsonl", CHAT, LOOP)
    mix = ["--samples-per-prompt", "3", "--template-kwarg-mix", "thinking=true:0.5,thinking=false:0.5"]
    rows = build(tmp_path / "a", prompts, *mix, "--selection-seed", "1")
    assert len({r["sample_id"] for r in rows}) == len(rows)
    assert Counter((r["conversation_id"], r["sample_index"]) for r in rows if r["turn"] == 0) == {
        (c, s): 1 for c in (0, 1) for s in range(3)}
    kwargs = {(r["conversation_id"], r["sample_index"]): r["template_kwargs"] for r in rows}
    assert set(kwargs.values()) == {'{"thinking": true}', '{"thinking": false}'}
    for row in rows:  # each rollout's turns share its kwargs, and its prompt was rendered with them
        assert row["template_kwargs"] == kwargs[row["conversation_id"], row["sample_index"]]
        tools = json.loads(row["tools"]) if row["tools"] else None
        chat = chat_of(tmp_path / "a", tokenizer, json.loads(row["template_kwargs"]))
        assert chat.prompt_ids(Conversation(json.loads(row["messages"]), tools)) == row["prompt_ids"]
    # The draw is reproduced from its seed, and moves with it.
    again = build(tmp_path / "b", prompts, *mix, "--selection-seed", "1")
    assert [(r["sample_id"], r["template_kwargs"], r["prompt_ids"]) for r in again] == \
        [(r["sample_id"], r["template_kwargs"], r["prompt_ids"]) for r in rows]
    other = build(tmp_path / "c", prompts, *mix, "--selection-seed", "2")
    assert [r["template_kwargs"] for r in other if r["turn"] == 0] != [r["template_kwargs"] for r in rows
                                                                       if r["turn"] == 0]


def test_shards_split_by_conversation(tmp_path):
    prompts = write(tmp_path / "p.jsonl", LOOP, CHAT, OTHER, CHAT | {"id": "chat-2"})
    run_dir = tmp_path / "run"
    common = [CONFIG, "--model", str(TINY_MODEL), "--prompts", str(prompts), "--turns", "all", "--max-new-tokens",
              "128", "--temperature", "0", "--run-dir", str(run_dir), "--num-shards", "2"]
    for shard in ("0", "1"):
        assert main(["generate", *common, "--shard-index", shard]) == 0
    owners: dict[int, set[int]] = {}
    for path in sorted((run_dir / "journal").glob("*.jsonl")):
        lines = path.read_text(encoding="utf-8").splitlines()
        shard = json.loads(lines[0])["shard_index"]
        for line in lines[1:]:
            owners.setdefault(json.loads(line)["sample_id"], set()).add(shard)
    # Sample ids: conversation 0 owns 0-2, 1 owns 3-4, 2 owns 5, 3 owns 6-7.
    conversation_of = {0: 0, 1: 0, 2: 0, 3: 1, 4: 1, 5: 2, 6: 3, 7: 3}
    assert owners and all(shards == {conversation_of[s] % 2} for s, shards in owners.items())
    assert {0, 1, 2, 3, 4} <= set(owners)  # conversations 0 and 1 ran every turn in their own shard
    # Assembled from the shards' journals: the rows of one unsharded build of the same prompts.
    assert main(["build", CONFIG, "--run-dir", str(run_dir), "--out", str(tmp_path / "ds")]) == 0
    single = build(tmp_path / "single", prompts)
    assert sorted(config_rows(tmp_path / "ds", CONFIG), key=lambda row: row["sample_id"]) == single


@pytest.mark.parametrize("kill_at", ["journal.after_write:1", "journal.mid_write:2", "journal.before_write:3",
                                     "journal.after_write:4"])
def test_killed_mid_conversation_resumes_to_the_same_rows(tmp_path, built, kill_at):
    _, reference = built
    prompts = write(tmp_path / "p.jsonl", LOOP, OTHER, CHAT)
    argv = ["build", CONFIG, "--model", str(TINY_MODEL), "--prompts", str(prompts), "--turns", "all",
            "--max-new-tokens", "128", "--temperature", "0", "--out", str(tmp_path / "ds")]
    assert run_cli_process(argv, kill_at=kill_at) == KILLED
    assert main(argv) == 0
    rows = sorted(config_rows(tmp_path / "ds", CONFIG), key=lambda row: row["sample_id"])
    assert rows == reference


def test_turns_last_generates_the_final_answer_only(tmp_path):
    """`--turns last` keeps one row per conversation, its history the source's own, sample_id == conversation_id."""
    prompts = write(tmp_path / "p.jsonl", LOOP, CHAT)
    assert main(["build", CONFIG, "--model", str(TINY_MODEL), "--prompts", str(prompts), "--turns", "last",
                 "--max-new-tokens", "16", "--temperature", "0", "--out", str(tmp_path / "ds")]) == 0
    rows = sorted(config_rows(tmp_path / "ds", CONFIG), key=lambda row: row["sample_id"])
    assert [(r["sample_id"], r["conversation_id"], r["turn"]) for r in rows] == [(0, 0, 0), (1, 1, 0)]
    assert json.loads(rows[0]["messages"]) == LOOP["messages"]


def test_validate_passes_on_conversations_and_catches_a_history_not_the_targets(built, tmp_path, tokenizer):
    out, rows = built
    report = tmp_path / "report.json"
    assert main(["validate", str(out), CONFIG, "--report", str(report)]) == 0
    clean = json.loads(report.read_text())[0]
    assert clean["ok"] and clean["rows"] == len(rows)

    # Turn 1 of the chat conversation templated on the source's own first answer instead of the
    # target's: its prompt ids are consistent with its messages, only the history is not its own.
    target = next(r for r in rows if r["conversation_id"] == 2 and r["turn"] == 1)
    messages = json.loads(target["messages"])
    messages[1] = {"role": "assistant", "content": CHAT["messages"][1]["content"], "reasoning_content": ""}
    chat = chat_of(out, tokenizer, {})
    prompt_ids = chat.prompt_ids(Conversation(messages))

    def change(row):
        if row["sample_id"] == target["sample_id"]:
            row.update(messages=json.dumps(messages), prompt_ids=prompt_ids, prompt_tokens=len(prompt_ids))

    copy = copy_dataset(out, tmp_path / "corrupt")
    rewrite_rows(copy, CONFIG, change)
    assert main(["validate", str(copy), CONFIG, "--report", str(report), "--overwrite"]) == 1
    found = json.loads(report.read_text())[0]
    assert found["counts"] == {"history_not_own": 1} and found["sample_ids"]["history_not_own"] == [target["sample_id"]]
    assert "messages[1] is not turn 0's output as the parsers return it" in found["details"]["history_not_own"]


def test_inspect_shows_a_conversation_turn_by_turn(built, capsys):
    out, _ = built
    assert main(["inspect", str(out), CONFIG, "--conversation", "0", "--colour", "never"]) == 0
    text = capsys.readouterr().out
    assert "conversations 0, 3 turns" in text
    turns = [line for line in text.splitlines() if line.startswith("sample ")]
    assert [t.split(",")[0] for t in turns] == ["sample 0 (conversation 0 sample 0 turn 0",
                                                "sample 1 (conversation 0 sample 0 turn 1",
                                                "sample 2 (conversation 0 sample 0 turn 2"]
    # Between turns 0 and 1 only the source's tool result is new; before turn 2, the user's question.
    after = text.split(turns[1])[1].splitlines()
    assert after[1] == f"  tool: {WEATHER_RESULT}" and after[2] == "output:"
    assert f"  user: {LOOP['messages'][-1]['content']}" in text.split(turns[2])[1]
    assert "[tool_call 1 " in text.split(turns[1])[0]
    # A conversation the data does not hold is an error naming it, before anything is printed.
    assert main(["inspect", str(out), CONFIG, "--conversation", "9"]) == 2
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", f"eagle3-synth inspect: error: {out} {CONFIG}: no conversation_id 9\n")
    assert main(["inspect", str(out), CONFIG, "--conversation", "0", "--sample-index", "1"]) == 2
    assert capsys.readouterr().err == (f"eagle3-synth inspect: error: {out} {CONFIG}: conversation_id 0 has no "
                                       "sample_index 1 (its rollouts: 0)\n")


def export(out: Path, tmp_path: Path, fmt: str, *extra: str) -> list[dict]:
    path = tmp_path / f"{fmt}.jsonl"
    assert main(["export", str(out), CONFIG, "--format", fmt, "--out", str(path), "--overwrite", *extra]) == 0
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_conversation_exports_write_each_rollout_once_with_every_turn_the_targets(built, tmp_path):
    out, rows = built
    records = export(out, tmp_path, "specforge")
    last = {c: turns[-1] for c, turns in by_conversation(rows).items()}
    assert [r["id"] for r in records] == [f"{CONFIG}-{last[c]['sample_id']}" for c in sorted(last)]
    loop = records[0]["conversations"]
    # The tool loop's last row: the target's call, the source's result, the target's answer, the user, the answer.
    assert [m["role"] for m in loop] == ["system", "user", "assistant", "tool", "assistant", "user", "assistant"]
    assert loop[2]["tool_calls"][0]["function"]["name"] == "get_current_weather"
    assert isinstance(loop[2]["tool_calls"][0]["function"]["arguments"], str)
    assert len(export(out, tmp_path, "specforge", "--every-turn")) == len(rows)
    exact = export(out, tmp_path, "ids", "--no-text")  # token-exact rows: every turn is its own example
    assert [r["input_ids"] for r in exact] == [r["prompt_ids"] + r["output_ids"] for r in rows]
    assert [(r["metadata"]["conversation_id"], r["metadata"]["turn"]) for r in exact] == \
        [(r["conversation_id"], r["turn"]) for r in rows]


def test_specforge_carries_each_rows_template_kwargs_as_columns(tmp_path):
    rows = build(tmp_path / "ds", write(tmp_path / "p.jsonl", CHAT, LOOP), "--template-kwarg-mix",
                 "thinking=true:0.5,thinking=false:0.5", "--samples-per-prompt", "2", "--selection-seed", "1")
    records = export(tmp_path / "ds", tmp_path, "specforge", "--every-turn")
    by_id = {f"{CONFIG}-{r['sample_id']}": r for r in rows}
    assert {r["thinking"] for r in records} == {True, False}
    for record in records:
        assert {"thinking": record["thinking"]} == json.loads(by_id[record["id"]]["template_kwargs"])


def test_turns_sharing_a_system_prompt_and_tools_are_handed_out_together():
    def turn(sample_id, system, tools):
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": "q"}]
        rollout = PreparedPrompt(sample_id, "", [sample_id], messages, tools)
        return Turn(rollout, 0, [sample_id], messages)

    weather, news = [WEATHER], [FORECAST]
    turns = [turn(0, "a", weather), turn(1, "b", news), turn(2, "a", weather), turn(3, None, None),
             turn(4, "b", news), turn(5, "a", news), turn(6, "a", weather)]
    assert [t.sample_id for t in grouped_by_prefix(iter(turns))] == [0, 2, 6, 1, 4, 3, 5]
    # Never more than `lookahead` held: the oldest group leaves when it is full.
    assert [t.sample_id for t in grouped_by_prefix(iter(turns), lookahead=3)] == [0, 2, 1, 4, 3, 5, 6]


def test_stats_adds_a_row_per_turn(built, capsys):
    out, rows = built
    assert main(["stats", str(out), CONFIG]) == 0
    lines = capsys.readouterr().out.splitlines()
    counts = Counter(r["turn"] for r in rows)
    assert [line.split()[:4] for line in lines[1:]] == [
        [CONFIG, str(len(rows)), *lines[1].split()[2:4]],
        *([CONFIG, "turn", str(t), str(counts[t])] for t in sorted(counts))]


def test_conversations_through_sglang_http_give_the_transformers_rows(built, tmp_path):
    """The in-flight window (dependent turns enter it as results come back) against a loopback
    server generating with the same tiny model: the same rows as the transformers engine's."""
    _, reference = built
    server = SGLangLoopbackServer(TinyModelBackend(str(TINY_MODEL)), server_args={"enable_priority_scheduling": True})
    with ServerThread(server) as thread:
        prompts = write(tmp_path / "p.jsonl", LOOP, OTHER, CHAT)
        rows = build(tmp_path / "ds", prompts, "--engine", "sglang-http", "--url", thread.url, "--priority", "turns-left")
    assert [(r["sample_id"], r["turn"], r["prompt_ids"], r["output_ids"]) for r in rows] == \
        [(r["sample_id"], r["turn"], r["prompt_ids"], r["output_ids"]) for r in reference]
    # --priority turns-left: the loop conversation's first turn went with 3 (it may have three turns).
    assert max(p for p in server.priorities if p is not None) == 3
