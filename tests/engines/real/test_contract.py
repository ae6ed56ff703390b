"""One contract, two servers: every behaviour of SGLang 0.5.23's HTTP server that the CPU backend
can show, held on the real `launch_server` and on our stand-in (stand_ins/sglang_server.py)
by the same test, so the stand-in cannot drift from the real thing.

What only a GPU shows (attention DP, KV pressure at scale, several GPUs) stays on the stand-ins,
each cited there from SGLang's source.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from eagle3_synth.engines.sglang.http import SGLangHTTPEngine

from ...support.real_sglang import TINY_MODEL, RealServer, sglang_python
from stand_ins.sglang_server import DeterministicBackend, ServerThread, SGLangLoopbackServer


CONTEXT = 32768  # the tiny model's max_position_embeddings
PROMPT = [2032, 5, 17, 99, 300, 41, 7, 8]
STOP = [2033, 2034]
# meta_info's keys, in the order the real server writes them (the first five: srt/managers/tokenizer_manager.py:
# 2507-2513; all of them as the real CPU server returns them, which the test below checks).
META_KEYS = ["id", "finish_reason", "prompt_tokens", "weight_version", "num_retractions", "reasoning_tokens",
             "completion_tokens", "cached_tokens", "weight_versions", "cached_tokens_details", "dp_rank",
             "e2e_latency", "response_sent_to_client_ts"]


@pytest.fixture(scope="module", params=["stand-in", "real"])
def url(request, tmp_path_factory):
    if request.param == "real":
        sglang_python()  # skip (or fail under EAGLE3_SYNTH_REQUIRE_SGLANG=1)
        with RealServer(tmp_path_factory.mktemp("contract") / "server.log") as server:
            yield server.url
    else:
        stand_in = SGLangLoopbackServer(DeterministicBackend(), context_length=CONTEXT, model_path=str(TINY_MODEL))
        with ServerThread(stand_in) as thread:
            yield thread.url


def post(url: str, body: dict) -> tuple[int, object]:
    request = urllib.request.Request(url + "/generate", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=600) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def get(url: str, path: str) -> object:
    with urllib.request.urlopen(url + path, timeout=60) as response:
        return json.loads(response.read())


def greedy(max_new_tokens: int = 8, **extra) -> dict:
    return {"max_new_tokens": max_new_tokens, "temperature": 0, "stop_token_ids": STOP, **extra}


def test_a_result_has_the_ids_and_meta_info_in_sglangs_order(url):
    status, result = post(url, {"input_ids": PROMPT, "sampling_params": greedy()})
    assert status == 200 and list(result) == ["output_ids", "meta_info"]  # no text: skip_tokenizer_init
    meta = result["meta_info"]
    assert list(meta) == META_KEYS
    assert meta["prompt_tokens"] == len(PROMPT) and meta["completion_tokens"] == len(result["output_ids"])
    reason = meta["finish_reason"]
    if reason["type"] == "stop":
        assert reason["matched"] == result["output_ids"][-1] and reason["matched"] in STOP
    else:
        assert reason == {"type": "length", "length": 8} and len(result["output_ids"]) == 8


def test_cached_tokens_come_with_their_tier_and_an_uncached_request_has_none(url):
    prompt = [1500, 1501, 1502, 1503, 1504, 1505]  # shares no prefix with another test's prompts
    first = post(url, {"input_ids": prompt, "sampling_params": greedy()})[1]["meta_info"]
    again = post(url, {"input_ids": prompt, "sampling_params": greedy()})[1]["meta_info"]
    assert first["cached_tokens"] == 0 and first["cached_tokens_details"] is None
    assert again["cached_tokens"] == len(prompt) - 1
    assert again["cached_tokens_details"] == {"device": len(prompt) - 1, "host": 0}


def test_an_unknown_sampling_key_is_a_400_with_a_plain_string_listing_the_keys(url):
    status, body = post(url, {"input_ids": PROMPT, "sampling_params": greedy(foo=1)})
    assert status == 400 and isinstance(body["error"], str)
    assert body["error"].startswith("unknown field `foo`, expected one of `max_new_tokens`, `stop`, `stop_token_ids`")
    assert body["error"].endswith("`sampling_seed`, `custom_params`, `beam_width`, `watermark`, `choice`")


def test_a_bad_sampling_value_is_a_400_with_a_message(url):
    assert post(url, {"input_ids": PROMPT, "sampling_params": greedy(top_p=0)}) == (
        400, {"error": {"message": "top_p must be in (0, 1], got 0."}})


def test_a_priority_on_a_server_without_priority_scheduling_is_served(url):
    status, result = post(url, {"input_ids": PROMPT, "sampling_params": greedy(), "priority": 5})
    assert status == 200 and result["output_ids"]


def test_the_server_info_context_is_the_argument_and_the_models_is_in_v1_models(url):
    info = get(url, "/server_info")
    assert info["context_length"] is None and info["skip_tokenizer_init"] is True
    assert info["max_req_input_len"] == CONTEXT - 6  # min(context - 1, kv - 1) - 5
    cards = get(url, "/v1/models")["data"]
    assert len(cards) == 1 and cards[0]["max_model_len"] == CONTEXT and cards[0]["object"] == "model"


@pytest.mark.parametrize("prompt_tokens, max_new_tokens, message", [
    (CONTEXT + 2, 8, f"The input ({CONTEXT + 2} tokens) is longer than the model's context length ({CONTEXT} tokens)."),
    (CONTEXT - 8, 100, f"Requested token count exceeds the model's maximum context length of {CONTEXT} tokens. You "
                       f"requested a total of {CONTEXT + 92} tokens: {CONTEXT - 8} tokens from the input messages and "
                       "100 tokens for the completion. Please reduce the number of tokens in the input messages or the "
                       "completion to fit within the limit."),
    (CONTEXT - 6, 4, f"Input length ({CONTEXT - 6} tokens) exceeds the maximum allowed length ({CONTEXT - 6} tokens). "
                     "Use a shorter input or enable --allow-auto-truncate."),
])
def test_a_prompt_over_each_limit_is_a_400_naming_it(url, prompt_tokens, max_new_tokens, message):
    status, body = post(url, {"input_ids": [7] * prompt_tokens, "sampling_params": greedy(max_new_tokens)})
    assert (status, body) == (400, {"error": {"message": message}})


def test_the_adapter_reads_the_same_limits_from_both(url):
    """What `sglang-http` makes of either server: the model's context from /v1/models, so the
    longest prompt it accepts is known before any prompt is prepared (a too_long reject, not a 400)."""
    engine = SGLangHTTPEngine((url,), max_in_flight=4)
    try:
        engine.check_servers()
        assert engine.limits.context_length == CONTEXT
        assert engine.max_prompt_tokens(100) == CONTEXT - 100
        assert engine.max_prompt_tokens(4) == CONTEXT - 6 - 1
    finally:
        engine.close()
