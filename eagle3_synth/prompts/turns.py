"""On-policy conversations: which assistant turns of a source conversation the target writes, and
what its next prompt is after each one.

A source conversation is a *script*: its user turns, tool results and system prompt are kept, its
assistant turns are only positions (`generation_points`). With `turns: all`, the target writes every
one of them: for `u1 a1 u2 a2 u3` it writes a1' from `[u1]`, a2' from `[u1 a1' u2]`, a3' from
`[u1 a1' u2 a2' u3]`, each generated turn fed back as the history message a serving stack's parsers
return for it (`history.history_message`). `turns: last` is the single final answer after the
source's own earlier turns (the conversation cut after its last user turn, as adapters always did).

Tool loops follow the source and never invent a result (`continuation`): a generated call is
answered by the source's result of a call to a function of the same name at that point (each
parallel call by its own result); a call the source cannot answer, or source results for calls the
target did not make, end the conversation there.

`ConversationPlan` also expands each source conversation into `samples_per_prompt` rollouts, each
templated with kwargs drawn from `template_kwarg_mix` by a seeded draw (`drawn_kwargs`): the whole
tree of samples is a deterministic function of the plan, which is part of the run's fingerprint.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from eagle3_synth.contract.row import sampling_problem
from eagle3_synth.errors import ConfigError
from eagle3_synth.prompts.configs import TURN_MODES
from eagle3_synth.prompts.conversation import Conversation
from eagle3_synth.prompts.held_out import seeded_draw

Message = dict[str, Any]
KwargMix = tuple[tuple[Mapping[str, Any], float], ...]

# Why a rollout has no further turn (counted in the run summary): the source has no more assistant
# turns; the turn was cut off or failed; the turn called a function the source has no result for;
# the source answers calls the turn did not make; the source has two assistant turns in a row; the
# next prompt was too long or refused by the template.
ENDINGS = ("source_end", "cut_off", "failed", "call_unanswered", "calls_not_made", "no_turn_between",
           "too_long", "template_error")


def parse_kwarg_mix(text: str, option: str = "--template-kwarg-mix") -> KwargMix:
    """`thinking=true:0.7,thinking=false:0.3` -> (({"thinking": True}, 0.7), ({"thinking": False}, 0.3)).

    A component may set several kwargs joined by `+` (`thinking=true+reasoning_effort=high:0.5`);
    values are JSON when they parse (true, 8), else strings; weights are positive numbers (they are
    normalised, so 7 and 3 mean the same as 0.7 and 0.3)."""
    mix = []
    for component in (part.strip() for part in text.split(",")):
        kwargs_text, sep, weight_text = component.rpartition(":")
        if not sep or not kwargs_text:
            raise ConfigError(f"{option}: {component!r} is not KEY=VALUE[+KEY=VALUE...]:WEIGHT")
        try:
            weight = float(weight_text)
        except ValueError:
            raise ConfigError(f"{option}: weight {weight_text!r} of {component!r} is not a number") from None
        kwargs: dict[str, Any] = {}
        for item in kwargs_text.split("+"):
            key, eq, raw = item.partition("=")
            if not eq or not key.strip():
                raise ConfigError(f"{option}: {item!r} in {component!r} is not KEY=VALUE")
            try:
                kwargs[key.strip()] = json.loads(raw)
            except json.JSONDecodeError:
                kwargs[key.strip()] = raw
        mix.append((kwargs, weight))
    return check_kwarg_mix(tuple(mix), option)


def check_kwarg_mix(mix: Any, option: str = "template_kwarg_mix") -> KwargMix:
    """The mix as a tuple of (kwargs, weight); ConfigError naming `option` for a malformed one."""
    if isinstance(mix, str):
        return parse_kwarg_mix(mix, option)
    checked = []
    for item in mix or ():
        if not (isinstance(item, Sequence) and len(item) == 2 and isinstance(item[0], Mapping)):
            raise ConfigError(f"{option}: each component is (kwargs mapping, weight), got {item!r}")
        weight = item[1]
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight > 0:
            raise ConfigError(f"{option}: weights must be positive numbers, got {weight!r}")
        checked.append((dict(item[0]), float(weight)))
    return tuple(checked)


# What a `--sampling-mix` component may set. max_new_tokens stays per run: the longest prompt kept
# follows from it (the model's context minus max_new_tokens); the seed is per sample.
MIX_SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p")


def check_sampling_mix(mix: Any, option: str = "--sampling-mix") -> KwargMix:
    """`temperature=0.0:0.2,temperature=0.6+top_p=0.95:0.8` as a mix (the `--template-kwarg-mix`
    syntax), each value checked as the option of its name would be."""
    checked = check_kwarg_mix(mix, option)
    for values, _ in checked:
        for name, value in values.items():
            if name not in MIX_SAMPLING_KEYS:
                why = (" (per run: --max-new-tokens; the prompt-length limit follows from it)" if name == "max_new_tokens"
                       else " (per sample: --seed + its sample id)" if name == "seed" else "")
                raise ConfigError(f"{option}: {name!r} cannot be mixed{why}; a component sets "
                                  f"{', '.join(MIX_SAMPLING_KEYS)}")
            problem = sampling_problem(name, value)
            if problem is not None:
                raise ConfigError(f"{option}: {name} {problem}")
    return checked


@dataclass(frozen=True)
class ConversationPlan:
    """How each source conversation expands into generations (fingerprinted field by field)."""

    # "last": the final answer only; "all": every assistant turn, on the target's own history.
    turns: str = "last"
    # Rollouts per source conversation, each with its own sampling seed (seed + its sample ids).
    samples_per_prompt: int = 1
    # Template kwargs per rollout, drawn with these weights (over the run's own kwargs); () = none.
    template_kwarg_mix: KwargMix = field(default=())
    # Seed of the kwargs draw (the run's selection seed: the plan is deterministic).
    mix_seed: int = 0
    # Sampling values per rollout (`MIX_SAMPLING_KEYS`), drawn with these weights over the run's
    # own (--temperature ...) by a draw of their own from mix_seed; () = the run's for every rollout.
    sampling_mix: KwargMix = field(default=())

    def __post_init__(self) -> None:
        if self.turns not in TURN_MODES:
            raise ConfigError(f"--turns must be one of {', '.join(TURN_MODES)}, got {self.turns!r}")
        if isinstance(self.samples_per_prompt, bool) or not isinstance(self.samples_per_prompt, int) \
                or self.samples_per_prompt < 1:
            raise ConfigError(f"--samples-per-prompt must be an integer >= 1, got {self.samples_per_prompt!r}")
        object.__setattr__(self, "template_kwarg_mix", check_kwarg_mix(self.template_kwarg_mix))
        object.__setattr__(self, "sampling_mix", check_sampling_mix(self.sampling_mix, "sampling_mix"))

    @property
    def whole(self) -> bool:
        """Whether source conversations are kept whole (every turn generated)."""
        return self.turns == "all"


def _component(mix: KwargMix, draw: float) -> dict[str, Any]:
    total = sum(weight for _, weight in mix)
    running = 0.0
    for values, weight in mix:
        running += weight / total
        if draw < running:
            return dict(values)
    return dict(mix[-1][0])


def drawn_kwargs(plan: ConversationPlan, conversation_id: int, sample_index: int) -> dict[str, Any]:
    """The mix component of one rollout ({} without a mix): a seeded draw from (mix_seed,
    conversation_id, sample_index), so a rollout's kwargs do not depend on any other."""
    if not plan.template_kwarg_mix:
        return {}
    return _component(plan.template_kwarg_mix, seeded_draw(plan.mix_seed, f"{conversation_id}:{sample_index}"))


def drawn_sampling(plan: ConversationPlan, conversation_id: int, sample_index: int) -> dict[str, Any]:
    """The `sampling_mix` component of one rollout ({} without a mix), by a draw of its own (not
    tied to the kwargs draw: another key), every turn of the rollout sampled with it."""
    if not plan.sampling_mix:
        return {}
    return _component(plan.sampling_mix, seeded_draw(plan.mix_seed, f"sampling:{conversation_id}:{sample_index}"))


# -- the script of a conversation -----------------------------------------------------------------

def generation_points(script: Sequence[Message]) -> list[int]:
    """Where the target writes a turn: at each source assistant message, and at the end when the
    script does not end with one (a final user turn or tool result asks for an answer)."""
    points = [i for i, message in enumerate(script) if message.get("role") == "assistant"]
    if not script or script[-1].get("role") != "assistant":
        points.append(len(script))
    return points


def opening(conversation: Conversation) -> Conversation:
    """A whole source conversation as its first prompt (up to the first point), with the whole
    conversation kept as its `script`; a conversation with one point needs no script."""
    script = conversation.messages
    points = generation_points(script)
    if len(points) == 1 and points[0] == len(script):
        return conversation
    return Conversation(list(script[: points[0]]), conversation.tools, conversation.source_id, list(script))


def turn_count(script: Sequence[Message] | None) -> int:
    """Turns a rollout of this script may have (1 without a script)."""
    return len(generation_points(script)) if script else 1


def _call_names(message: Message) -> dict[str, str]:
    """A source assistant message's call ids -> function names (to name results that carry only an id)."""
    return {call.get("id"): (call.get("function") or {}).get("name") for call in message.get("tool_calls") or ()
            if isinstance(call, Mapping)}


def _answers(calls: Sequence[Mapping[str, Any]], results: Sequence[Message], source_turn: Message | None
             ) -> list[Message] | None:
    """One source result per generated call (same function name, in order), re-addressed to the
    generated call's id; None when any call has no result."""
    names = _call_names(source_turn) if source_turn else {}
    unused = [(message.get("name") or names.get(message.get("tool_call_id")), message) for message in results]
    answers = []
    for call in calls:
        name = (call.get("function") or {}).get("name")
        match = next((i for i, (result_name, _) in enumerate(unused) if name and result_name == name), None)
        if match is None:
            return None
        _, result = unused.pop(match)
        answers.append({"role": "tool", "tool_call_id": call.get("id"), "name": name, "content": result.get("content")})
    return answers


def continuation(history: Sequence[Message], generated: Message, script: Sequence[Message], turn: int
                 ) -> tuple[list[Message] | None, str | None]:
    """The prompt messages of turn `turn + 1`, or (None, why it ends: one of ENDINGS).

    `history`: turn `turn`'s prompt messages; `generated`: its output as a history message. Between
    point `turn` and the next, the source holds tool results (answers to its own calls) and then
    other turns (a user turn...): the results are used only to answer the generated calls.
    """
    points = generation_points(script)
    if turn + 1 >= len(points):
        return None, "source_end"
    here = points[turn]
    between = list(script[here + 1 : points[turn + 1]])
    count = next((i for i, message in enumerate(between) if message.get("role") != "tool"), len(between))
    results, rest = between[:count], between[count:]
    calls = generated.get("tool_calls") or []
    if calls:
        answers = _answers(calls, results, script[here] if here < len(script) else None)
        if answers is None:
            return None, "call_unanswered"
        follow = answers + rest
    elif results:
        return None, "calls_not_made"
    else:
        follow = rest
    if not follow:
        return None, "no_turn_between"
    return [*history, generated, *follow], None
