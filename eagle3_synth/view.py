"""Looking at rows, for people: a row rendered with its boundaries marked (the decoded sequence), a
row's output decoded as an assistant message (`assistant_message`), and which samples to show (`--where`,
`--random/--shortest/--longest`).

For people checking data, never for the data path: decoding here is display only. Regions are
marked with plain bracket tags (testable, greppable) and optionally coloured for a terminal.
"""

from __future__ import annotations

import ast
import json
import operator
from collections.abc import Sequence, Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from eagle3_synth.contract.row import reasoning_end, COLUMNS, FEATURES
from eagle3_synth.contract.profiles import PROFILES, MarkerIds, ModelProfile, resolve_markers
from eagle3_synth.prompts.history import decode_text, history_message
from eagle3_synth.errors import ConfigError

# A row's output as an OpenAI-style assistant message: reasoning, content and tool calls as text.
#
# For exports to frameworks that take text (SpecForge) and for people; never for the data path.
# A thin wrapper over `prompts.history.history_message`, so each family has one parser: the split
# comes from the boundary columns (token positions), and only the inside of one tool call is parsed
# as text, in the family's own layout.


def decode_ids(tokenizer: Any, ids: Sequence[int], *, skip_special_tokens: bool = False) -> str:
    """`tokenizer.decode(ids)` for display (fast tokenizers are handed a numpy array)."""
    return decode_text(tokenizer, ids, skip_special_tokens=skip_special_tokens)


def display_text(tokenizer: Any, ids: Sequence[int], *, show_ids: bool = False) -> str:
    """`ids` decoded for people: an id that is not a token of the tokenizer (outside
    `0 <= id < len(tokenizer)`: a row that breaks the contract, or an id of the model's embedding
    padding) is shown as `⟨ID: not in the tokenizer⟩` in its place, never decoded (a negative id
    or one past 64 bits makes `decode` raise) and never dropped. `show_ids`: each token's id after it."""
    size = len(tokenizer)
    if not show_ids and (len(ids) == 0 or (min(ids) >= 0 and max(ids) < size)):
        return decode_ids(tokenizer, ids)  # every id a token: one decode, no loop over the ids here
    parts: list[str] = []
    run: list[int] = []
    for token in ids:
        if 0 <= token < size:
            if show_ids:
                parts.append(f"{decode_ids(tokenizer, [token])}⟨{token}⟩")
            else:
                run.append(token)
            continue
        if run:
            parts.append(decode_ids(tokenizer, run))
            run = []
        parts.append(f"⟨{token}: not in the tokenizer⟩")
    if run:
        parts.append(decode_ids(tokenizer, run))
    return "".join(parts)


# Markers resolved once per (tokenizer, profile): resolving reads the whole vocabulary.
_RESOLVED: dict[tuple[int, str], tuple[Any, MarkerIds]] = {}


def _markers(tokenizer: Any, profile: ModelProfile) -> MarkerIds:
    key = (id(tokenizer), profile.name)
    held = _RESOLVED.get(key)
    if held is None or held[0] is not tokenizer:
        if len(_RESOLVED) >= 8:
            _RESOLVED.clear()
        held = _RESOLVED[key] = (tokenizer, resolve_markers(profile, tokenizer))
    return held[1]


def assistant_message(row: dict[str, Any], tokenizer: Any, profile: str | ModelProfile,
                      markers: MarkerIds | None = None) -> dict[str, Any]:
    """`{"role": "assistant", "content", <reasoning field>, "tool_calls"?}` decoded from a row.

    `profile`: a built-in profile's name, or a ModelProfile (a --profile-file one, with its
    `markers`). The message is `history_message`'s: reasoning and content stripped, special
    tokens (section markers, the stop token) in no text, a call cut off left out, `tool_calls` only
    when there are calls; the row's `tools` type the parameters of XML-style calls.
    """
    if not isinstance(profile, ModelProfile):
        if profile not in PROFILES:
            raise ValueError(f"profile {profile!r} is not built in (known: {sorted(PROFILES)}); "
                             "pass its ModelProfile and markers")
        profile = PROFILES[profile]
    tools = json.loads(row["tools"]) if row.get("tools") else None
    return history_message(row["output_ids"], row, tokenizer, markers or _markers(tokenizer, profile), profile,
                           tools=tools)


# Which samples to look at: `--where` expressions and `--random/--shortest/--longest K` picks.
#
# `--where 'think_end == -1 and finish_reason == "stop"'` is parsed with Python's `ast` into a
# pyarrow compute expression over the contract's columns (never `eval`ed), so filtering a large
# config is one vectorised pass over a few scalar columns. Allowed: column names, numbers and
# strings, `== != < <= > >=`, `in [...]`, `and or not`, `+ - *`, and `len(list_column)`.

LIST_COLUMNS = tuple(name for name in COLUMNS if FEATURES.arrow_schema.field(name).type.num_fields)

_COMPARE: dict[type, Callable[[object, object], object]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt,
    ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
}
_ARITHMETIC: dict[type, Callable[[object, object], object]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
}


@dataclass(frozen=True)
class WhereClause:
    text: str
    expression: pc.Expression
    columns: frozenset[str]  # the columns it reads


def parse_where(text: str) -> WhereClause:
    """Turn a `--where` string into a pyarrow expression; errors name the offending part."""
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise ConfigError(f"--where {text!r}: not a valid expression ({exc.msg})") from None
    columns: set[str] = set()

    def fail(node: ast.AST, why: str) -> ConfigError:
        return ConfigError(f"--where {text!r}: at {ast.unparse(node)!r}: {why}")

    def column(node: ast.AST) -> str:
        if not isinstance(node, ast.Name):
            raise fail(node, "expected a column name")
        if node.id not in COLUMNS:
            raise fail(node, f"unknown column; columns are {', '.join(COLUMNS)}")
        columns.add(node.id)
        return node.id

    def value(node: ast.AST):
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bool)):
            return pc.scalar(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
            return pc.scalar(-node.operand.value)
        if isinstance(node, ast.Name):
            name = column(node)
            if name in LIST_COLUMNS:
                raise fail(node, f"{name} is a list; compare len({name})")
            return pc.field(name)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len":
            if len(node.args) != 1 or node.keywords:
                raise fail(node, "len() takes one column")
            name = column(node.args[0])
            if name not in LIST_COLUMNS:
                raise fail(node, f"len() needs a list column ({', '.join(LIST_COLUMNS)})")
            return pc.list_value_length(pc.field(name))
        if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
            return _ARITHMETIC[type(node.op)](value(node.left), value(node.right))
        return boolean(node)

    def boolean(node: ast.AST) -> pc.Expression:
        if isinstance(node, ast.BoolOp):
            parts = [boolean(v) for v in node.values]
            combine = operator.and_ if isinstance(node.op, ast.And) else operator.or_
            result = parts[0]
            for part in parts[1:]:
                result = combine(result, part)
            return result
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return ~boolean(node.operand)
        if isinstance(node, ast.Compare):
            result = None
            left = node.left
            for op, right in zip(node.ops, node.comparators):  # a < b < c means a < b and b < c
                if isinstance(op, (ast.In, ast.NotIn)):
                    if not isinstance(right, (ast.List, ast.Tuple)) or not all(isinstance(e, ast.Constant) for e in right.elts):
                        raise fail(right, "`in` needs a list of constants")
                    part = value(left).isin([e.value for e in right.elts])
                    part = ~part if isinstance(op, ast.NotIn) else part
                elif type(op) in _COMPARE:
                    part = _COMPARE[type(op)](value(left), value(right))
                else:
                    raise fail(node, "unsupported comparison")
                result = part if result is None else result & part
                left = right
            return result
        raise fail(node, "expected a comparison (e.g. think_end == -1)")

    return WhereClause(text=text, expression=boolean(tree.body), columns=frozenset(columns))


@dataclass(frozen=True)
class Selection:
    sample_ids: list[int]
    matched: int  # rows passing --where (all rows without it)
    total: int


def select_samples(
    table: pa.Table,
    *,
    where: WhereClause | None = None,
    random: int | None = None,
    shortest: int | None = None,
    longest: int | None = None,
    first: int | None = None,
    seed: int = 0,
) -> Selection:
    """Pick sample ids from `table` (needs sample_id, completion_tokens and the where columns).

    Picks are unioned in the order random, shortest, longest, first; each id appears once.
    Shortest/longest break ties by sample_id so the choice is reproducible.
    """
    for name, k in (("--random", random), ("--shortest", shortest), ("--longest", longest)):
        if k is not None and k < 1:
            raise ConfigError(f"{name} must be >= 1, got {k}")
    total = table.num_rows
    if where is not None:
        try:
            table = table.filter(where.expression)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise ConfigError(f"--where {where.text!r}: {exc}") from None
    ids = table.column("sample_id").to_numpy()
    lengths = table.column("completion_tokens").to_numpy()
    # lexsort's last key is the primary one; ties go to the lower sample_id either way.
    shortest_first, longest_first = np.lexsort((ids, lengths)), np.lexsort((ids, -lengths.astype(np.int64)))
    picked: list[int] = []
    if random:
        rng = np.random.default_rng(seed)
        picked += ids[np.sort(rng.choice(len(ids), size=min(random, len(ids)), replace=False))].tolist()
    if shortest:
        picked += ids[shortest_first[:shortest]].tolist()
    if longest:
        picked += ids[longest_first[:longest]].tolist()
    if first:
        picked += np.sort(ids)[:first].tolist()
    return Selection(sample_ids=list(dict.fromkeys(int(i) for i in picked)), matched=len(ids), total=total)


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
