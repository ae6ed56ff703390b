"""Rollouts: sample ids per conversation, and a rollout its drawn kwargs make unusable."""

from __future__ import annotations

from eagle3_synth.contract.row import PreparedPrompt
from eagle3_synth.prompts.conversation import Conversation
from eagle3_synth.prompts.rollouts import ChatTokenizers, iter_rollouts
from eagle3_synth.prompts.templating import ChatTokenizer
from eagle3_synth.prompts.turns import ConversationPlan, drawn_kwargs, parse_kwarg_mix


def test_a_rollout_too_long_in_its_drawn_kwargs_is_rejected_and_keeps_its_ids(kimi_tokenizer):
    chat = ChatTokenizer(kimi_tokenizer, {})
    messages = [{"role": "user", "content": "How warm is it in Tokyo?"}]
    ids = chat.prompt_ids(Conversation(messages))
    # thinking=false closes reasoning in the prompt (`<think></think>`): longer than the run's own.
    assert len(ChatTokenizer(kimi_tokenizer, {"thinking": False}, form=chat.form).prompt_ids(Conversation(messages))) > len(ids)
    plan = ConversationPlan(samples_per_prompt=4, template_kwarg_mix=parse_kwarg_mix("thinking=true:0.5,thinking=false:0.5"))
    drawn = [drawn_kwargs(plan, 3, s)["thinking"] for s in range(4)]
    assert set(drawn) == {True, False}
    prompts = [PreparedPrompt(3, "src", ids, messages, None)]
    rejects: list[dict] = []
    kept = list(iter_rollouts(iter(prompts), plan, ChatTokenizers(chat), rejects, max_prompt_tokens=len(ids),
                              too_long_reason="the limit"))
    assert [(r.sample_id, r.sample_index, r.template_kwargs) for r in kept] == [
        (3 + s, s, {"thinking": True}) for s in range(4) if drawn[s]]
    assert [(r["sample_id"], r["sample_index"], r["reason"]) for r in rejects] == [
        (3 + s, s, "too_long") for s in range(4) if not drawn[s]]
    assert all("prompt tokens >" in r["detail"] and "(the limit)" in r["detail"] for r in rejects)
