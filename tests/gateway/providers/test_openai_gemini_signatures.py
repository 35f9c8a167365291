"""Claude Code's tool loop on Gemini 3 behind its OpenAI-compatible endpoint: the thought
signature Gemini puts on a tool call comes back to it on the next turn, or Gemini refuses the
turn (gateway/providers/openai/signatures.py; the simulator's `gemini-3-sim` is as strict,
simulator/openai_signatures.py). Driven with the anthropic and openai SDKs, answers validated
against their types."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest
from anthropic.types import Message
from openai.types.responses import Response

from simulator.openai_signatures import SKIP, signature_for
from tests.support.openai_lab import OpenAILab, make_openai_lab
from tests.support.stack import Stack

pytestmark = pytest.mark.e2e

TOOL = {
    "name": "Bash",
    "description": "Run a command",
    "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
}


@pytest.fixture(scope="module")
def gemini(stack: Stack) -> OpenAILab:
    return make_openai_lab(stack, server_model="gemini-3-sim")


@pytest.fixture
def client(gemini: OpenAILab, e2e: Stack) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key=gemini.key.secret, base_url=e2e.url, max_retries=0)


def _first_turn(client: anthropic.Anthropic, lab: OpenAILab, *, stream: bool) -> Message:
    request: dict[str, Any] = {
        "model": lab.model,
        "max_tokens": 200,
        "tools": [TOOL],
        "tool_choice": {"type": "any"},
        "messages": [{"role": "user", "content": "list the files"}],
    }
    if stream:
        with client.messages.stream(**request) as events:
            message = events.get_final_message()
    else:
        message = client.messages.create(**request)
    Message.model_validate(message.model_dump())
    return message


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_the_signature_comes_back_with_the_tool_result(
    gemini: OpenAILab, client: anthropic.Anthropic, stream: bool
) -> None:
    first = _first_turn(client, gemini, stream=stream)
    call = first.content[-1]
    assert call.type == "tool_use" and call.name == "Bash"
    provider_call = gemini.chat_requests()[-1]
    second = client.messages.create(
        model=gemini.model,
        max_tokens=200,
        tools=[TOOL],
        messages=[
            {"role": "user", "content": "list the files"},
            {"role": "assistant", "content": [c.model_dump() for c in first.content]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "a b"}],
            },
        ],
    )
    Message.model_validate(second.model_dump())
    assert second.stop_reason == "end_turn"
    history = gemini.chat_requests()[-1]["body"]["messages"]
    assert history is not provider_call["body"]["messages"]
    replayed = history[1]["tool_calls"][0]
    # The provider's own id went back, with the very signature it gave for it.
    assert not replayed["id"].count("__sig_")
    assert replayed["extra_content"] == {
        "google": {"thought_signature": signature_for(replayed["id"])}
    }
    assert history[2] == {"role": "tool", "tool_call_id": replayed["id"], "content": "a b"}


def test_a_tool_call_from_another_model_goes_with_the_placeholder(
    gemini: OpenAILab, client: anthropic.Anthropic
) -> None:
    """A conversation whose tool call Claude made (no Gemini signature) continues on Gemini."""
    claude_call = {"type": "tool_use", "id": "toolu_01A", "name": "Bash", "input": {}}
    answer = client.messages.create(
        model=gemini.model,
        max_tokens=200,
        tools=[TOOL],
        messages=[
            {"role": "user", "content": "list the files"},
            {"role": "assistant", "content": [claude_call]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_01A", "content": "a"}],
            },
        ],
    )
    assert answer.stop_reason == "end_turn"
    replayed = gemini.chat_requests()[-1]["body"]["messages"][1]["tool_calls"][0]
    assert replayed["extra_content"] == {"google": {"thought_signature": SKIP}}


def test_a_signature_lost_on_the_way_is_gemini_refusing_the_turn(
    gemini: OpenAILab, client: anthropic.Anthropic
) -> None:
    """What the placeholder and the carried signature prevent: the simulator refuses a current
    turn with a forged signature, as Gemini does, and the client gets a 400 saying so."""
    forged = "call_1__sig_" + "A" * 40
    with pytest.raises(anthropic.BadRequestError) as raised:
        client.messages.create(
            model=gemini.model,
            max_tokens=200,
            tools=[TOOL],
            messages=[
                {"role": "user", "content": "list the files"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": forged, "name": "Bash", "input": {}}],
                },
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": forged, "content": "a"}],
                },
            ],
        )
    assert "thought signature" in raised.value.message


def test_codex_on_gemini_through_the_responses_api(gemini: OpenAILab, e2e: Stack) -> None:
    """The Responses API, translated: the function call's call_id carries the signature back."""
    client = openai.OpenAI(
        api_key=gemini.key.secret, base_url=e2e.url + "/openai/v1", max_retries=0
    )
    tool = {
        "type": "function",
        "name": "Bash",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
    }
    first = client.responses.create(
        model=gemini.model,
        input="list the files",
        tools=[tool],
        tool_choice="required",
        store=False,
    )
    Response.model_validate(first.model_dump())
    call = next(item for item in first.output if item.type == "function_call")
    second = client.responses.create(
        model=gemini.model,
        tools=[tool],
        store=False,
        input=[
            {"role": "user", "content": "list the files"},
            {
                "type": "function_call",
                "call_id": call.call_id,
                "name": call.name,
                "arguments": call.arguments,
            },
            {"type": "function_call_output", "call_id": call.call_id, "output": "a b"},
        ],
    )
    Response.model_validate(second.model_dump())
    assert second.status == "completed"
    replayed = gemini.chat_requests()[-1]["body"]["messages"][1]["tool_calls"][0]
    assert replayed["extra_content"]["google"]["thought_signature"] == signature_for(replayed["id"])
