"""Human-readable rendering of one row: the decoded sequence with its boundaries marked.

For people checking data, never for the data path: decoding here is display only. Regions are
marked with plain bracket tags (testable, greppable) and optionally coloured for a terminal.
"""

from __future__ import annotations

import json
from typing import Any

from eagle3_synth.contract.boundaries import reasoning_end

from eagle3_synth.view.decode import display_text

COLOURS = {
    "prompt": "\033[2m",
    "reasoning": "\033[36m",
    "think_end": "\033[1;35m",
    "response": "\033[32m",
    "tool_call": "\033[33m",
    "stop": "\033[1;31m",
    "other": "",
}
RESET = "\033[0m"


def output_regions(row: dict[str, Any]) -> list[tuple[str, int, int]]:
    """(label, start, end) spans covering `output_ids`, from the row's boundary columns (a column
    pointing past the output, in a row that breaks the contract, marks only what is there)."""
    n = len(row["output_ids"])
    painted = [("other", 0, n)] if n else []  # later marks paint over earlier ones

    def mark(start: int, stop: int, label: str) -> None:
        nonlocal painted
        start, stop = max(start, 0), max(min(stop, n), 0)
        if stop > start:
            painted = ([(kind, s, min(e, start)) for kind, s, e in painted if s < start] + [(label, start, stop)]
                       + [(kind, max(s, stop), e) for kind, s, e in painted if e > stop])

    reasoning_start, think_end, response_start = row["reasoning_start"], row["think_end"], row["response_start"]
    if reasoning_start >= 0:
        mark(reasoning_start, reasoning_end(think_end, response_start, n), "reasoning")
    if response_start >= 0:
        mark(response_start, n, "response")
    if think_end >= 0:  # the whole close marker: one token, or several (gpt-oss, DSML)
        mark(think_end, max(response_start, think_end + 1), "think_end")
    for number, call in enumerate(row["tool_calls"], start=1):
        mark(call["start"], (call["end"] if call["end"] >= 0 else n - 1) + 1, f"tool_call {number}")
    if row["stop_index"] >= 0:
        mark(row["stop_index"], row["stop_index"] + 1, "stop")
    spans: list[tuple[str, int, int]] = []
    for label, start, end in painted:
        if spans and spans[-1][0] == label:
            spans[-1] = (label, spans[-1][1], end)
        else:
            spans.append((label, start, end))
    return spans


def _decode(tokenizer: Any, ids: list[int], show_ids: bool) -> str:
    return display_text(tokenizer, ids, show_ids=show_ids)  # an id outside the tokenizer shown, never raised on


def header(row: dict[str, Any], *, in_conversation: bool = False) -> str:
    """One line of the row's columns; its place in a conversation when it has one past one turn."""
    calls = len(row["tool_calls"])
    turn = row.get("turn") or 0
    placed = in_conversation or turn or row.get("sample_index") or \
        row.get("conversation_id", row["sample_id"]) != row["sample_id"]
    conversation = (f"conversation {row['conversation_id']} sample {row.get('sample_index') or 0} turn {turn}, "
                    if placed else "")
    kwargs = row.get("template_kwargs")
    return (
        f"sample {row['sample_id']} ({conversation}source id {row['source_id'] or '-'}"
        f"{', template kwargs ' + kwargs if kwargs and kwargs != '{}' else ''}): "
        f"prompt {row['prompt_tokens']} tokens, output {row['completion_tokens']} tokens, "
        f"finish_reason={row['finish_reason']}, reasoning_start={row['reasoning_start']}, "
        f"think_end={row['think_end']}, response_start={row['response_start']}, "
        f"tool_calls={calls}, stop_index={row['stop_index']}"
    )


def _span(start: int, end: int) -> str:
    """Output positions of a region as the boundary columns count them: `11` or `0:11` (end excluded)."""
    return str(start) if end == start + 1 else f"{start}:{end}"


def _message_lines(messages: list[dict[str, Any]], first: int = 0) -> list[str]:
    lines = []
    for message in messages[first:]:
        content = message.get("content") or ""
        extra = f" tool_calls={json.dumps(message['tool_calls'], ensure_ascii=False)}" if message.get("tool_calls") else ""
        lines.append(f"  {message['role']}: {content}{extra}")
    return lines


def render_conversation(rows: list[dict[str, Any]], tokenizer: Any, *, colour: bool = False,
                        show_ids: bool = False) -> str:
    """One rollout turn by turn: the first prompt's messages, then per turn the messages the source
    added after the previous output (tool results, the next user turn) and the output, regions tagged."""
    parts: list[str] = []
    seen = 0
    for row in sorted(rows, key=lambda r: r["sample_id"]):
        messages = json.loads(row["messages"])
        parts.append(header(row, in_conversation=True))
        if not seen and row.get("tools"):
            parts.append(f"  tools: {row['tools']}")
        # From the second turn on, the message after the previous history is that turn's own output.
        parts += _message_lines(messages, seen + 1 if seen else 0)
        parts += ["output:", _sequence(row, tokenizer, colour=colour, show_ids=show_ids, show_prompt=False), ""]
        seen = len(messages)
    return "\n".join(parts).rstrip("\n")


def _tag(label: str, text: str, where: str = "", *, colour: bool = False, positions: bool = True) -> str:
    """`text` as region `label`: `[label WHERE]text[/label]` (an `other` region untagged)."""
    kind = label.split()[0]
    body = f"{COLOURS[kind]}{text}{RESET}" if colour and COLOURS.get(kind) else text
    opening = f"{label} {where}" if positions and where else label
    return body if kind == "other" else f"[{opening}]{body}[/{label}]"


def _sequence(row: dict[str, Any], tokenizer: Any, *, colour: bool, show_ids: bool, positions: bool = True,
              show_prompt: bool = True) -> str:
    """Prompt (unless not `show_prompt`) + output decoded, each output region tagged (see `render_row`)."""
    text = ""
    if show_prompt:
        text = _tag("prompt", _decode(tokenizer, list(row["prompt_ids"]), show_ids), colour=colour)
    output = list(row["output_ids"])
    for label, start, end in output_regions(row):
        text += _tag(label, _decode(tokenizer, output[start:end], show_ids), _span(start, end), colour=colour,
                     positions=positions)
    return text


def render_row(row: dict[str, Any], tokenizer: Any, *, colour: bool = False, show_ids: bool = False,
               show_messages: bool = True, positions: bool = True) -> str:
    """The header, the prompt messages, then prompt + output decoded with regions tagged.

    Each output region is tagged `[label START:END]...[/label]` with its positions in `output_ids`
    (`positions=False` leaves them out), so a tag can be checked against the header's columns.
    """
    parts = [header(row)]
    if show_messages:
        parts.append("messages:")
        parts += _message_lines(json.loads(row["messages"]))
        if row.get("tools"):
            parts.append(f"  tools: {row['tools']}")
    parts += ["sequence:", _sequence(row, tokenizer, colour=colour, show_ids=show_ids, positions=positions)]
    return "\n".join(parts)


# -- previews: a row in a bounded number of characters, for the cells of the Hub's dataset viewer ------------
def _elided(count: int) -> str:
    return f"⟨… {count} token{'' if count == 1 else 's'} …⟩"


def _fitting(tokenizer: Any, ids: list[int], chars: int, *, from_end: bool = False) -> tuple[int, str]:
    """How many tokens from the start (the end) of `ids` decode to at most `chars` characters, and at
    least 90% of them where the tokens allow, leaving no character cut in two at the cut (its lone
    bytes decode to U+FFFD); and their text. Each try guesses from the characters per token the last
    one showed (bisecting when that guess leaves the bracket), so a few decodes of about `chars`
    characters do."""
    texts: dict[int, str] = {}

    def text(count: int) -> str:
        if count not in texts:
            texts[count] = _decode(tokenizer, ids[len(ids) - count:] if from_end else ids[:count], False)
        return texts[count]

    fits, over = 0, len(ids) + 1  # a count known to fit; one known not to (or past the end)
    guess = min(len(ids), max(1, chars // 4))
    while over - fits > 1:
        size = len(text(guess))
        if size <= chars:
            fits = guess
            if size * 10 >= chars * 9:
                break
        else:
            over = guess
        guess = guess * chars // max(size, 1)
        if not fits < guess < over:
            guess = (fits + over) // 2
    for _ in range(3):  # a UTF-8 character spans at most 4 byte tokens
        if not 0 < fits < len(ids) or "\ufffd" not in (text(fits)[:1] if from_end else text(fits)[-1:]):
            break
        fits -= 1
    return fits, text(fits)


def _shortened(tokenizer: Any, ids: list[int], chars: int) -> str:
    """`ids` decoded in about `chars` characters: the first and the last tokens that fit in half each,
    the tokens between counted in their place."""
    head, first = _fitting(tokenizer, ids, chars // 2)
    tail, last = _fitting(tokenizer, ids[head:], chars - chars // 2, from_end=True)
    if head + tail >= len(ids):
        return _decode(tokenizer, ids, False)
    return first + _elided(len(ids) - head - tail) + last


def _previews(tokenizer: Any, parts: list[list[int]], chars: int) -> list[str]:
    """Each of `parts` decoded, all together in at most `chars` characters: the short ones whole, the
    budget left shared evenly by the others, each shortened to its share (`_shortened`), so every
    part shows. Parts are decoded whole from the fewest tokens up while they hold `chars` tokens in
    all (a token rarely decodes to less than a character): the rest count as long undecoded."""
    whole: list[str | None] = [None] * len(parts)
    tokens = 0
    for index in sorted(range(len(parts)), key=lambda i: len(parts[i])):
        tokens += len(parts[index])
        if tokens > chars:
            break
        whole[index] = _decode(tokenizer, parts[index], False)
    left, open_ = chars, len(parts)
    for length in sorted(len(text) for text in whole if text is not None):
        if length * open_ > left:
            break
        left, open_ = left - length, open_ - 1
    share = left // open_ if open_ else left
    return [text if text is not None and len(text) <= share else _shortened(tokenizer, ids, share)
            for text, ids in zip(whole, parts)]


def prompt_preview(tokenizer: Any, ids: list[int], chars: int) -> str:
    """The prompt decoded, special tokens kept, in about `chars` characters: a longer one shows its
    first and last tokens (the system turn's start, the turn the output answers) around
    `⟨… N tokens …⟩`."""
    return _previews(tokenizer, [list(ids)], chars)[0]


def output_preview(row: dict[str, Any], tokenizer: Any, chars: int) -> str:
    """The output decoded with its regions tagged as `render_row` tags them (`[think_end 11]</think>
    [/think_end]`), in about `chars` characters of decoded text besides the tags: every region shows,
    a long one shortened to its share of the budget around `⟨… N tokens …⟩` (see `_previews`)."""
    output = list(row["output_ids"])
    regions = output_regions(row)
    texts = _previews(tokenizer, [output[start:end] for _, start, end in regions], chars)
    return "".join(_tag(label, text, _span(start, end)) for (label, start, end), text in zip(regions, texts))
