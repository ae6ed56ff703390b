"""On-policy conversations in a run: where each rollout stands, and its next turn after a result.

A rollout (a line of prompts.jsonl, `prompts/rollouts.py`) owns sample ids `first .. first+turns-1`,
one per turn it may have; turns are generated in order, so the journal holds turns `0..t` of it.
Its last journaled result says where it stands (`rollout_states`): no result yet (start at turn 0),
a result that `continues` (the next turn's prompt follows from it), a failure (retried with
`--retry-errors`), or its end. Everything about turn t+1 follows from the journal: its prompt is
computed from turn t's prompt and output (`NextTurns`) when the result comes in, journaled with
turn t+1's result, and computed again the same way after a crash -- so a resumed conversation's
rows are the rows of an uninterrupted run.

`TurnFeed` is the request iterator handed to the engine: follow-up turns first (a conversation's
next turn enters the same in-flight window as soon as its previous turn is journaled: no barrier
per turn), then new rollouts; `None` while only results in flight can bring more (`engines/base.py`).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from eagle3_synth.contract.row import find_boundaries, prompt_opens_reasoning, PreparedPrompt, sample_sampling
from eagle3_synth.contract.profiles import MarkerIds, ModelProfile
from eagle3_synth.engines.base import GenerationRequest
from eagle3_synth.errors import EngineError
from eagle3_synth.prompts.conversation import Conversation, count_calls
from eagle3_synth.prompts.history import history_message
from eagle3_synth.prompts.hygiene import Reject
from eagle3_synth.prompts.rollouts import ChatTokenizers, templated
from eagle3_synth.prompts.turns import continuation
from eagle3_synth.run.directory import PromptSlots
from eagle3_synth.run.shards import Shard
from eagle3_synth.run.journal import JournalIndex, TurnPrompt

# Where a rollout stands (`rollout_states`).
FRESH, NEXT, RETRY, DONE, FAILED = range(5)


@dataclass(frozen=True)
class Turn:
    """One generation of a rollout: its turn index and the prompt it is sent with."""

    rollout: PreparedPrompt
    turn: int
    prompt_ids: list[int]
    messages: list[dict[str, Any]]

    @property
    def sample_id(self) -> int:
        return self.rollout.sample_id + self.turn

    def request(self, priority: bool = False) -> GenerationRequest:
        """The engine request; with `priority`, the turns its rollout may still have (this one
        included), so SGLang's priority scheduling runs long conversations' turns first and the
        last conversations do not trail alone at the end."""
        sampling = self.rollout.sampling
        return GenerationRequest(self.sample_id, self.prompt_ids,
                                 self.rollout.turns - self.turn if priority else None,
                                 None if sampling is None else sample_sampling(sampling, self.sample_id))

    def journaled_prompt(self) -> TurnPrompt | None:
        """What the journal keeps of this turn's prompt: nothing for a first turn (prompts.jsonl has it)."""
        return None if self.turn == 0 else TurnPrompt(self.prompt_ids, self.messages)


def first_turn(rollout: PreparedPrompt) -> Turn:
    return Turn(rollout, 0, rollout.prompt_ids, rollout.messages)


class NextTurns:
    """Turn t+1 of a rollout from turn t's result, or why the rollout ends there (`turns.ENDINGS`)."""

    def __init__(self, chats: ChatTokenizers, markers: MarkerIds, profile: ModelProfile,
                 max_prompt_tokens: int | None):
        self.chats = chats
        self.markers = markers
        self.profile = profile
        self.max_prompt_tokens = max_prompt_tokens

    def after(self, turn: Turn, output_ids: list[int], finish_reason: str) -> Turn | str:
        rollout = turn.rollout
        if turn.turn + 1 >= rollout.turns or rollout.script is None:
            return "source_end"
        if finish_reason == "abort":
            return "failed"
        if finish_reason == "length":
            return "cut_off"
        bounds = find_boundaries(output_ids, self.markers, prompt_opens=prompt_opens_reasoning(turn.prompt_ids, self.markers),
                                 finish_reason=finish_reason)
        chat = self.chats.get(rollout.template_kwargs)
        generated = history_message(output_ids, bounds, chat.tokenizer, self.markers, self.profile, tools=rollout.tools,
                                    first_call_index=count_calls(turn.messages))
        messages, ending = continuation(turn.messages, generated, rollout.script, turn.turn)
        if messages is None:
            return ending or "source_end"
        ids = templated(chat, Conversation(messages, rollout.tools), self.max_prompt_tokens)
        if isinstance(ids, Reject):
            return ids.reason  # template_error or too_long: an ending of turns.ENDINGS
        return Turn(rollout, turn.turn + 1, ids, messages)


@dataclass
class RolloutStates:
    """Where each of this shard's rollouts stands: `state` (FRESH...FAILED per rollout), the turn
    it stands at (`turn`: the last journaled one, -1 for FRESH) and that result's index position."""

    rollout: np.ndarray  # index into the PromptSlots
    state: np.ndarray
    turn: np.ndarray
    position: np.ndarray

    def count(self, *states: int) -> int:
        return int(np.isin(self.state, states).sum())

    @property
    def unfinished(self) -> np.ndarray:
        """Per rollout: whether it has a turn to generate (not DONE, not FAILED)."""
        return (self.state != DONE) & (self.state != FAILED)


def rollout_states(slots: PromptSlots, index: JournalIndex, shard: Shard, retry_errors: bool) -> RolloutStates:
    """Vectorised over rollouts: a rollout's journaled turns are the index's ids in its range."""
    owned = np.flatnonzero(shard.owns(slots.conversation))
    if not len(index.sample_ids):  # nothing journaled yet: every rollout starts at turn 0
        none = np.full(len(owned), -1, dtype=np.int64)
        return RolloutStates(owned, np.full(len(owned), FRESH, dtype=np.int8), none, none.copy())
    first, turns = slots.first[owned], slots.turns[owned]
    low = np.searchsorted(index.sample_ids, first)
    high = np.searchsorted(index.sample_ids, first + turns)
    has = high > low
    position = np.where(has, high - 1, -1)
    safe = np.maximum(position, 0)
    ok, continues = index.ok[safe], index.continues[safe]
    state = np.full(len(owned), FRESH, dtype=np.int8)
    state[has & ok & continues] = NEXT
    state[has & ok & ~continues] = DONE
    state[has & ~ok] = RETRY if retry_errors else FAILED
    turn = np.where(has, index.sample_ids[safe] - first, -1)
    return RolloutStates(owned, state, turn, position)


def starting_turns(rollouts: Iterator[PreparedPrompt], states: RolloutStates, read: Callable[[int], dict[str, Any]],
                   next_turns: NextTurns) -> Iterator[Turn]:
    """The turn each unfinished rollout starts from, in rollout order (`rollouts`: prompts.jsonl's
    rollouts with something to do, in order): turn 0, the failed turn again, or the turn after the
    last journaled one (computed from that result, as it was when it came in)."""
    wanted = iter(np.flatnonzero(states.unfinished).tolist())
    for rollout, at in zip(rollouts, wanted):
        state, turn, position = int(states.state[at]), int(states.turn[at]), int(states.position[at])
        if state == FRESH:
            yield first_turn(rollout)
            continue
        result = read(position)
        if turn == 0:
            previous = first_turn(rollout)
        else:
            previous = Turn(rollout, turn, result["prompt_ids"], result["messages"])
        if state == RETRY:
            yield previous
            continue
        following = next_turns.after(previous, result["output_ids"], result["finish_reason"])
        if isinstance(following, Turn):
            yield following


# Turns held back to group them by shared prefix (`grouped_by_prefix`): prompt ids are Python
# ints, ~30 bytes each, so 1,024 prompts of 2,000 ids hold ~60 MB.
GROUP_LOOKAHEAD = 1024


def prefix_key(rollout: PreparedPrompt) -> bytes:
    """What rollouts that share a long prompt prefix share: the system turns before the first user
    turn and the tools (rendered before everything else by chat templates)."""
    head = []
    for message in rollout.messages:
        if message.get("role") != "system":
            break
        head.append(message.get("content"))
    return hashlib.blake2b(json.dumps([head, rollout.tools], sort_keys=True, ensure_ascii=False).encode(),
                           digest_size=8).digest()


def grouped_by_prefix(turns: Iterator[Turn], lookahead: int = GROUP_LOOKAHEAD) -> Iterator[Turn]:
    """The same turns, those sharing a system prompt and tools handed out together, so the engine's
    prefix (radix) cache serves the shared prefix to each in turn instead of evicting it between
    them. At most `lookahead` turns are held; groups leave in the order their first turn came."""
    groups: OrderedDict[bytes, deque[Turn]] = OrderedDict()
    held = 0
    for turn in turns:
        groups.setdefault(prefix_key(turn.rollout), deque()).append(turn)
        held += 1
        if held >= lookahead:
            _, group = groups.popitem(last=False)
            held -= len(group)
            yield from group
    for group in groups.values():
        yield from group


class TurnFeed:
    """The engine's request iterator (module doc); `take` each result's turn back as it comes in,
    `push` its follow-up. Past `deadline` it hands out nothing more, so the engine drains."""

    def __init__(self, starts: Iterator[Turn], deadline: float | None = None,
                 on_deadline: Callable[[], None] | None = None, priority: bool = False):
        self.starts = starts
        self.priority = priority
        self.deadline = deadline
        self.on_deadline = on_deadline
        self.follow: deque[Turn] = deque()
        self.active: dict[int, Turn] = {}
        self.ended = False

    def __iter__(self) -> "TurnFeed":
        return self

    def __next__(self) -> GenerationRequest | None:
        if self.ended:
            raise StopIteration
        if self.deadline is not None and time.monotonic() >= self.deadline:
            self.ended = True
            if self.on_deadline is not None:
                self.on_deadline()
            raise StopIteration
        turn = self.follow.popleft() if self.follow else next(self.starts, None)
        if turn is None:
            if self.active:
                return None
            self.ended = True
            raise StopIteration
        self.active[turn.sample_id] = turn
        return turn.request(self.priority)

    def take(self, sample_id: int, engine: str) -> Turn:
        turn = self.active.pop(sample_id, None)
        if turn is None:
            raise EngineError(f"engine {engine} returned sample_id {sample_id}, which was not asked for "
                              "or was already returned")
        return turn

    def push(self, turn: Turn) -> None:
        if not self.ended:
            self.follow.append(turn)

    @property
    def pending(self) -> int:
        """Turns handed out or queued without a result yet (left for the next run if it stops)."""
        return len(self.active) + len(self.follow)
