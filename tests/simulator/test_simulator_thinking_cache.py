from __future__ import annotations

from typing import Any

import anthropic
import httpx
import pytest

from simulator.cache import PromptCache
from simulator.testing import SimulatorThread

API_KEY = "sk-sim-cache"
MODEL = "claude-sim-1"
THINKING = {"type": "enabled", "budget_tokens": 1024}
TOOL = {
    "name": "get_weather",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
LONG_SYSTEM = "You are a meticulous assistant. " * 200  # ~6,400 characters


# The simulator is reset before every test (`sim`, `client`: tests/simulator/conftest.py).
pytestmark = pytest.mark.usefixtures("reset_sim")


def post(sim: SimulatorThread, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{sim.url}/v1/messages", json=body, headers={"x-api-key": API_KEY})


def tool_turns(client: anthropic.Anthropic) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A first thinking + tool_use reply; returns (assistant content, next user turn)."""
    first = client.messages.create(
        model=MODEL,
        max_tokens=2000,
        thinking=THINKING,
        tools=[TOOL],
        messages=[{"role": "user", "content": "Weather in Oslo?"}],
    )
    assistant = [b.model_dump(exclude_none=True) for b in first.content]
    assert [b["type"] for b in assistant] == ["thinking", "tool_use"]
    result = [{"type": "tool_result", "tool_use_id": assistant[1]["id"], "content": "sunny"}]
    return assistant, result


def conversation(assistant: list[dict[str, Any]], result: list[dict[str, Any]]) -> list[Any]:
    return [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": assistant},
        {"role": "user", "content": result},
    ]


def test_thinking_roundtrip_verifies(client: anthropic.Anthropic) -> None:
    assistant, result = tool_turns(client)
    second = client.messages.create(
        model=MODEL,
        max_tokens=2000,
        thinking=THINKING,
        tools=[TOOL],
        messages=conversation(assistant, result),
    )
    assert second.content[0].type == "thinking"
    assert second.content[-1].type == "text"
    assert second.content[-1].text == "Tool said: sunny"


def test_tampered_signature_rejected(sim: SimulatorThread, client: anthropic.Anthropic) -> None:
    assistant, result = tool_turns(client)
    assistant[0] = {**assistant[0], "thinking": assistant[0]["thinking"] + " (edited)"}
    body = {
        "model": MODEL,
        "max_tokens": 2000,
        "thinking": THINKING,
        "tools": [TOOL],
        "messages": conversation(assistant, result),
    }
    resp = post(sim, body)
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["message"] == "messages.1.content.0: Invalid `signature` in `thinking` block"
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(**body)


def test_tool_use_without_thinking_rejected(
    sim: SimulatorThread, client: anthropic.Anthropic
) -> None:
    assistant, result = tool_turns(client)
    body = {
        "model": MODEL,
        "max_tokens": 2000,
        "thinking": THINKING,
        "tools": [TOOL],
        "messages": conversation(assistant[1:], result),  # thinking block stripped
    }
    resp = post(sim, body)
    assert resp.status_code == 400
    message = resp.json()["error"]["message"]
    assert message.startswith(
        "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found"
        " `tool_use`. When `thinking` is enabled, a final `assistant` message must start"
        " with a thinking block"
    )
    # Without thinking in this request, the same history is fine.
    body.pop("thinking")
    assert post(sim, body).status_code == 200


def test_only_last_assistant_turn_needs_thinking(
    sim: SimulatorThread, client: anthropic.Anthropic
) -> None:
    assistant, result = tool_turns(client)
    old_turns = conversation(assistant[1:], result)  # an older tool turn without thinking
    body = {
        "model": MODEL,
        "max_tokens": 2000,
        "thinking": THINKING,
        "messages": [
            *old_turns,
            {"role": "assistant", "content": "It is sunny."},
            {"role": "user", "content": "Thanks!"},
        ],
    }
    assert post(sim, body).status_code == 200


def test_thinking_with_forced_tool_rejected(sim: SimulatorThread) -> None:
    resp = post(
        sim,
        {
            "model": MODEL,
            "max_tokens": 2000,
            "thinking": {"type": "adaptive"},
            "tools": [TOOL],
            "tool_choice": {"type": "any"},
            "messages": [{"role": "user", "content": "x"}],
        },
    )
    assert resp.status_code == 400


def test_thinking_display_omitted(client: anthropic.Anthropic) -> None:
    message = client.messages.create(
        model=MODEL,
        max_tokens=2000,
        thinking={"type": "adaptive", "display": "omitted"},  # type: ignore[typeddict-unknown-key]
        messages=[{"role": "user", "content": "hi"}],
    )
    thinking = message.content[0]
    assert thinking.type == "thinking"
    assert thinking.thinking == ""
    assert thinking.signature
    assert message.usage.output_tokens_details is not None
    assert message.usage.output_tokens_details.thinking_tokens > 0


def cached_body(question: str, ttl: str | None = None) -> dict[str, Any]:
    cache_control: dict[str, str] = {"type": "ephemeral"}
    if ttl:
        cache_control["ttl"] = ttl
    return {
        "model": MODEL,
        "max_tokens": 100,
        "system": [{"type": "text", "text": LONG_SYSTEM, "cache_control": cache_control}],
        "messages": [{"role": "user", "content": question}],
    }


def test_cache_creation_then_read(client: anthropic.Anthropic) -> None:
    first = client.messages.create(**cached_body("What is 2+2?"))
    second = client.messages.create(**cached_body("And 3+3?"))
    prefix = len(LONG_SYSTEM) // 4
    assert first.usage.cache_creation_input_tokens == prefix
    assert first.usage.cache_read_input_tokens == 0
    assert first.usage.cache_creation is not None
    assert first.usage.cache_creation.ephemeral_5m_input_tokens == prefix
    assert first.usage.cache_creation.ephemeral_1h_input_tokens == 0
    assert second.usage.cache_creation_input_tokens == 0
    assert second.usage.cache_read_input_tokens == prefix
    counted = client.messages.count_tokens(
        model=MODEL, system=LONG_SYSTEM, messages=[{"role": "user", "content": "And 3+3?"}]
    )
    total = (
        second.usage.input_tokens
        + second.usage.cache_read_input_tokens
        + second.usage.cache_creation_input_tokens
    )
    assert total == counted.input_tokens


def test_cache_streamed_usage_matches(client: anthropic.Anthropic) -> None:
    client.messages.create(**cached_body("warm"))
    with client.messages.stream(**cached_body("streamed")) as stream:
        streamed = stream.get_final_message()
    assert streamed.usage.cache_read_input_tokens == len(LONG_SYSTEM) // 4


def test_cache_ttl_1h_and_different_model(client: anthropic.Anthropic) -> None:
    first = client.messages.create(**cached_body("q", ttl="1h"))
    assert first.usage.cache_creation is not None
    assert first.usage.cache_creation.ephemeral_1h_input_tokens == len(LONG_SYSTEM) // 4
    assert first.usage.cache_creation.ephemeral_5m_input_tokens == 0
    other = client.messages.create(**{**cached_body("q"), "model": "claude-other"})
    assert other.usage.cache_read_input_tokens == 0  # a model switch invalidates the cache
    assert other.usage.cache_creation_input_tokens > 0


def test_without_cache_control_counts_are_zero(client: anthropic.Anthropic) -> None:
    body = cached_body("q")
    body["system"] = LONG_SYSTEM
    for _ in range(2):
        usage = client.messages.create(**body).usage
        assert usage.cache_creation_input_tokens == 0
        assert usage.cache_read_input_tokens == 0


def test_multi_turn_breakpoint_moves_and_reads_prefix(client: anthropic.Anthropic) -> None:
    long_turn = "Tell me everything about fjords. " * 100
    cc = {"type": "ephemeral"}
    turn1 = [
        {"role": "user", "content": [{"type": "text", "text": long_turn, "cache_control": cc}]}
    ]
    first = client.messages.create(model=MODEL, max_tokens=50, system=LONG_SYSTEM, messages=turn1)
    turn2 = [
        {"role": "user", "content": [{"type": "text", "text": long_turn}]},
        {"role": "assistant", "content": "Fjords are long."},
        {"role": "user", "content": [{"type": "text", "text": "More?", "cache_control": cc}]},
    ]
    second = client.messages.create(model=MODEL, max_tokens=50, system=LONG_SYSTEM, messages=turn2)
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert second.usage.cache_creation_input_tokens > 0  # the new tail is written


def test_top_level_cache_control_and_reset(sim: SimulatorThread) -> None:
    body = {
        "model": MODEL,
        "max_tokens": 50,
        "cache_control": {"type": "ephemeral"},
        "system": LONG_SYSTEM,
        "messages": [{"role": "user", "content": "auto caching"}],
    }
    first = post(sim, body).json()["usage"]
    second = post(sim, body).json()["usage"]
    assert first["cache_creation_input_tokens"] > 0
    assert second["cache_read_input_tokens"] == first["cache_creation_input_tokens"]
    sim.reset()
    third = post(sim, body).json()["usage"]
    assert third["cache_read_input_tokens"] == 0


def test_too_many_breakpoints(sim: SimulatorThread) -> None:
    cc = {"type": "ephemeral"}
    blocks = [{"type": "text", "text": f"part {i}", "cache_control": cc} for i in range(5)]
    resp = post(
        sim, {"model": MODEL, "max_tokens": 10, "messages": [{"role": "user", "content": blocks}]}
    )
    assert resp.status_code == 400
    assert "maximum of 4 blocks with cache_control" in resp.json()["error"]["message"]


def test_cache_entries_expire() -> None:
    now = [1000.0]
    cache = PromptCache(clock=lambda: now[0])
    body = cached_body("q")
    assert cache.account(MODEL, body).cache_creation > 0
    now[0] += 299
    assert cache.account(MODEL, body).cache_read > 0  # a hit also refreshes the TTL
    now[0] += 299
    assert cache.account(MODEL, body).cache_read > 0
    now[0] += 301
    assert cache.account(MODEL, body).cache_read == 0
