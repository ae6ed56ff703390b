#!/usr/bin/env python
"""Does the in-flight window keep a continuous-batching engine busy? Idle fraction by strategy.

This runs against a MODEL of an engine, not SGLang: a local /generate server
(stand_ins/sglang_server.py, `--backend batching`) with N slots, where each request holds a
slot for (its output tokens x a constant per-token time) and the rest wait in FIFO order. Output
lengths are long-tailed and fixed per prompt: log-normal, median ~500 tokens, capped at 10,240
(a few percent sit at the cap). The model ignores prefill, batch-size-dependent step time and
KV-cache limits; what it does show is how each client strategy leaves slots empty.

Strategies, each against a fresh server:
- one batch call: every prompt in one /generate request (returns when the last one ends);
- chunked batch calls: /generate with 2,048 prompts at a time, the next chunk after the last one;
- window: the sglang-http engine, one prompt per request, --max-in-flight at once (default 2 x slots).

Reported: wall time, idle fraction of the slots over the whole run, and before the drain (up to
the last admission -- after that every strategy can only empty out). Floor for the window: idle
before drain < 2%.

    python -m benchmarks.bench_scheduling                 # 8,192 prompts, 256 slots, 1 ms/token
    python -m benchmarks.bench_scheduling --prompts 2048 --chunk 512   # quicker

Dependent turns, `--conversations N`: instead of the table above, N conversations of
1-6 turns (`--turns uniform`: each count equally likely, mean 3.5 -- the default, the harder case;
`--turns skewed`: P(t) proportional to 0.6^(t-1), mean 2.2, more one- and two-turn conversations
as in chat sources -- an assumption, not measured on one). Turn t+1's prompt is turn t's prompt +
its output ids + 5-40 new "user" ids (seeded per conversation and turn), so every turn has its own
length from the same long-tailed model. As `NextTurns` does, a turn cut off at max_new_tokens
ends its conversation ("cut_off"). Two strategies, each against a fresh server:
- turn feed: the sglang-http engine fed by `eagle3_synth.run.conversations.TurnFeed` and driven as
  `run/generate.py` drives it (take each result's turn, push its follow-up): a conversation's next
  turn enters the window as soon as its previous turn is back;
- barrier per turn: every conversation's turn k through the same engine and window only after
  all turns k-1 finished.
`--longest-first` adds the turn feed with new rollouts ordered by their number of turns, most
first. Floor (the issue's): the turn feed's idle before drain < 2% (exit status 1 otherwise). With
dependent turns the last admission is a late turn of some conversation, so "before drain" takes
in the tail in which only follow-ups of conversations in flight are left; the last column, idle
while new rollouts remain, is the server's /stats taken when the feed first runs out of new
rollouts. On a 2-core VM the defaults below (2,048 conversations, 256 slots, 1 ms/token, uniform
turns) take about two minutes for both strategies (--longest-first: under three):

    python -m benchmarks.bench_scheduling --conversations 2048
    python -m benchmarks.bench_scheduling --conversations 2048 --turns skewed
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from eagle3_synth.engines import GenerationRequest, SamplingParams  # noqa: E402
from eagle3_synth.engines.sglang.http import SGLangHTTPEngine  # noqa: E402
from stand_ins.sglang_server import ContinuousBatchingModel, server_process  # noqa: E402

CAP = 10_240
STOP = 2
FLOOR = 0.02


def post(url: str, payload: dict) -> object:
    request = urllib.request.Request(url + "/generate", data=json.dumps(payload).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=3600) as response:
        return json.loads(response.read())


def batch_calls(url: str, prompts: list[list[int]], chunk: int) -> int:
    """Sequential batch /generate calls of `chunk` prompts; returns the number of results."""
    sampling = {"max_new_tokens": CAP, "temperature": 0.6, "stop_token_ids": [STOP]}
    count = 0
    for start in range(0, len(prompts), chunk):
        count += len(post(url, {"input_ids": prompts[start:start + chunk], "sampling_params": sampling}))
    return count


def window(url: str, prompts: list[list[int]], size: int) -> int:
    engine = SGLangHTTPEngine((url,), max_in_flight=size)
    params = SamplingParams(max_new_tokens=CAP, temperature=0.6, stop_token_ids=(STOP,))
    try:
        return sum(1 for r in engine.generate((GenerationRequest(i, p) for i, p in enumerate(prompts)), params)
                   if r.error is None)
    finally:
        engine.close()


def stats(url: str) -> dict:
    with urllib.request.urlopen(url + "/stats") as response:
        return json.loads(response.read())


# -- dependent turns ------------------------------------------------------------------------------
MAX_TURNS = 6
TURN_WEIGHTS = {"uniform": [1.0] * MAX_TURNS, "skewed": [0.6 ** t for t in range(MAX_TURNS)]}


@dataclass(frozen=True)
class Conversations:
    """The seeded workload: first prompts, turns per conversation, and the new "user" ids of each
    later turn. Everything else (output ids, later prompts) follows from the model engine."""

    first_prompts: list[list[int]]
    turns: list[int]
    user_ids: list[list[list[int]]]  # [conversation][turn - 1]: ids appended before turn `turn`

    @classmethod
    def make(cls, count: int, distribution: str, seed: int = 0) -> "Conversations":
        rng = random.Random(seed)
        turns = rng.choices(range(1, MAX_TURNS + 1), weights=TURN_WEIGHTS[distribution], k=count)
        first = [[rng.randrange(3, 900) for _ in range(rng.randrange(50, 400))] for _ in range(count)]
        user = [[[rng.randrange(3, 900) for _ in range(rng.randrange(5, 41))] for _ in range(t - 1)] for t in turns]
        return cls(first, turns, user)

    @property
    def firsts(self) -> list[int]:
        """Each conversation's first sample id: conversation c owns firsts[c] .. firsts[c] + turns[c] - 1."""
        out, at = [], 0
        for t in self.turns:
            out.append(at)
            at += t
        return out

    def next_prompt(self, conversation: int, turn: int, prompt_ids: list[int], output_ids: list[int],
                    finish_reason: str) -> list[int] | None:
        """Turn `turn + 1`'s prompt, or None where the conversation ends (its last turn, or cut off)."""
        if turn + 1 >= self.turns[conversation] or finish_reason != "stop":
            return None
        return prompt_ids + output_ids + self.user_ids[conversation][turn]

    def expected(self, model: ContinuousBatchingModel) -> list[list[int]]:
        """Every conversation's output lengths per turn, as the model engine will produce them."""
        out = []
        for c, prompt in enumerate(self.first_prompts):
            lengths: list[int] = []
            turn: int | None = 0
            while turn is not None:
                n = model.length_of(prompt, CAP)
                lengths.append(n)
                ids = [1000 + (i % 1000) for i in range(n)]
                if n < CAP:
                    ids[-1] = STOP
                following = self.next_prompt(c, turn, prompt, ids, "stop" if n < CAP else "length")
                prompt, turn = (following, turn + 1) if following is not None else (prompt, None)
            out.append(lengths)
        return out


def _params() -> SamplingParams:
    return SamplingParams(max_new_tokens=CAP, temperature=0.6, stop_token_ids=(STOP,))


def turn_feed(url: str, work: Conversations, size: int, longest_first: bool = False,
              marks: dict | None = None) -> int:
    """Our scheduler: TurnFeed as the engine's request iterator, driven as run/generate.py drives it.
    `longest_first`: new rollouts by their number of turns, most first (known before generating);
    `marks` gets the server's /stats at the moment the feed first finds no new rollout left."""
    from eagle3_synth.contract.row import PreparedPrompt
    from eagle3_synth.run.conversations import Turn, TurnFeed, first_turn

    rollouts = [PreparedPrompt(sample_id=first, source_id="", prompt_ids=prompt, messages=[], tools=None, turns=turns)
                for first, prompt, turns in zip(work.firsts, work.first_prompts, work.turns)]
    conversation_of = {rollout.sample_id: c for c, rollout in enumerate(rollouts)}
    if longest_first:
        rollouts.sort(key=lambda rollout: -rollout.turns)
    snapshot: list[threading.Thread] = []

    def starts() -> Iterator:
        yield from (first_turn(rollout) for rollout in rollouts)
        if marks is not None:  # in a thread, so the window is not held up by the request
            snapshot.append(threading.Thread(target=lambda: marks.update(stats(url))))
            snapshot[0].start()

    engine = SGLangHTTPEngine((url,), max_in_flight=size)
    done = 0
    try:
        feed = TurnFeed(starts())
        for result in engine.generate(feed, _params()):
            turn = feed.take(result.sample_id, "sglang-http")
            if result.error is not None:
                raise SystemExit(f"turn feed: sample {result.sample_id}: {result.error}")
            done += 1
            following = work.next_prompt(conversation_of[turn.rollout.sample_id], turn.turn, turn.prompt_ids,
                                         result.output_ids, result.finish_reason)
            if following is not None:
                feed.push(Turn(turn.rollout, turn.turn + 1, following, messages=[]))
    finally:
        engine.close()
        for thread in snapshot:
            thread.join()
    return done


def barrier_per_turn(url: str, work: Conversations, size: int) -> int:
    """Turn k of every conversation, through the same engine and window, after all of turn k-1."""
    firsts = work.firsts
    engine = SGLangHTTPEngine((url,), max_in_flight=size)
    level = [(c, prompt) for c, prompt in enumerate(work.first_prompts)]
    turn = done = 0
    try:
        while level:
            prompts = {firsts[c] + turn: (c, prompt) for c, prompt in level}
            following = []
            for result in engine.generate([GenerationRequest(i, p) for i, (_, p) in prompts.items()], _params()):
                if result.error is not None:
                    raise SystemExit(f"barrier: sample {result.sample_id}: {result.error}")
                done += 1
                c, prompt = prompts[result.sample_id]
                ids = work.next_prompt(c, turn, prompt, result.output_ids, result.finish_reason)
                if ids is not None:
                    following.append((c, ids))
            level = sorted(following, key=lambda item: item[0])
            turn += 1
    finally:
        engine.close()
    return done


def percentile(values: list[int], q: float) -> int:
    return sorted(values)[min(len(values) - 1, int(len(values) * q))]


def conversations_main(args: argparse.Namespace, size: int, server_args: tuple[str, ...]) -> int:
    work = Conversations.make(args.conversations, args.turns)
    model = ContinuousBatchingModel(slots=args.slots, per_token_s=args.per_token_ms / 1000)
    lengths = work.expected(model)
    flat = [n for per in lengths for n in per]
    total = len(flat)
    generated = [len(per) for per in lengths]
    cut = sum(1 for per, t in zip(lengths, work.turns) if len(per) < t)
    work_s = sum(flat) * model.per_token_s / args.slots
    chain_s = max(sum(per) for per in lengths) * model.per_token_s
    print(f"# {time.strftime('%Y-%m-%d')} | {platform.machine()}, {os.cpu_count()} cores | load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} | model engine: {args.slots} slots, {args.per_token_ms} "
          f"ms/token | {args.conversations} conversations ({args.turns} 1-{MAX_TURNS} turns), window {size}")
    print(f"# turns: {total} generated (mean {total / len(lengths):.2f} a conversation; {cut} conversations "
          f"cut off at the cap before their last turn); per conversation "
          + ", ".join(f"{t}: {generated.count(t)}" for t in range(1, MAX_TURNS + 1)))
    print(f"# output tokens per turn: median {percentile(flat, 0.5)}, mean {sum(flat) / total:.0f}, "
          f"p99 {percentile(flat, 0.99)}, at the {CAP} cap {sum(n == CAP for n in flat) / total:.1%}")
    print(f"# bounds: all work / slots {work_s:.1f} s; longest conversation (its turns back to back) {chain_s:.1f} s")
    print("| strategy | wall s | idle (whole run) | idle before drain | drain s | idle while new rollouts remain (up to s) |")
    print("|---|---|---|---|---|---|")
    strategies = [
        (f"turn feed, window of {size} (sglang-http + TurnFeed)", lambda url, marks: turn_feed(url, work, size, marks=marks)),
        (f"barrier per turn, window of {size} (sglang-http)", lambda url, marks: barrier_per_turn(url, work, size)),
    ]
    if args.longest_first:
        strategies.append((f"turn feed, rollouts with most turns first, window of {size}",
                           lambda url, marks: turn_feed(url, work, size, longest_first=True, marks=marks)))
    result = {}
    for name, run in strategies:
        marks: dict = {}
        with server_process(*server_args) as url:
            done = run(url, marks)
            s = stats(url)
        if done != total or s.get("requests") != total:
            raise SystemExit(f"{name}: {done} results, {s.get('requests')} admitted, of {total} turns")
        result[name] = s
        remain = f"{marks['idle_before_drain']:.1%} (0-{marks['wall_s']:.1f})" if marks else "-"
        print(f"| {name} | {s['wall_s']:.1f} | {s['idle_fraction']:.1%} | {s['idle_before_drain']:.1%} "
              f"| {s['drain_s']:.1f} | {remain} |", flush=True)
    feed_s, barrier_s = result[strategies[0][0]], result[strategies[1][0]]
    print(f"# barrier / turn feed wall time: {barrier_s['wall_s'] / feed_s['wall_s']:.2f}x", flush=True)
    if feed_s["idle_before_drain"] >= FLOOR:
        print(f"turn feed idle before drain {feed_s['idle_before_drain']:.1%} is not below {FLOOR:.0%}", file=sys.stderr)
        return 1
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=8192)
    parser.add_argument("--slots", type=int, default=256)
    parser.add_argument("--per-token-ms", type=float, default=1.0)
    parser.add_argument("--chunk", type=int, default=2048)
    parser.add_argument("--max-in-flight", type=int, help="window size (default 2 x slots)")
    parser.add_argument("--conversations", type=int, metavar="N",
                        help="dependent turns instead: N conversations of 1-6 turns, turn feed against barrier per turn")
    parser.add_argument("--turns", choices=sorted(TURN_WEIGHTS), default="uniform",
                        help="with --conversations: turns per conversation (default uniform 1-6)")
    parser.add_argument("--longest-first", action="store_true",
                        help="with --conversations: also the turn feed with new rollouts ordered by turns, most first")
    args = parser.parse_args()
    size = args.max_in_flight or 2 * args.slots
    server_args = ("--backend", "batching", "--slots", str(args.slots), "--per-token-ms", str(args.per_token_ms))
    if args.conversations is not None:
        if args.conversations < 1:
            parser.error("--conversations must be >= 1")
        return conversations_main(args, size, server_args)
    rng = random.Random(0)
    prompts = [[rng.randrange(3, 900) for _ in range(rng.randrange(50, 400))] for _ in range(args.prompts)]

    strategies = [
        ("one batch call", lambda url: batch_calls(url, prompts, len(prompts))),
        (f"batch calls of {args.chunk}", lambda url: batch_calls(url, prompts, args.chunk)),
        (f"window of {size} (sglang-http)", lambda url: window(url, prompts, size)),
    ]
    lengths = sorted(ContinuousBatchingModel().length_of(p, CAP) for p in prompts)
    print(f"# {time.strftime('%Y-%m-%d')} | {platform.machine()}, {os.cpu_count()} cores | model engine: "
          f"{args.slots} slots, {args.per_token_ms} ms/token | {args.prompts} prompts")
    print(f"# output tokens: median {lengths[len(lengths) // 2]}, mean {sum(lengths) / len(lengths):.0f}, "
          f"p99 {lengths[int(len(lengths) * 0.99)]}, at the {CAP} cap {sum(n == CAP for n in lengths) / len(lengths):.1%}")
    print("| strategy | wall s | idle (whole run) | idle before drain | drain s |")
    print("|---|---|---|---|---|")
    result = {}
    for name, run in strategies:
        with server_process(*server_args) as url:
            done = run(url)
            s = stats(url)
        if done != args.prompts:
            raise SystemExit(f"{name}: {done} of {args.prompts} results")
        result[name] = s
        print(f"| {name} | {s['wall_s']:.1f} | {s['idle_fraction']:.1%} | {s['idle_before_drain']:.1%} "
              f"| {s['drain_s']:.1f} |", flush=True)
    window_idle = result[strategies[-1][0]]["idle_before_drain"]
    if window_idle >= FLOOR:
        print(f"window idle before drain {window_idle:.1%} is not below {FLOOR:.0%}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
