"""`hidden-states --engine sglang`'s plan, without SGLang: which ids each family is asked for, where
each layer sits in what comes back, a short or misshapen row refused naming it, a server started
otherwise refused naming each difference. The states themselves are held against the real SGLang in
tests/engines/real/test_hidden_states.py."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from eagle3_synth.errors import ConfigError
from eagle3_synth.train.hidden_states.layouts import Item
from eagle3_synth.train.hidden_states.sglang_capture import ShortRow, check_server_args, plan_capture

H = 4


def config(architecture: str, layers: int = 8) -> SimpleNamespace:
    text = SimpleNamespace(num_hidden_layers=layers, hidden_size=H)
    return SimpleNamespace(architectures=[architecture], get_text_config=lambda: text)


def item(tokens: int) -> Item:
    return Item(name="hs_0.safetensors", input_ids=np.arange(tokens), loss_mask=None, row_id="B1_glaive-7",
                prompt_tokens=1)


@pytest.mark.parametrize("architecture,named", [
    ("LlamaForCausalLM", [1, 3, 4]),  # llama.py set_eagle3_layers_to_capture: k + 1
    ("Qwen3ForCausalLM", [1, 3, 4]),
    ("DeepseekV3ForCausalLM", [1, 3, 4]),  # deepseek_v2.py: k + 1 as the first id is 1
    ("KimiK25ForConditionalGeneration", [1, 3, 4]),
    ("GptOssForCausalLM", [1, 3, 4]),  # gpt_oss.py: k + 1 unless the largest is n
])
def test_each_family_is_asked_for_the_vllm_layers_in_its_own_numbering(architecture, named):
    plan = plan_capture([2, 4, 5], config(architecture))
    assert plan.sglang_ids == tuple(named) and plan.captured == (2, 4, 5)
    args = plan.server_args()
    assert args["return_aux_hidden_state_layer_ids"] == named and args["enable_return_aux_hidden_states"] is True
    assert args["disable_radix_cache"] is True and args["chunked_prefill_size"] == -1
    assert plan.width == 5 * H


def test_layers_no_numbering_captures_are_refused_naming_the_rule():
    with pytest.raises(ConfigError, match=r"--layers 1 4 5: DeepseekV3ForCausalLM numbers layers by SGLang's "
                                          r"'deepseek' rule .* no return_aux_hidden_state_layer_ids captures layers \[1, 4, 5\]"):
        plan_capture([1, 4, 5], config("DeepseekV3ForCausalLM"))
    with pytest.raises(ConfigError, match=r"--layers 0 2: LlamaForCausalLM .* captures layers \[0, 2\]"):
        plan_capture([0, 2], config("LlamaForCausalLM"))  # the embeddings: SGLang refuses a negative id


def test_the_last_layers_output_is_the_pre_norm_state_and_any_order_is_kept():
    plan = plan_capture([5, 8, 2], config("LlamaForCausalLM"))
    assert plan.captured == (2, 5) and plan.sglang_ids == (1, 4)
    # Each state block of the response marked with its own value: aux 2, aux 5, pre-norm, normed.
    row = torch.cat([torch.full((3, H), float(v)) for v in (2, 5, 80, 99)], dim=-1)
    states, normed = plan.split(row.tolist(), item(3), "bfloat16")
    assert [float(s[0, 0]) for s in states] == [5.0, 80.0, 2.0, 80.0]  # --layers order, then the pre-norm state
    assert float(normed[0, 0]) == 99.0 and normed.dtype == torch.bfloat16 and normed.shape == (3, H)
    # Only the pre-norm state asked for: no aux capture, SGLang's own state first.
    only_final = plan_capture([8], config("LlamaForCausalLM"))
    assert only_final.sglang_ids is None and "enable_return_aux_hidden_states" not in only_final.server_args()
    assert only_final.width == 3 * H


def test_a_short_or_misshapen_row_is_refused_naming_it():
    plan = plan_capture([2, 4, 5], config("LlamaForCausalLM"))
    with pytest.raises(ShortRow, match=r"row B1_glaive-7: SGLang returned 2 positions of its 3 .*nothing written"):
        plan.split(torch.zeros(2, 5 * H), item(3), "bfloat16")
    with pytest.raises(ShortRow, match=r"row B1_glaive-7: SGLang returned 12 values per position, not 20 .*state_hooks"):
        plan.split(torch.zeros(3, 3 * H), item(3), "bfloat16")


def test_the_printed_flags_say_what_the_server_must_run_with(tmp_path):
    plan = plan_capture([2, 4, 5], config("LlamaForCausalLM"), folder=str(tmp_path))
    flags = shlex.split(plan.server_flags())
    hooks = json.loads(flags[flags.index("--forward-hooks") + 1])
    assert [h["hook_factory"] for h in hooks] == ["eagle3_synth.engines.sglang.state_hooks:keep_prenorm",
                                                  "eagle3_synth.engines.sglang.state_hooks:append_final_states"]
    assert hooks[1]["config"] == {"dir": str(tmp_path)}
    assert flags[flags.index("--return-aux-hidden-state-layer-ids") + 1:][:3] == ["1", "3", "4"]
    # A server's /get_server_info with those arguments passes; one without them is named.
    info = {**plan.server_args(), "speculative_algorithm": None}
    check_server_args(plan, "http://a:1", info)
    with pytest.raises(ConfigError, match=r"--url http://a:1: this server cannot return the states asked for "
                                          r"\(disable_radix_cache is False, not True; chunked_prefill_size is 8192, not -1\); "
                                          r"start it as: python -m sglang.launch_server --model-path MODEL --enable-return"):
        check_server_args(plan, "http://a:1", {**info, "disable_radix_cache": False, "chunked_prefill_size": 8192})
    # The server's hooks say where the states go: its folder, or the response where it has none.
    elsewhere = plan_capture([2, 4, 5], config("LlamaForCausalLM"), "/elsewhere").server_args()["forward_hooks"]
    assert check_server_args(plan, "http://a:1", {**info, "forward_hooks": elsewhere}).folder == "/elsewhere"
    in_response = plan_capture([2, 4, 5], config("LlamaForCausalLM")).server_args()["forward_hooks"]
    assert check_server_args(plan, "http://a:1", {**info, "forward_hooks": in_response}).folder is None
    with pytest.raises(ConfigError, match=r"forward_hooks is None, not \["):
        check_server_args(plan, "http://a:1", {**info, "forward_hooks": None})


def options(**changes):
    from eagle3_synth.train.hidden_states.job import HiddenStatesOptions

    return HiddenStatesOptions(configs=("B1_glaive",), fmt="speculators", folder=Path("prep"), model="m", **changes)


def test_options_that_cannot_capture_are_refused_naming_the_option():
    with pytest.raises(ConfigError, match=r"^--engine sglang-http needs --url: a server started with the flags --dry-run prints$"):
        options(engine="sglang-http")
    with pytest.raises(ConfigError, match=r"^--states-via must be one of files, response, got 'disk'$"):
        options(engine="sglang", states_via="disk")
    with pytest.raises(ConfigError, match=r"^--device is not used by --engine sglang, only by --engine transformers; "
                                          r"SGLang places the model itself \(--engine-arg tp_size=8, or device=cpu\)$"):
        options(engine="sglang", device="cuda")
    # Each option an engine does not use is refused the same way (engines.ENGINE_OPTIONS), defaults never.
    with pytest.raises(ConfigError, match=r"^--url is not used by --engine transformers, only by --engine sglang-http: "
                                          r"give --engine sglang-http, or drop --url$"):
        options(urls=("http://127.0.0.1:30000",))
    with pytest.raises(ConfigError, match=r"^--engine-arg is not used by --engine sglang-http, only by --engine "
                                          r"sglang; an SGLang server takes its arguments as its own launch flags"):
        options(engine="sglang-http", urls=("http://127.0.0.1:30000",), engine_args={"tp_size": 2})
    with pytest.raises(ConfigError, match=r"^--batch-tokens is not used by --engine sglang, only by --engine "
                                          r"transformers"):
        options(engine="sglang", batch_tokens=4096)
    with pytest.raises(ConfigError, match=r"^--states-via is not used by --engine transformers, only by --engine "
                                          r"sglang and sglang-http$"):
        options(states_via="response")
    options(engine="sglang", device="cpu", max_in_flight=32, batch_tokens=16384)  # the defaults, given


def test_an_engine_arg_the_capture_sets_is_refused_before_any_engine_starts(monkeypatch):
    from eagle3_synth.train.hidden_states import sglang_capture

    started = []
    monkeypatch.setattr("eagle3_synth.engines.create_engine", lambda *a: started.append(a))
    plan = plan_capture([2, 4, 5], config("LlamaForCausalLM"))
    with pytest.raises(ConfigError, match=r"^--engine-arg chunked_prefill_size, disable_radix_cache: set by hidden-states "
                                          r"itself \(the capture runs SGLang with enable_return_hidden_states=True"):
        with sglang_capture.sglang_engine(options(engine="sglang", engine_args={"disable_radix_cache": False,
                                                                                "chunked_prefill_size": 4096}), plan):
            pass
    assert started == []


def test_sglang_is_sized_for_the_longest_row_it_will_prefill_unless_the_user_says(monkeypatch):
    """With chunked prefill off SGLang reserves 1.5 MB a token of max_prefill_tokens (16,384 unless
    set: ~25 GB, more than a 24 GB CPU machine has): the capture sets it from the longest row, not
    below SGLang's own floor of 2,048; a user's --engine-arg max_prefill_tokens wins, and a server
    started with another is not refused for it."""
    from eagle3_synth.train.hidden_states import sglang_capture

    assert plan_capture([2, 4, 5], config("LlamaForCausalLM"), longest=9000).server_args()["max_prefill_tokens"] == 9000
    short = plan_capture([2, 4, 5], config("LlamaForCausalLM"), longest=300)
    assert short.server_args()["max_prefill_tokens"] == 2048
    assert "--max-prefill-tokens 2048" in short.server_flags()
    assert "max_prefill_tokens" not in plan_capture([2, 4, 5], config("LlamaForCausalLM")).server_args()
    check_server_args(short, "http://a:1", {**short.server_args(), "speculative_algorithm": None,
                                            "max_prefill_tokens": 16384})

    started = []
    monkeypatch.setattr("eagle3_synth.engines.create_engine",
                        lambda name, engine_options: started.append(engine_options.engine_args) or
                        SimpleNamespace(close=lambda: None))
    for given, expected in [({}, 2048), ({"max_prefill_tokens": 512}, 512)]:
        with sglang_capture.sglang_engine(options(engine="sglang", engine_args=given), short):
            pass
        assert started.pop()["max_prefill_tokens"] == expected


def test_servers_whose_hooks_write_to_different_places_are_refused(monkeypatch, tmp_path):
    from eagle3_synth.train.hidden_states import sglang_capture

    plan = plan_capture([2, 4, 5], config("LlamaForCausalLM"), folder=str(tmp_path))
    infos = {"http://a:1": {**plan.server_args(), "speculative_algorithm": None},
             "http://b:2": {**plan_capture([2, 4, 5], config("LlamaForCausalLM")).server_args(), "speculative_algorithm": None}}
    closed = []
    engine = SimpleNamespace(urls=SimpleNamespace(urls=list(infos)), server_info=infos.get, close=lambda: closed.append(1))
    monkeypatch.setattr("eagle3_synth.engines.create_engine", lambda name, engine_options: engine)
    with pytest.raises(ConfigError, match=rf"^the servers' hooks write states to different places \(http://a:1: {tmp_path}, "
                                          r"http://b:2: the response\): start them with one --forward-hooks$"):
        with sglang_capture.sglang_engine(options(engine="sglang-http", urls=tuple(infos)), plan):
            pass
    assert closed == [1]


def test_a_row_whose_states_file_never_appeared_is_named(tmp_path):
    from eagle3_synth.train.hidden_states.sglang_capture import _take_states_file

    with pytest.raises(ShortRow, match=r"^row B1_glaive-7: SGLang finished its prefill but wrote no states to "
                                       rf"{tmp_path}/r\.safetensors \(a server started without the forward hooks"):
        _take_states_file(tmp_path / "r.safetensors", item(3))
