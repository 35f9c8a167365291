"""The tools Codex CLI and the OpenAI Agents SDK send by default, through the openai SDK against
the running gateway (issue 32, item 1): a custom tool (Codex's apply_patch) and a namespaced
function are called and answered round the loop, whole and streamed; hosted web search is
dropped with `x-ezat-dropped-tools`; other hosted tools are a 400 naming them. Every answer is
parsed by the SDK's own types (strictly, with `model_validate`)."""

from __future__ import annotations

from typing import Any

import openai
import openai.types.responses as rt
import pytest
from openai import OpenAI
from pydantic import TypeAdapter

from tests.support.chat_support import upstream, upstream_records
from tests.support.responses_support import SONNET, events, stream_raw
from tests.support.stack import Key, Stack

pytestmark = pytest.mark.e2e

EVENT = TypeAdapter(rt.ResponseStreamEvent)
PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hi\n*** End Patch\n"
APPLY_PATCH: dict[str, Any] = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Use the `apply_patch` tool to edit files.",
    "format": {"type": "grammar", "syntax": "lark", "definition": 'start: "*** Begin Patch"'},
}
AGENTS: dict[str, Any] = {
    "type": "namespace",
    "name": "agents",
    "description": "Sub-agents.",
    "tools": [
        {
            "type": "function",
            "name": "spawn",
            "description": "Start a sub-agent.",
            "parameters": {
                "type": "object",
                "properties": {"task": {"type": "string"}},
                "required": ["task"],
            },
            "strict": False,
        }
    ],
}
TOOLS = [APPLY_PATCH, AGENTS, {"type": "web_search"}]


def client(e2e: Stack, key: Key) -> OpenAI:
    return OpenAI(base_url=e2e.url + "/openai/v1", api_key=key.secret, max_retries=0)


def script_call(e2e: Stack, name: str, tool_input: dict[str, Any]) -> None:
    e2e.sim.script(
        {
            "reply": {
                "content": [
                    {"type": "tool_use", "id": "toolu_1", "name": name, "input": tool_input}
                ],
                "stop_reason": "tool_use",
            }
        }
    )


def test_custom_tool_round_trip_with_the_sdk(e2e: Stack) -> None:
    key = e2e.new_key()
    oai = client(e2e, key)
    script_call(e2e, "apply_patch", {"input": PATCH})
    raw = oai.responses.with_raw_response.create(
        model=SONNET, input="create hello.txt", tools=TOOLS, store=False
    )
    assert raw.headers["x-ezat-dropped-tools"] == "web_search"
    first = rt.Response.model_validate(raw.parse().model_dump(mode="json"))
    [call] = first.output
    assert isinstance(call, rt.ResponseCustomToolCall)
    assert (call.name, call.input, call.call_id) == ("apply_patch", PATCH, "toolu_1")
    sent = upstream(e2e)
    assert [t["name"] for t in sent["tools"]] == ["apply_patch", "agents__spawn"]  # no web search
    items: list[Any] = [
        {"role": "user", "content": "create hello.txt"},
        call.model_dump(exclude_none=True),
        {"type": "custom_tool_call_output", "call_id": call.call_id, "output": "Done!"},
    ]
    second = oai.responses.create(model=SONNET, input=items, tools=TOOLS, store=False)
    assert second.output_text == "Tool said: Done!"
    replayed = upstream(e2e)["messages"]
    assert replayed[1]["content"] == [
        {"type": "tool_use", "id": "toolu_1", "name": "apply_patch", "input": {"input": PATCH}}
    ]
    assert replayed[2]["content"][0]["tool_use_id"] == "toolu_1"


def test_custom_tool_streamed_with_the_sdk_helper(e2e: Stack) -> None:
    key = e2e.new_key()
    script_call(e2e, "apply_patch", {"input": PATCH})
    seen: list[str] = []
    with client(e2e, key).responses.stream(
        model=SONNET, input="create hello.txt", tools=TOOLS, store=False
    ) as stream:
        for event in stream:
            seen.append(event.type)
        final = stream.get_final_response()
    assert "response.custom_tool_call_input.delta" in seen
    assert "response.custom_tool_call_input.done" in seen
    [call] = final.output
    assert isinstance(call, rt.ResponseCustomToolCall) and call.input == PATCH


def test_namespaced_call_streamed_raw_events_hold_the_sdk_types(e2e: Stack) -> None:
    key = e2e.new_key()
    script_call(e2e, "agents__spawn", {"task": "write tests"})
    got = stream_raw(e2e, key, {"model": SONNET, "input": "delegate", "tools": TOOLS})
    assert got.status == 200 and got.headers["x-ezat-dropped-tools"] == "web_search"
    evs = events(got)
    for event in evs:
        EVENT.validate_python(event)
    completed = rt.ResponseCompletedEvent.model_validate(evs[-1])
    [call] = completed.response.output
    assert isinstance(call, rt.ResponseFunctionToolCall)
    assert (call.name, call.namespace, call.arguments) == (
        "spawn",
        "agents",
        '{"task":"write tests"}',
    )
    # The function_call_output goes round the loop (here through previous_response_id).
    second = client(e2e, key).responses.create(
        model=SONNET,
        previous_response_id=completed.response.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "spawned"}],
        tools=TOOLS,
    )
    assert second.output_text == "Tool said: spawned"
    assert upstream(e2e)["messages"][1]["content"][0]["name"] == "agents__spawn"


def test_agents_sdk_web_search_tool_shape_is_dropped_and_other_hosted_tools_refused(
    e2e: Stack,
) -> None:
    key = e2e.new_key()
    oai = client(e2e, key)
    raw = oai.responses.with_raw_response.create(
        model=SONNET, input="news?", tools=[{"type": "web_search_preview"}]
    )
    assert raw.headers["x-ezat-dropped-tools"] == "web_search"
    assert "tools" not in upstream(e2e)
    plain = oai.responses.with_raw_response.create(model=SONNET, input="hi")
    assert "x-ezat-dropped-tools" not in plain.headers
    before = len(upstream_records(e2e))
    with pytest.raises(openai.BadRequestError) as info:
        oai.responses.create(model=SONNET, input="hi", tools=[{"type": "code_interpreter"}])
    body = info.value.body
    assert isinstance(body, dict) and body["param"] == "tools[0].type"
    assert "code_interpreter" in body["message"]
    assert len(upstream_records(e2e)) == before
