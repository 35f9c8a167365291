"""The Messages API on an OpenAI-kind model (issue 30, contract items 4, 6, 8, 9): Claude Code's
wire, translated to Chat Completions and back. Driven with the official anthropic SDK, answers
validated against its types; what reached the provider read off the simulator."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import pytest
from anthropic.types import Message

from tests.support.limits_billing_support import records_by_request
from tests.support.openai_lab import OpenAILab, make_openai_lab
from tests.support.stack import Stack
from tests.waiting import wait_for

pytestmark = pytest.mark.e2e

TOOL = {
    "name": "write_file",
    "description": "Write a file",
    "input_schema": {
        "type": "object",
        "properties": {"path": {"type": "string"}, "text": {"type": "string"}},
        "required": ["path", "text"],
    },
}


@pytest.fixture(scope="module")
def lab(stack: Stack) -> OpenAILab:
    return make_openai_lab(stack)


@pytest.fixture(scope="module")
def qwen(stack: Stack) -> OpenAILab:
    """A vLLM-style model that streams its reasoning as `reasoning_content`."""
    return make_openai_lab(stack, server_model="qwen-sim")


@pytest.fixture
def client(lab: OpenAILab, e2e: Stack) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key=lab.key.secret, base_url=e2e.url, max_retries=0)


def record(stack: Stack, request_id: str) -> Any:
    return wait_for(
        lambda: records_by_request(stack, [request_id]).get(request_id),
        what=f"the usage record of {request_id}",
    )


def test_a_text_turn_is_translated_both_ways(lab: OpenAILab, client: anthropic.Anthropic) -> None:
    raw = client.messages.with_raw_response.create(
        model=lab.model,
        max_tokens=300,
        system=[{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
        messages=[{"role": "user", "content": "hello"}],
        stop_sequences=["###"],
        extra_body={"temperature": 0.2},
    )
    message = raw.parse()
    Message.model_validate(message.model_dump())
    assert message.model == lab.model and message.stop_reason == "end_turn"
    assert message.content[0].type == "text" and message.content[0].text
    sent = lab.chat_requests()[-1]["body"]
    assert sent["model"] == lab.server_model
    assert sent["messages"][0] == {"role": "system", "content": "be brief"}
    assert sent["stop"] == ["###"] and sent["max_completion_tokens"] == 300
    assert "cache_control" not in json.dumps(sent)
    rec = record(lab.stack, raw.headers["x-request-id"])
    assert rec.input_tokens == message.usage.input_tokens
    assert rec.output_tokens == message.usage.output_tokens
    assert rec.cache_read_tokens == (message.usage.cache_read_input_tokens or 0)
    assert lab.messages_requests() == []  # nothing went to a Messages API


def test_tools_round_trip_with_ids_kept(
    lab: OpenAILab, e2e: Stack, client: anthropic.Anthropic
) -> None:
    e2e.sim.script(
        {
            "path": "chat_completions",
            "reply": {
                "content": [
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "write_file",
                        "input": {"path": "a", "text": "hi"},
                    }
                ],
                "stop_reason": "tool_use",
            },
        }
    )
    first = client.messages.create(
        model=lab.model,
        max_tokens=200,
        tools=[TOOL],
        tool_choice={"type": "any"},
        messages=[{"role": "user", "content": "write hi to a"}],
    )
    assert first.stop_reason == "tool_use"
    call = first.content[-1]
    assert call.type == "tool_use" and call.name == "write_file"
    assert call.input == {"path": "a", "text": "hi"}
    sent = lab.chat_requests()[-1]["body"]
    assert sent["tool_choice"] == "required"
    assert sent["tools"][0]["function"]["name"] == "write_file"
    second = client.messages.create(
        model=lab.model,
        max_tokens=200,
        tools=[TOOL],
        messages=[
            {"role": "user", "content": "write hi to a"},
            {"role": "assistant", "content": [c.model_dump() for c in first.content]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "done"}],
            },
        ],
    )
    assert second.stop_reason == "end_turn"
    history = lab.chat_requests()[-1]["body"]["messages"]
    assert history[1]["tool_calls"][0]["id"] == call.id
    assert history[2] == {"role": "tool", "tool_call_id": call.id, "content": "done"}


def test_a_streamed_tool_call_arrives_as_input_json_deltas(
    lab: OpenAILab, e2e: Stack, client: anthropic.Anthropic
) -> None:
    e2e.sim.script(
        {
            "path": "chat_completions",
            "reply": {
                "content": [
                    {"type": "text", "text": "writing it"},
                    {
                        "type": "tool_use",
                        "id": "toolu_2",
                        "name": "write_file",
                        "input": {"path": "b", "text": "x" * 50},
                    },
                ],
                "stop_reason": "tool_use",
            },
        }
    )
    with client.messages.stream(
        model=lab.model, max_tokens=200, tools=[TOOL], messages=[{"role": "user", "content": "go"}]
    ) as stream:
        kinds = [event.type for event in stream]
        message = stream.get_final_message()
    Message.model_validate(message.model_dump())
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "input_json" in kinds
    assert [b.type for b in message.content] == ["text", "tool_use"]
    assert message.content[1].input == {"path": "b", "text": "x" * 50}
    assert message.stop_reason == "tool_use"
    assert message.usage.output_tokens > 0


def test_reasoning_becomes_a_thinking_block_that_comes_back_unforwarded(
    qwen: OpenAILab, e2e: Stack
) -> None:
    client = anthropic.Anthropic(api_key=qwen.key.secret, base_url=e2e.url, max_retries=0)
    with client.messages.stream(
        model=qwen.model,
        max_tokens=2000,
        thinking={"type": "enabled", "budget_tokens": 1024},
        messages=[{"role": "user", "content": "think about it"}],
    ) as stream:
        message = stream.get_final_message()
    assert message.content[0].type == "thinking" and message.content[0].thinking
    assert qwen.chat_requests()[-1]["body"]["reasoning_effort"] == "low"
    # Sent back on the next turn: accepted, and never forwarded to the provider.
    again = client.messages.create(
        model=qwen.model,
        max_tokens=2000,
        thinking={"type": "enabled", "budget_tokens": 1024},
        messages=[
            {"role": "user", "content": "think about it"},
            {"role": "assistant", "content": [b.model_dump() for b in message.content]},
            {"role": "user", "content": "and now?"},
        ],
    )
    assert again.content
    sent = json.dumps(qwen.chat_requests()[-1]["body"])
    assert "thinking" not in sent and "signature" not in sent
    # The same conversation moved to Claude: the gateway's block is dropped there too (Claude
    # would refuse a signature it did not make).
    history = [
        {"role": "user", "content": "think about it"},
        {"role": "assistant", "content": [b.model_dump() for b in message.content]},
        {"role": "user", "content": "and now?"},
    ]
    claude = client.messages.create(
        model="anthropic/claude-sonnet-5-5", max_tokens=2000, messages=history
    )
    assert claude.content
    to_claude = [r for r in e2e.sim.requests() if r["path"] == "/v1/messages"][-1]["body"]
    assert "ezat.reasoning" not in json.dumps(to_claude)


def test_count_tokens_is_counted_here_and_free(lab: OpenAILab, client: anthropic.Anthropic) -> None:
    before = len(lab.stack.sim.requests())
    counted = client.messages.count_tokens(
        model=lab.model, messages=[{"role": "user", "content": "hello world, how are you?"}]
    )
    assert 5 <= counted.input_tokens <= 40
    assert len(lab.stack.sim.requests()) == before  # no upstream call


@pytest.mark.parametrize(
    ("fault", "status", "error_type"),
    [
        ({"status": 429, "retry_after": 7}, 429, "rate_limit_error"),
        ({"status": 500}, 529, "overloaded_error"),
        ({"status": 400, "code": "context_length_exceeded"}, 400, "invalid_request_error"),
    ],
)
def test_provider_errors_become_the_anthropic_envelope(
    lab: OpenAILab, e2e: Stack, fault: dict[str, Any], status: int, error_type: str
) -> None:
    # Enough faults for every retry the exchange may make on the one deployment.
    e2e.sim.script(*({"path": "chat_completions", **fault} for _ in range(4)))
    response = httpx.post(
        e2e.url + "/v1/messages",
        headers={"x-api-key": lab.key.secret, "anthropic-version": "2023-06-01"},
        json={"model": lab.model, "max_tokens": 50, "messages": [{"role": "user", "content": "x"}]},
        timeout=60,
    )
    e2e.sim.clear_script()
    assert response.status_code == status, response.text
    assert response.json()["error"]["type"] == error_type
    if status == 429:
        assert response.headers["retry-after"] == "7"
    assert "sk-sim" not in response.text  # the provider's key never reaches a client


def test_a_5xx_fails_over_to_the_models_other_deployment(stack: Stack, e2e: Stack) -> None:
    twin = make_openai_lab(stack, deployments=2)
    e2e.sim.script({"path": "chat_completions", "status": 503})
    client = anthropic.Anthropic(api_key=twin.key.secret, base_url=e2e.url, max_retries=0)
    message = client.messages.create(
        model=twin.model, max_tokens=50, messages=[{"role": "user", "content": "hi"}]
    )
    assert message.content
    assert len(twin.chat_requests()) == 2  # the refused attempt and the one that answered


def test_an_untranslatable_part_is_a_400_naming_it(
    lab: OpenAILab, client: anthropic.Anthropic
) -> None:
    with pytest.raises(anthropic.BadRequestError) as raised:
        client.messages.create(
            model=lab.model,
            max_tokens=50,
            tools=[{"type": "web_search_20250305", "name": "web_search"}],
            messages=[{"role": "user", "content": "x"}],
        )
    assert "tools" in raised.value.message
