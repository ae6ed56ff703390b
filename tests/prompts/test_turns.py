"""The script of an on-policy conversation: where turns are generated, and what follows each one."""

from __future__ import annotations

import pytest

from eagle3_synth.errors import ConfigError
from eagle3_synth.prompts.conversation import Conversation
from eagle3_synth.prompts.turns import (ConversationPlan, continuation, drawn_kwargs, generation_points, opening,
                                        parse_kwarg_mix, turn_count)

SYSTEM = {"role": "system", "content": "You help."}
U1 = {"role": "user", "content": "Weather in Paris and Rome?"}
U2 = {"role": "user", "content": "Thanks. And tomorrow?"}


def call(name, index, arguments='{"city": "Paris"}'):
    return {"id": f"functions.{name}:{index}", "type": "function", "function": {"name": name, "arguments": arguments}}


def result(name, index, content):
    return {"role": "tool", "tool_call_id": f"functions.{name}:{index}", "name": name, "content": content}


SOURCE_CALLS = {"role": "assistant", "content": None,
                "tool_calls": [call("get_weather", 0), call("get_time", 1, '{"city": "Rome"}')]}
SCRIPT = [SYSTEM, U1, SOURCE_CALLS, result("get_weather", 0, "18 C"), result("get_time", 1, "14:00"),
          {"role": "assistant", "content": "18 C in Paris; it is 14:00 in Rome."}, U2]


def generated(*calls, content=""):
    message = {"role": "assistant", "content": content, "reasoning_content": "thinking"}
    if calls:
        message["tool_calls"] = list(calls)
    return message


def test_points_are_the_source_assistant_turns_and_a_final_answer():
    assert generation_points(SCRIPT) == [2, 5, 7]
    assert generation_points(SCRIPT[:6]) == [2, 5]  # ends with an assistant turn: no extra answer
    assert turn_count(SCRIPT) == 3 and turn_count(None) == 1


def test_opening_cuts_at_the_first_point_and_keeps_the_script():
    first = opening(Conversation(SCRIPT, [{"type": "function"}], "id-1"))
    assert first.messages == [SYSTEM, U1] and first.script == SCRIPT and first.source_id == "id-1"
    single = Conversation([SYSTEM, U1])
    assert opening(single) is single  # one turn: nothing to keep


def test_parallel_calls_are_each_answered_by_the_source_result_of_the_same_function():
    # The target calls them in the other order, with its own ids: each result is re-addressed to it.
    turn = generated(call("get_time", 0, '{"city": "Rome"}'), call("get_weather", 1))
    history = [SYSTEM, U1]
    following, ending = continuation(history, turn, SCRIPT, 0)
    assert ending is None
    assert following == [SYSTEM, U1, turn,
                         {"role": "tool", "tool_call_id": "functions.get_time:0", "name": "get_time", "content": "14:00"},
                         {"role": "tool", "tool_call_id": "functions.get_weather:1", "name": "get_weather",
                          "content": "18 C"}]


def test_a_call_the_source_did_not_answer_ends_the_conversation():
    assert continuation([SYSTEM, U1], generated(call("get_stock", 0)), SCRIPT, 0) == (None, "call_unanswered")
    # A second call of the same function has no second result: never invented.
    twice = generated(call("get_weather", 0), call("get_weather", 1))
    assert continuation([SYSTEM, U1], twice, SCRIPT, 0) == (None, "call_unanswered")


def test_source_results_for_calls_not_made_end_the_conversation():
    assert continuation([SYSTEM, U1], generated(content="I cannot look that up."), SCRIPT, 0) == (None, "calls_not_made")


def test_a_text_answer_is_followed_by_the_next_user_turn_and_the_last_point_ends():
    history = [SYSTEM, U1, generated(call("get_weather", 0)), result("get_weather", 0, "18 C")]
    answer = generated(content="18 C.")
    following, ending = continuation(history, answer, SCRIPT, 1)
    assert ending is None and following == [*history, answer, U2]
    assert continuation(following, generated(content="Sunny."), SCRIPT, 2) == (None, "source_end")
    # A call where the source goes on with a user turn: no result for it.
    assert continuation(history, generated(call("get_weather", 1)), SCRIPT, 1) == (None, "call_unanswered")


def test_results_named_only_by_id_are_matched_through_the_source_call():
    unnamed = [{k: v for k, v in m.items() if k != "name"} if m.get("role") == "tool" else m for m in SCRIPT]
    following, ending = continuation([SYSTEM, U1], generated(call("get_weather", 0)), unnamed, 0)
    assert ending is None and following[-1]["name"] == "get_weather" and following[-1]["content"] == "18 C"


def test_two_source_assistant_turns_in_a_row_end_the_conversation():
    script = [U1, {"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}]
    assert continuation([U1], generated(content="x"), script, 0) == (None, "no_turn_between")


def test_kwarg_mix_parses_weights_and_several_kwargs():
    assert parse_kwarg_mix("thinking=true:0.7,thinking=false:0.3") == (({"thinking": True}, 0.7),
                                                                      ({"thinking": False}, 0.3))
    assert parse_kwarg_mix("thinking=true+reasoning_effort=high:2") == (({"thinking": True,
                                                                          "reasoning_effort": "high"}, 2.0),)


@pytest.mark.parametrize("text, message", [
    ("thinking=true", "'thinking=true' is not KEY=VALUE[+KEY=VALUE...]:WEIGHT"),
    ("thinking=true:x", "weight 'x' of 'thinking=true:x' is not a number"),
    ("thinking:0.5", "'thinking' in 'thinking:0.5' is not KEY=VALUE"),
    ("thinking=true:0", "weights must be positive numbers, got 0.0"),
])
def test_a_bad_kwarg_mix_names_the_option_and_the_part(text, message):
    with pytest.raises(ConfigError, match="--template-kwarg-mix") as error:
        parse_kwarg_mix(text)
    assert message in str(error.value)


def test_kwarg_draw_is_seeded_per_rollout_and_follows_the_weights():
    plan = ConversationPlan(template_kwarg_mix=parse_kwarg_mix("thinking=true:0.7,thinking=false:0.3"), mix_seed=3)
    draws = [drawn_kwargs(plan, c, s)["thinking"] for c in range(500) for s in range(2)]
    assert draws == [drawn_kwargs(plan, c, s)["thinking"] for c in range(500) for s in range(2)]
    assert 0.63 < sum(draws) / len(draws) < 0.77
    other = ConversationPlan(template_kwarg_mix=plan.template_kwarg_mix, mix_seed=4)
    assert draws != [drawn_kwargs(other, c, s)["thinking"] for c in range(500) for s in range(2)]
    assert drawn_kwargs(ConversationPlan(), 0, 0) == {}


def test_plan_checks_name_the_option():
    with pytest.raises(ConfigError, match="--turns must be one of last, all, got 'some'"):
        ConversationPlan(turns="some")
    with pytest.raises(ConfigError, match="--samples-per-prompt must be an integer >= 1, got 0"):
        ConversationPlan(samples_per_prompt=0)
