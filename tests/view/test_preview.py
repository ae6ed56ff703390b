"""The previews `publish` puts beside the ids: each row decoded, its regions tagged as `inspect`
tags them, in a bounded number of characters, every region shown and every token accounted for."""

from __future__ import annotations

import re

import pytest
from datasets import load_dataset

from eagle3_synth.view import output_preview, output_regions, prompt_preview, render_row

from ..support.built_datasets import KIMI_CONFIG, QWEN_CONFIG, checks_dataset

TAG = re.compile(r"\[((?:reasoning|think_end|response|tool_call \d+|stop)) (\d+)(?::(\d+))?\](.*?)\[/\1\]", re.DOTALL)
ELIDED = re.compile(r"⟨… (\d+) tokens? …⟩")


@pytest.fixture(scope="module")
def folder(tmp_path_factory, kimi_tokenizer, qwen_tokenizer):
    return checks_dataset(tmp_path_factory, kimi_tokenizer, qwen_tokenizer)


@pytest.fixture(scope="module")
def rows(folder, kimi_tokenizer, qwen_tokenizer):
    """(row, tokenizer) for every row of both configs."""
    return [(row, tokenizer) for config, tokenizer in ((KIMI_CONFIG, kimi_tokenizer), (QWEN_CONFIG, qwen_tokenizer))
            for row in load_dataset(str(folder), config, split="train")]


def shown(body: str, ids: list[int], tokenizer) -> int:
    """Check that `body` is `ids` decoded whole, or its first tokens decoded, `⟨… K tokens …⟩` and its
    last tokens decoded, with K the tokens between; the characters of decoded text it shows."""

    def decode(part: list[int]) -> str:
        return tokenizer.decode(part, skip_special_tokens=False)

    elided = ELIDED.search(body)
    if elided is None:
        assert body == decode(ids)
        return len(body)
    head, tail, count = body[:elided.start()], body[elided.end():], int(elided[1])
    splits = [h for h in range(len(ids) - count + 1)
              if decode(ids[:h]) == head and decode(ids[h + count:]) == tail]
    assert splits, (body, ids)
    return len(head) + len(tail)


def test_a_short_row_reads_as_inspect_shows_it(rows):
    """Under the cap, the output preview is exactly the output `inspect` prints (same tags, same
    positions), and the prompt preview is the whole prompt, special tokens kept."""
    for row, tokenizer in rows:
        sequence = render_row(row, tokenizer, show_messages=False).split("sequence:\n", 1)[1]
        prompt, output = sequence.split("[/prompt]", 1)
        assert output_preview(row, tokenizer, 10**6) == output
        assert prompt_preview(tokenizer, row["prompt_ids"], 10**6) == prompt.removeprefix("[prompt]")
        if row["think_end"] >= 0:
            assert f"[think_end {row['think_end']}]" in output


@pytest.mark.parametrize("chars", [1, 30, 80])
def test_a_capped_preview_shows_every_region_and_counts_what_it_leaves_out(rows, chars):
    elided = 0
    for row, tokenizer in rows:
        preview = output_preview(row, tokenizer, chars)
        tagged = [(m[1], int(m[2]), int(m[3]) if m[3] else int(m[2]) + 1) for m in TAG.finditer(preview)]
        regions = output_regions(row)
        assert tagged == [region for region in regions if region[0] != "other"]
        # Split at the tags: the text before each tag (an untagged region's, else empty), each tag's body.
        parts = TAG.split(preview)
        before, bodies = parts[::5], parts[4::5]
        total, index, untagged = 0, 0, []
        for label, start, end in regions:
            ids = row["output_ids"][start:end]
            if label == "other":
                untagged = ids
                continue
            total += shown(before[index], untagged, tokenizer) + shown(bodies[index], ids, tokenizer)
            index, untagged = index + 1, []
        total += shown(before[index], untagged, tokenizer)
        assert total <= chars
        elided += len(ELIDED.findall(preview))
        prompt = prompt_preview(tokenizer, row["prompt_ids"], chars)
        assert shown(prompt, row["prompt_ids"], tokenizer) <= chars
        assert ELIDED.search(prompt)  # every fixture prompt is longer than 80 characters
    assert elided


def test_a_cut_never_splits_a_character(kimi_tokenizer):
    """Each emoji is four byte tokens here: a cut inside one would show U+FFFD."""
    ids = kimi_tokenizer.encode("😀" * 40, add_special_tokens=False)
    assert len(ids) == 160
    for chars in range(2, 30):
        preview = prompt_preview(kimi_tokenizer, ids, chars)
        assert "\ufffd" not in preview and shown(preview, ids, kimi_tokenizer) <= chars
    assert prompt_preview(kimi_tokenizer, ids, 10) == "😀" * 5 + "⟨… 120 tokens …⟩" + "😀" * 5


def test_a_long_output_is_cheap_to_preview(kimi_tokenizer):
    """A 10,000-token reasoning region is shortened from both ends without decoding it whole: the
    tokens decoded stay a small multiple of the cap."""
    end, stop = kimi_tokenizer.convert_tokens_to_ids(["</think>", "<|im_end|>"])
    reasoning = kimi_tokenizer.encode("Let me think about this carefully. " * 1500, add_special_tokens=False)[:10_000]
    answer = kimi_tokenizer.encode("The answer is 42.", add_special_tokens=False)
    output = [*reasoning, end, *answer, stop]
    row = {"output_ids": output, "reasoning_start": 0, "think_end": 10_000, "response_start": 10_001,
           "tool_calls": [], "stop_index": len(output) - 1}
    decoded: list[int] = []
    original = type(kimi_tokenizer).decode

    def counting(self, ids, *args, **kwargs):
        decoded.append(len(ids))
        return original(self, ids, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(type(kimi_tokenizer), "decode", counting)
        preview = output_preview(row, kimi_tokenizer, 200)
    assert sum(decoded) < 10 * 200, decoded
    assert preview.startswith("[reasoning 0:10000]Let me think")
    last = len(output) - 1
    assert preview.endswith(f"[think_end 10000]</think>[/think_end][response 10001:{last}]The answer is 42."
                            f"[/response][stop {last}]<|im_end|>[/stop]")
    [body] = [m[4] for m in TAG.finditer(preview) if m[1] == "reasoning"]
    assert shown(body, reasoning, kimi_tokenizer) <= 200 - len("</think>The answer is 42.<|im_end|>")
