from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import pytest

from simulator.testing import SimulatorThread

API_KEY = "sk-sim-stream"
MODEL = "claude-sim-1"
TOOL = {
    "name": "lookup",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "limit": {"type": "integer"}},
        "required": ["city", "limit"],
    },
}


# The simulator is reset before every test (`sim`, `client`: tests/simulator/conftest.py).
pytestmark = pytest.mark.usefixtures("reset_sim")


def raw_events(sim: SimulatorThread, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) pairs, asserting the SSE framing on the way."""
    resp = httpx.post(
        f"{sim.url}/v1/messages",
        json={**body, "stream": True},
        headers={"x-api-key": API_KEY},
        timeout=10,
    )
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/event-stream")
    assert resp.headers["request-id"].startswith("req_")
    events = []
    for chunk in resp.text.split("\n\n"):
        if not chunk.strip():
            continue
        lines = chunk.split("\n")
        assert lines[0].startswith("event: ") and lines[1].startswith("data: "), chunk
        name, data = lines[0][7:], json.loads(lines[1][6:])
        assert data["type"] == name
        events.append((name, data))
    return events


def test_text_stream_event_order(sim: SimulatorThread) -> None:
    events = raw_events(
        sim, {"model": MODEL, "max_tokens": 100, "messages": [{"role": "user", "content": "Hi"}]}
    )
    names = [name for name, _ in events]
    assert names[:3] == ["message_start", "ping", "content_block_start"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert names.count("content_block_delta") >= 2  # text arrives in several pieces

    start = events[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None
    assert start["model"] == MODEL
    assert start["usage"]["output_tokens"] == 1
    assert start["usage"]["input_tokens"] == 1

    text = "".join(d["delta"]["text"] for n, d in events if n == "content_block_delta")
    assert text == "Simulated reply to: Hi"

    delta = events[-2][1]
    assert delta["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert delta["usage"] == {
        "input_tokens": 1,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": 6,
        "output_tokens_details": {"thinking_tokens": 0},
    }


def test_thinking_and_tool_use_stream_shape(sim: SimulatorThread) -> None:
    events = raw_events(
        sim,
        {
            "model": MODEL,
            "max_tokens": 2000,
            "thinking": {"type": "adaptive"},
            "tools": [TOOL],
            "messages": [{"role": "user", "content": "Find Oslo"}],
        },
    )
    blocks: dict[int, list[dict[str, Any]]] = {}
    starts: dict[int, dict[str, Any]] = {}
    order: list[str] = []
    for name, data in events:
        order.append(name)
        if name == "content_block_start":
            starts[data["index"]] = data["content_block"]
        elif name == "content_block_delta":
            blocks.setdefault(data["index"], []).append(data["delta"])
    assert starts[0] == {"type": "thinking", "thinking": "", "signature": ""}
    assert starts[1]["type"] == "tool_use" and starts[1]["input"] == {}
    assert starts[1]["id"].startswith("toolu_") and starts[1]["name"] == "lookup"

    thinking_deltas = blocks[0]
    assert [d["type"] for d in thinking_deltas[:-1]] == ["thinking_delta"] * (
        len(thinking_deltas) - 1
    )
    assert len(thinking_deltas) >= 3
    assert thinking_deltas[-1]["type"] == "signature_delta"
    assert thinking_deltas[-1]["signature"]

    json_deltas = blocks[1]
    assert all(d["type"] == "input_json_delta" for d in json_deltas)
    assert json_deltas[0]["partial_json"] == ""
    assert len(json_deltas) >= 4  # "" plus at least three real fragments
    assert json.loads("".join(d["partial_json"] for d in json_deltas)) == {
        "city": "Oslo",
        "limit": 1,
    }
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"
    assert events[-2][1]["usage"]["output_tokens_details"]["thinking_tokens"] > 0
    # Block 0 stops before block 1 starts.
    stop0 = next(i for i, (n, d) in enumerate(events) if n == "content_block_stop")
    start1 = [i for i, (n, d) in enumerate(events) if n == "content_block_start"][1]
    assert stop0 < start1


def test_sdk_stream_assembles_final_message(client: anthropic.Anthropic) -> None:
    with client.messages.stream(
        model=MODEL,
        max_tokens=3000,
        thinking={"type": "enabled", "budget_tokens": 1024},
        tools=[TOOL],
        messages=[{"role": "user", "content": "Look it up"}],
    ) as stream:
        texts = [e for e in stream if e.type == "content_block_delta"]
        final = stream.get_final_message()
    assert texts
    thinking, tool_use = final.content
    assert thinking.type == "thinking"
    assert thinking.thinking.startswith("Thinking about: Look it up")
    assert thinking.signature
    assert tool_use.type == "tool_use"
    assert tool_use.input == {"city": "Oslo", "limit": 1}
    assert final.stop_reason == "tool_use"
    assert final.usage.output_tokens_details is not None
    assert final.usage.output_tokens_details.thinking_tokens > 0
    assert final.usage.output_tokens > final.usage.output_tokens_details.thinking_tokens


def test_sdk_text_stream(client: anthropic.Anthropic) -> None:
    with client.messages.stream(
        model=MODEL,
        max_tokens=3000,
        messages=[{"role": "user", "content": "a long answer please"}],
    ) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert len(pieces) > 50
    assert "".join(pieces) == final.content[0].text
    assert final.usage.output_tokens > 200


def test_stream_and_json_usage_match_with_stop_sequence(client: anthropic.Anthropic) -> None:
    kwargs: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 100,
        "stop_sequences": ["to:"],
        "system": [{"type": "text", "text": "Be brief."}],
        "messages": [{"role": "user", "content": "hello"}],
    }
    plain = client.messages.create(**kwargs)
    with client.messages.stream(**kwargs) as stream:
        streamed = stream.get_final_message()
    assert plain.content[0].text == streamed.content[0].text == "Simulated reply "
    assert plain.stop_sequence == streamed.stop_sequence == "to:"
    assert plain.usage.model_dump() == streamed.usage.model_dump()


def test_stream_validation_error_is_plain_json(sim: SimulatorThread) -> None:
    resp = httpx.post(
        f"{sim.url}/v1/messages",
        json={"model": MODEL, "max_tokens": 10, "stream": True, "messages": []},
        headers={"x-api-key": API_KEY},
    )
    assert resp.status_code == 400
    assert resp.headers["content-type"].startswith("application/json")
    assert resp.json()["error"]["type"] == "invalid_request_error"
