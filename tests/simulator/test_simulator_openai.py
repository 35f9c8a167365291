"""The simulator's OpenAI-compatible front, driven with the official openai SDK: auth, replies,
tool calls, reasoning, usage and prompt caching, n, models, recording."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from simulator.testing import SimulatorThread
from tests.simulator.openai_helpers import AZURE_CHAT, body, completion, error_of, post

API_KEY = "sk-sim-openai"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}

pytestmark = pytest.mark.usefixtures("reset_sim")


@pytest.fixture
def oai(sim: SimulatorThread) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{sim.url}/v1", api_key=API_KEY, max_retries=0) as client:
        yield client


# --- auth ---------------------------------------------------------------------------------------
def test_bearer_key_is_required_and_checked(sim: SimulatorThread, oai: openai.OpenAI) -> None:
    assert completion(post(sim, body(), key=API_KEY)).choices[0].message.content
    wrong = error_of(post(sim, body(), key="sk-wrong-key-123"), 401)
    assert wrong["code"] == "invalid_api_key"
    assert wrong["type"] == "invalid_request_error"
    assert "Incorrect API key provided" in wrong["message"]
    missing = error_of(post(sim, body(), key=None), 401)
    assert missing["code"] == "invalid_api_key"
    # Anthropic's header is not OpenAI's: the Messages front's x-api-key does not count here.
    error_of(post(sim, body(), key=None, headers={"x-api-key": API_KEY}), 401)
    bad = openai.OpenAI(base_url=f"{sim.url}/v1", api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as info:
        bad.chat.completions.create(model="gpt-sim", messages=[{"role": "user", "content": "x"}])
    assert info.value.code == "invalid_api_key"
    assert info.value.request_id  # x-request-id


def test_azure_path_takes_the_api_key_header(sim: SimulatorThread) -> None:
    ok = post(sim, body(), key=None, path=AZURE_CHAT, headers={"api-key": API_KEY})
    assert completion(ok).model == "gpt-sim"
    # The plain OpenAI SDK pointed at Azure's v1 base URL sends the key as Bearer.
    client = openai.OpenAI(base_url=f"{sim.url}/openai/v1", api_key=API_KEY, max_retries=0)
    reply = client.chat.completions.create(
        model="gpt-sim-mini", messages=[{"role": "user", "content": "azure"}]
    )
    assert reply.choices[0].message.content == "Simulated reply to: azure"
    wrong = post(sim, body(), key=None, path=AZURE_CHAT, headers={"api-key": "wrong"})
    assert wrong.status_code == 401
    assert wrong.json()["error"]["code"] == "401"
    assert "invalid subscription key" in wrong.json()["error"]["message"]
    assert post(sim, body(), key=None, path=AZURE_CHAT).status_code == 401


def test_keyless_mode_takes_every_request_until_reset(sim: SimulatorThread) -> None:
    assert sim.platform_state()["openai_auth"] == "required"
    assert sim.platform_state(openai_auth="none")["openai_auth"] == "none"
    assert post(sim, body(), key=None).status_code == 200
    assert post(sim, body(), key="anything").status_code == 200  # vLLM without --api-key
    assert post(sim, body(), key=None, path=AZURE_CHAT).status_code == 200
    # The Messages front keeps its own auth.
    messages = {"model": "claude-sim", "max_tokens": 10, "messages": body()["messages"]}
    assert httpx.post(f"{sim.url}/v1/messages", json=messages).status_code == 401
    sim.reset()
    assert post(sim, body(), key=None).status_code == 401


def test_settings_are_checked(sim: SimulatorThread) -> None:
    with pytest.raises(httpx.HTTPStatusError):
        sim.platform_state(openai_auth="sometimes")
    with pytest.raises(httpx.HTTPStatusError):
        sim.platform_state(openai_flavour="llama.cpp")
    assert sim.platform_state()["openai_flavour"] == "openai"


# --- models -------------------------------------------------------------------------------------
def test_models_list_and_unknown_model(sim: SimulatorThread, oai: openai.OpenAI) -> None:
    listed = {m.id: m for m in oai.models.list()}
    assert set(listed) == {"gpt-sim", "gpt-sim-mini", "qwen-sim", "gemini-3-sim"}
    assert listed["gpt-sim"].object == "model"
    assert listed["gpt-sim"].owned_by == "openai"
    assert oai.models.retrieve("qwen-sim").id == "qwen-sim"
    with pytest.raises(openai.NotFoundError) as info:
        oai.chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": "x"}])
    assert info.value.code == "model_not_found"
    assert "The model `gpt-9` does not exist" in info.value.message
    raw = httpx.get(f"{sim.url}/openai/v1/models", headers={"api-key": API_KEY})
    assert [m["id"] for m in raw.json()["data"]] == [
        "gpt-sim",
        "gpt-sim-mini",
        "qwen-sim",
        "gemini-3-sim",
    ]


# --- replies ------------------------------------------------------------------------------------
def test_text_reply(oai: openai.OpenAI) -> None:
    reply = oai.chat.completions.create(
        model="gpt-sim-mini",
        messages=[
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": "Hello simulator"},
        ],
    )
    assert reply.object == "chat.completion"
    assert reply.id.startswith("chatcmpl-")
    choice = reply.choices[0]
    assert choice.message.content == "Simulated reply to: Hello simulator"
    assert choice.message.role == "assistant"
    assert choice.finish_reason == "stop"
    assert reply.usage is not None
    assert reply.usage.prompt_tokens > 0
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens
    assert reply.usage.completion_tokens_details.reasoning_tokens == 0  # type: ignore[union-attr]


def test_tool_call_round_trip(oai: openai.OpenAI) -> None:
    messages: list[Any] = [{"role": "user", "content": "Weather in Oslo?"}]
    first = oai.chat.completions.create(model="gpt-sim-mini", messages=messages, tools=[WEATHER])
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    (call,) = choice.message.tool_calls or []
    assert call.id.startswith("call_")
    assert call.type == "function"
    assert call.function.name == "get_weather"
    assert call.function.arguments == '{"city":"Oslo"}'
    messages += [
        choice.message.model_dump(exclude_none=True, exclude={"annotations"}),
        {"role": "tool", "tool_call_id": call.id, "content": "12 degrees"},
    ]
    second = oai.chat.completions.create(model="gpt-sim-mini", messages=messages, tools=[WEATHER])
    assert second.choices[0].message.content == "Tool said: 12 degrees"
    assert second.choices[0].finish_reason == "stop"


def test_tool_choice_none_and_parallel_calls(oai: openai.OpenAI) -> None:
    time_tool = {"type": "function", "function": {"name": "get_time"}}
    msgs: Any = [{"role": "user", "content": "both please"}]
    both = oai.chat.completions.create(model="gpt-sim", messages=msgs, tools=[WEATHER, time_tool])
    names = [c.function.name for c in both.choices[0].message.tool_calls or []]
    assert names == ["get_weather", "get_time"]
    one = oai.chat.completions.create(
        model="gpt-sim", messages=msgs, tools=[WEATHER, time_tool], parallel_tool_calls=False
    )
    assert len(one.choices[0].message.tool_calls or []) == 1
    named = oai.chat.completions.create(
        model="gpt-sim",
        messages=msgs,
        tools=[WEATHER, time_tool],
        tool_choice={"type": "function", "function": {"name": "get_time"}},
        parallel_tool_calls=False,
    )
    assert [c.function.name for c in named.choices[0].message.tool_calls or []] == ["get_time"]
    none = oai.chat.completions.create(
        model="gpt-sim", messages=msgs, tools=[WEATHER], tool_choice="none"
    )
    assert none.choices[0].message.tool_calls is None
    assert none.choices[0].finish_reason == "stop"


def test_scripted_reply_renders_as_chat(sim: SimulatorThread, oai: openai.OpenAI) -> None:
    content = [
        {"type": "thinking", "thinking": "secret plan", "signature": ""},
        {"type": "text", "text": "Scripted words"},
        {"type": "tool_use", "id": "toolu_abc", "name": "get_weather", "input": {"city": "Rome"}},
    ]
    sim.script({"path": "chat_completions", "reply": {"content": content}})
    reply = oai.chat.completions.create(
        model="qwen-sim", messages=[{"role": "user", "content": "go"}]
    )
    message = reply.choices[0].message
    assert message.content == "Scripted words"
    assert message.tool_calls is not None
    assert message.tool_calls[0].id == "call_abc"
    assert message.tool_calls[0].function.arguments == '{"city":"Rome"}'
    assert reply.choices[0].finish_reason == "tool_calls"
    assert message.model_extra == {"reasoning_content": "secret plan"}
    # A Messages-path fault does not touch the OpenAI front, and vice versa.
    sim.script({"status": 529})
    assert oai.chat.completions.create(model="gpt-sim", messages=[{"role": "user", "content": "a"}])


def test_stop_sequence_and_length(oai: openai.OpenAI) -> None:
    msgs: Any = [{"role": "user", "content": "hello"}]
    stopped = oai.chat.completions.create(model="gpt-sim-mini", messages=msgs, stop=["reply"])
    assert stopped.choices[0].message.content == "Simulated "
    assert stopped.choices[0].finish_reason == "stop"
    cut = oai.chat.completions.create(model="gpt-sim-mini", messages=msgs, max_completion_tokens=2)
    assert cut.choices[0].finish_reason == "length"
    assert cut.choices[0].message.content == "Simulate"
    legacy = oai.chat.completions.create(model="gpt-sim-mini", messages=msgs, max_tokens=2)
    assert legacy.choices[0].finish_reason == "length"


def test_json_schema_response_format(oai: openai.OpenAI) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    reply = oai.chat.completions.create(
        model="gpt-sim",
        messages=[{"role": "user", "content": "Where?"}],
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "place", "schema": schema, "strict": True},
        },
    )
    assert reply.choices[0].message.content == '{"city":"Oslo"}'


def test_n_choices(oai: openai.OpenAI) -> None:
    msgs: Any = [{"role": "user", "content": "twice"}]
    single = oai.chat.completions.create(model="gpt-sim-mini", messages=msgs)
    double = oai.chat.completions.create(model="gpt-sim-mini", messages=msgs, n=2)
    assert [c.index for c in double.choices] == [0, 1]
    assert {c.message.content for c in double.choices} == {"Simulated reply to: twice"}
    assert single.usage is not None and double.usage is not None
    assert double.usage.completion_tokens == 2 * single.usage.completion_tokens
    assert double.usage.prompt_tokens == single.usage.prompt_tokens


# --- reasoning ----------------------------------------------------------------------------------
def test_gpt_sim_reasons_invisibly(oai: openai.OpenAI) -> None:
    msgs: Any = [{"role": "user", "content": "think"}]
    plain = oai.chat.completions.create(model="gpt-sim-mini", messages=msgs)
    reasoned = oai.chat.completions.create(model="gpt-sim", messages=msgs, reasoning_effort="high")
    assert reasoned.choices[0].message.content == plain.choices[0].message.content
    assert not reasoned.choices[0].message.model_extra  # no reasoning text at OpenAI
    assert plain.usage is not None and reasoned.usage is not None
    reasoning = reasoned.usage.completion_tokens_details.reasoning_tokens  # type: ignore[union-attr]
    assert reasoning > 0
    # completion_tokens INCLUDES the reasoning tokens.
    assert reasoned.usage.completion_tokens == plain.usage.completion_tokens + reasoning
    off = oai.chat.completions.create(model="gpt-sim", messages=msgs, reasoning_effort="none")
    assert off.usage is not None
    assert off.usage.completion_tokens_details.reasoning_tokens == 0  # type: ignore[union-attr]


def test_gpt_sim_mini_refuses_reasoning_effort(oai: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        oai.chat.completions.create(
            model="gpt-sim-mini",
            messages=[{"role": "user", "content": "x"}],
            reasoning_effort="low",
        )
    assert info.value.param == "reasoning_effort"
    assert info.value.code == "unsupported_parameter"
    assert "Unsupported parameter: 'reasoning_effort'" in info.value.message


def test_qwen_sim_shows_reasoning_content(sim: SimulatorThread, oai: openai.OpenAI) -> None:
    msgs: Any = [{"role": "user", "content": "ponder"}]
    reply = oai.chat.completions.create(model="qwen-sim", messages=msgs)
    extra = reply.choices[0].message.model_extra or {}
    assert extra["reasoning_content"].startswith("Thinking about: ponder")
    assert reply.usage is not None
    assert reply.usage.completion_tokens_details.reasoning_tokens > 0  # type: ignore[union-attr]
    off = oai.chat.completions.create(model="qwen-sim", messages=msgs, reasoning_effort="none")
    assert not off.choices[0].message.model_extra
    sim.platform_state(openai_reasoning_field="reasoning")
    renamed = oai.chat.completions.create(model="qwen-sim", messages=msgs)
    assert set(renamed.choices[0].message.model_extra or {}) == {"reasoning"}


def test_vllm_flavour_takes_extra_fields(sim: SimulatorThread) -> None:
    extra = {"top_k": 20, "chat_template_kwargs": {"enable_thinking": False}}
    refused = error_of(post(sim, body("qwen-sim", **extra), key=API_KEY), 400)
    assert refused["code"] == "unknown_parameter"
    sim.platform_state(openai_flavour="vllm")
    reply = completion(post(sim, body("qwen-sim", **extra), key=API_KEY))
    assert not reply.choices[0].message.model_extra  # thinking switched off by the template
    assert reply.usage is not None
    assert reply.usage.completion_tokens_details.reasoning_tokens == 0  # type: ignore[union-attr]


# --- prompt caching -----------------------------------------------------------------------------
def _long(model: str, user: str, **extra: Any) -> dict[str, Any]:
    system = "You are the simulator. " * 240  # about 1400 tokens
    return {
        "model": model,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
        **extra,
    }


def _usage(sim: SimulatorThread, payload: dict[str, Any]) -> Any:
    reply = completion(post(sim, payload, key=API_KEY))
    assert reply.usage is not None
    return reply.usage


def test_repeated_long_prompt_reports_cached_tokens(sim: SimulatorThread) -> None:
    first = _usage(sim, _long("gpt-sim", "question one"))
    assert first.prompt_tokens >= 1024
    assert first.prompt_tokens_details.cached_tokens == 0
    again = _usage(sim, _long("gpt-sim", "question one"))
    cached = again.prompt_tokens_details.cached_tokens
    # prompt_tokens INCLUDES the cached part, which comes in 128-token steps from 1024.
    assert again.prompt_tokens == first.prompt_tokens
    assert 1024 <= cached <= again.prompt_tokens
    assert (cached - 1024) % 128 == 0
    assert again.prompt_tokens - cached < 128
    # Another question after the same system prompt reads the shared prefix only.
    other = _usage(sim, _long("gpt-sim", "a different question"))
    assert 1024 <= other.prompt_tokens_details.cached_tokens <= cached
    # Another model, or another prompt_cache_key, is another cache.
    assert _usage(sim, _long("qwen-sim", "question one")).prompt_tokens_details.cached_tokens == 0
    keyed = _long("gpt-sim", "question one", prompt_cache_key="session-7")
    assert _usage(sim, keyed).prompt_tokens_details.cached_tokens == 0
    assert _usage(sim, keyed).prompt_tokens_details.cached_tokens == cached


def test_short_prompts_are_not_cached(sim: SimulatorThread) -> None:
    payload = body(text="short " * 100)
    assert _usage(sim, payload).prompt_tokens < 1024
    assert _usage(sim, payload).prompt_tokens_details.cached_tokens == 0


def test_cache_expires_on_the_simulated_clock(sim: SimulatorThread) -> None:
    _usage(sim, _long("gpt-sim", "q"))
    sim.advance_clock(1)
    assert _usage(sim, _long("gpt-sim", "q")).prompt_tokens_details.cached_tokens > 0
    sim.advance_clock(301)
    assert _usage(sim, _long("gpt-sim", "q")).prompt_tokens_details.cached_tokens == 0


# --- recording ----------------------------------------------------------------------------------
def test_requests_are_recorded_with_path_headers_and_body(sim: SimulatorThread) -> None:
    payload = body(prompt_cache_key="pck-1", user="u-1")
    post(sim, payload, key=API_KEY)
    post(sim, payload, key=None, path=AZURE_CHAT, headers={"api-key": API_KEY})
    records = sim.requests()
    assert [r["path"] for r in records] == ["/v1/chat/completions", AZURE_CHAT]
    assert records[0]["headers"]["authorization"] == f"Bearer {API_KEY}"
    assert records[1]["headers"]["api-key"] == API_KEY
    assert records[0]["body"] == payload
    assert records[0]["prompt_cache_key"] == "pck-1"
    assert records[0]["status"] == "200"


def test_front_is_on_the_platform_simulators_too() -> None:
    from simulator.platforms import PlatformSim

    with SimulatorThread(api_key="sk-bedrock-sim", platform=PlatformSim(platform="bedrock")) as bed:
        assert completion(post(bed, body(), key="sk-bedrock-sim")).model == "gpt-sim"
        assert post(bed, body(), key="sk-wrong").status_code == 401
