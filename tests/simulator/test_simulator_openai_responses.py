"""The OpenAI front's Responses API (POST /v1/responses): replies, reasoning items, tool calls
and previous_response_id, streams (event order, sequence numbers, the SDK's stream helper),
strict refusals, faults."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import orjson
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from simulator.testing import SimulatorThread
from tests.simulator.openai_helpers import error_of, post

API_KEY = "sk-sim-openai-responses"
PATH = "/v1/responses"
TOOL = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    "strict": False,
}
EVENT = TypeAdapter(ResponseStreamEvent)

pytestmark = pytest.mark.usefixtures("reset_sim")


@pytest.fixture
def oai(sim: SimulatorThread) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{sim.url}/v1", api_key=API_KEY, max_retries=0) as client:
        yield client


def _events(sim: SimulatorThread, payload: dict[str, Any]) -> list[dict[str, Any]]:
    response = post(sim, {**payload, "stream": True}, key=API_KEY, path=PATH)
    assert response.status_code == 200, response.text
    out = []
    for block in response.text.split("\n\n"):
        if not block:
            continue
        name, data = block.split("\n")
        event = orjson.loads(data.removeprefix("data: "))
        assert name == f"event: {event['type']}"
        out.append(event)
    return out


def test_text_reply_and_usage(oai: openai.OpenAI) -> None:
    reply = oai.responses.create(model="gpt-sim-mini", input="Hello there", instructions="Be kind")
    assert reply.object == "response"
    assert reply.id.startswith("resp_")
    assert reply.status == "completed"
    assert reply.output_text == "Simulated reply to: Hello there"
    assert [item.type for item in reply.output] == ["message"]
    assert reply.usage is not None
    assert reply.usage.total_tokens == reply.usage.input_tokens + reply.usage.output_tokens
    assert reply.usage.output_tokens_details.reasoning_tokens == 0


def test_reasoning_items(oai: openai.OpenAI) -> None:
    hidden = oai.responses.create(
        model="gpt-sim", input="think", include=["reasoning.encrypted_content"]
    )
    reasoning, message = hidden.output
    assert reasoning.type == "reasoning" and reasoning.id.startswith("rs_")
    assert reasoning.summary == [] and not reasoning.content
    assert reasoning.encrypted_content
    assert message.type == "message"
    assert hidden.usage is not None and hidden.usage.output_tokens_details.reasoning_tokens > 0
    plain = oai.responses.create(model="gpt-sim", input="think")
    assert plain.output[0].type == "reasoning" and plain.output[0].encrypted_content is None
    off = oai.responses.create(model="gpt-sim", input="think", reasoning={"effort": "none"})
    assert [item.type for item in off.output] == ["message"]
    shown = oai.responses.create(model="qwen-sim", input="think")
    assert shown.output[0].type == "reasoning"
    assert shown.output[0].content is not None
    assert shown.output[0].content[0].text.startswith("Thinking about: think")


def test_tool_call_and_previous_response_id(oai: openai.OpenAI) -> None:
    first = oai.responses.create(model="gpt-sim-mini", input="Weather?", tools=[TOOL])  # type: ignore[list-item]
    (call,) = first.output
    assert call.type == "function_call"
    assert call.id is not None and call.id.startswith("fc_")
    assert call.call_id.startswith("call_")
    assert call.arguments == '{"city":"Oslo"}'
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "9 degrees"}
    second = oai.responses.create(
        model="gpt-sim-mini",
        previous_response_id=first.id,
        input=[output],  # type: ignore[list-item]
        tools=[TOOL],  # type: ignore[list-item]
    )
    assert second.output_text == "Tool said: 9 degrees"
    assert second.previous_response_id == first.id
    # Stateless: the whole conversation in the input, as Codex sends it with store false.
    stateless = oai.responses.create(
        model="gpt-sim-mini",
        store=False,
        input=[
            {"role": "user", "content": "Weather?"},
            call.model_dump(exclude_none=True),
            output,
        ],  # type: ignore[list-item]
        tools=[TOOL],  # type: ignore[list-item]
    )
    assert stateless.output_text == "Tool said: 9 degrees"
    with pytest.raises(openai.NotFoundError) as info:
        oai.responses.create(model="gpt-sim-mini", previous_response_id=stateless.id, input="x")
    assert info.value.code == "previous_response_not_found"


def test_stream_events_in_order(sim: SimulatorThread) -> None:
    events = _events(sim, {"model": "gpt-sim", "input": "stream", "tools": [TOOL]})
    for event in events:
        EVENT.validate_python(event)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert events[0]["response"]["output"] == []
    assert kinds[-1] == "response.completed"
    done = Response.model_validate(events[-1]["response"])
    assert [i.type for i in done.output] == ["reasoning", "function_call"]
    call_events = [e for e in events if e.get("output_index") == 1]
    assert call_events[0]["type"] == "response.output_item.added"
    assert call_events[0]["item"]["arguments"] == ""
    deltas = [e["delta"] for e in call_events if e["type"].endswith("arguments.delta")]
    assert "".join(deltas) == '{"city":"Oslo"}'
    assert call_events[-1]["type"] == "response.output_item.done"


def test_stream_text_through_the_sdk_helper(oai: openai.OpenAI) -> None:
    with oai.responses.stream(model="gpt-sim-mini", input="stream me") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == "Simulated reply to: stream me"
    assert final.output_text == "Simulated reply to: stream me"
    assert final.usage is not None and final.usage.output_tokens > 0


def test_cached_input_tokens(oai: openai.OpenAI) -> None:
    long = "You are the simulator. " * 240
    first = oai.responses.create(model="gpt-sim", instructions=long, input="q")
    again = oai.responses.create(model="gpt-sim", instructions=long, input="q")
    assert first.usage is not None and again.usage is not None
    assert first.usage.input_tokens_details.cached_tokens == 0
    cached = again.usage.input_tokens_details.cached_tokens
    assert cached >= 1024 and (cached - 1024) % 128 == 0
    assert again.usage.input_tokens == first.usage.input_tokens  # cached ones included


def test_incomplete_at_max_output_tokens(oai: openai.OpenAI) -> None:
    reply = oai.responses.create(
        model="gpt-sim-mini", input="long answer please", max_output_tokens=16
    )
    assert reply.status == "incomplete"
    assert reply.incomplete_details is not None
    assert reply.incomplete_details.reason == "max_output_tokens"


CHAT_TOOL = {"type": "function", "function": {"name": "f", "parameters": {}}}
CASES: list[tuple[str, dict[str, Any], str, str | None]] = [
    ("unknown field", {"input": "x", "messages": []}, "messages", "unknown_parameter"),
    (
        "chat tool",
        {"input": "x", "tools": [CHAT_TOOL]},
        "tools[0].name",
        "missing_required_parameter",
    ),
    (
        "chat text part",
        {"input": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]},
        "input[0].content[0].type",
        "invalid_value",
    ),
    (
        "anthropic tool_result",
        {"input": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]}]},
        "input[0].content[0].type",
        "invalid_value",
    ),
    (
        "cache_control",
        {
            "input": [
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "x", "cache_control": {"type": "ephemeral"}}
                    ],
                }
            ]
        },
        "input[0].content[0].cache_control",
        "unknown_parameter",
    ),
    (
        "output answering nothing",
        {"input": [{"type": "function_call_output", "call_id": "call_1", "output": "x"}]},
        "input",
        None,
    ),
    (
        "call without output",
        {"input": [{"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}]},
        "input",
        None,
    ),
    (
        "tiny cap",
        {"input": "x", "max_output_tokens": 5},
        "max_output_tokens",
        "integer_below_min_value",
    ),
    ("no input", {}, "input", "missing_required_parameter"),
    (
        "unknown tool type",
        {"input": "x", "tools": [{"type": "bash"}]},
        "tools[0].type",
        "invalid_value",
    ),
    (
        "hosted tool in a namespace",
        {
            "input": "x",
            "tools": [
                {
                    "type": "namespace",
                    "name": "ns",
                    "description": "d",
                    "tools": [{"type": "web_search"}],
                }
            ],
        },
        "tools[0].tools[0].type",
        "invalid_value",
    ),
    (
        "unknown key of a custom tool",
        {"input": "x", "tools": [{"type": "custom", "name": "p", "parameters": {}}]},
        "tools[0].parameters",
        "unknown_parameter",
    ),
]


def test_every_tool_type_of_the_api_is_taken(sim: SimulatorThread) -> None:
    """What Codex and the Agents SDK send (openai-python `types/responses/tool_param.py`):
    function, custom and namespace tools and the hosted ones, which the API runs itself."""
    tools = [
        {"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": None,
         "defer_loading": False},
        {"type": "custom", "name": "apply_patch", "description": "d",
         "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}},
        {"type": "namespace", "name": "ns", "description": "d",
         "tools": [{"type": "function", "name": "g", "parameters": {"type": "object"}}]},
        {"type": "web_search"},
        {"type": "tool_search", "execution": "client"},
    ]  # fmt: skip
    body = {
        "model": "gpt-sim",
        "input": "x",
        "tools": tools,
        "tool_choice": {"type": "function", "name": "ns__g"},
    }
    response = post(sim, body, key=API_KEY, path=PATH)
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    ("payload", "param", "code"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_refusals_name_their_param(
    sim: SimulatorThread, payload: dict[str, Any], param: str, code: str | None
) -> None:
    error = error_of(post(sim, {"model": "gpt-sim", **payload}, key=API_KEY, path=PATH), 400)
    assert (error["param"], error["code"]) == (param, code), error["message"]


def test_reasoning_effort_on_a_model_without_reasoning(sim: SimulatorThread) -> None:
    payload = {"model": "gpt-sim-mini", "input": "x", "reasoning": {"effort": "low"}}
    error = error_of(post(sim, payload, key=API_KEY, path=PATH), 400)
    assert (error["param"], error["code"]) == ("reasoning.effort", "unsupported_parameter")


def test_auth_and_faults(sim: SimulatorThread) -> None:
    assert post(sim, {"model": "gpt-sim", "input": "x"}, key="wrong", path=PATH).status_code == 401
    sim.script({"path": "responses", "status": 429})
    error = error_of(post(sim, {"model": "gpt-sim", "input": "x"}, key=API_KEY, path=PATH), 429)
    assert error["code"] == "rate_limit_exceeded"
    sim.script({"path": "responses", "error_after_events": 3})
    events = _events(sim, {"model": "gpt-sim-mini", "input": "x"})
    assert [e["type"] for e in events][-2:] == ["error", "response.failed"]
    assert events[-2]["error"]["type"] == "server_error"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["response"]["status"] == "failed"
