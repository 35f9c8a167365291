"""providers.md §7 pitfalls on an OpenAI-kind model, end to end with the official SDKs (Claude
Code's wire: the anthropic SDK; and the openai SDK on the relay): long MCP tool names round-trip
(item 10), and a provider account out of quota fails over, rests, and is never retried by the
clients (item 14). docs/providers.md, "Pitfalls, and what EZAT does"."""

from __future__ import annotations

import re
from typing import Any

import anthropic
import openai
import pytest
from anthropic.types import Message

from gateway.providers.openai.request import chat_tool_name
from tests.support.openai_lab import OpenAILab, make_openai_lab
from tests.support.stack import Stack

pytestmark = pytest.mark.e2e

MCP = "mcp__claude_in_chrome_browser_automation__read_the_console_messages_of_a_tab"
TOOL = {
    "name": MCP,
    "description": "Read a tab's console messages",
    "input_schema": {
        "type": "object",
        "properties": {"tab_id": {"type": "integer"}},
        "required": ["tab_id"],
    },
}
OPENAI_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
QUOTA = {"path": "chat_completions", "status": 429, "type": "billing_error"}


@pytest.fixture(scope="module")
def lab(stack: Stack) -> OpenAILab:
    return make_openai_lab(stack)


def _client(lab: OpenAILab, e2e: Stack, retries: int = 0) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key=lab.key.secret, base_url=e2e.url, max_retries=retries)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_long_mcp_tool_name_round_trips(lab: OpenAILab, e2e: Stack, stream: bool) -> None:
    client = _client(lab, e2e)
    turn: dict[str, Any] = {
        "model": lab.model,
        "max_tokens": 200,
        "tools": [TOOL],
        "messages": [{"role": "user", "content": "read the console"}],
    }
    if stream:
        with client.messages.stream(**turn) as events:
            message = events.get_final_message()
    else:
        message = client.messages.create(**turn)
    Message.model_validate(message.model_dump())
    call = next(b for b in message.content if b.type == "tool_use")
    assert call.name == MCP  # the client's own name, whatever the provider was told
    assert message.stop_reason == "tool_use"
    sent = lab.chat_requests()[-1]
    assert sent["status"] == "200"
    short = sent["body"]["tools"][0]["function"]["name"]
    assert short == chat_tool_name(MCP) and OPENAI_NAME.match(short) and short != MCP
    # The next turn sends the call back under the client's name: the provider gets its own.
    history = [
        *turn["messages"],
        {"role": "assistant", "content": [b.model_dump() for b in message.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "no errors"}],
        },
    ]
    done = client.messages.create(**{**turn, "messages": history})
    assert done.stop_reason == "end_turn"
    again = lab.chat_requests()[-1]
    assert again["status"] == "200"
    calls = next(m for m in again["body"]["messages"] if m.get("tool_calls"))["tool_calls"]
    assert calls[0]["function"]["name"] == short and calls[0]["id"] == call.id


def test_a_provider_quota_fails_over_and_the_deployment_rests(stack: Stack, e2e: Stack) -> None:
    """Two deployments (two provider accounts); the one answering as gpt-sim is out of quota.
    The first request it gets fails over to the other; from then on it is not tried at all
    (one failure cools it down at once, for EZAT_QUOTA_COOLDOWN_SECONDS), even for the
    conversation whose own deployment it is."""
    twin = make_openai_lab(stack, server_models=("gpt-sim", "gpt-sim-mini"))
    e2e.sim.script({**QUOTA, "match": '"model":"gpt-sim"', "times": -1})
    client = _client(twin, e2e)
    try:
        session = None
        for n in range(40):
            before = len(twin.chat_requests())
            reply = client.messages.create(
                model=twin.model,
                max_tokens=30,
                messages=[{"role": "user", "content": "hi"}],
                extra_headers={"x-ezat-session": f"quota-{n}"},
            )
            assert reply.content
            tried = [(r["body"]["model"], r["status"]) for r in twin.chat_requests()[before:]]
            if tried[0][0] == "gpt-sim":
                assert tried == [("gpt-sim", "429"), ("gpt-sim-mini", "200")]
                session = f"quota-{n}"
                break
            assert tried == [("gpt-sim-mini", "200")]
        assert session is not None, "no session was placed on the gpt-sim deployment"
        for _ in range(3):
            before = len(twin.chat_requests())
            client.messages.create(
                model=twin.model,
                max_tokens=30,
                messages=[{"role": "user", "content": "hi"}],
                extra_headers={"x-ezat-session": session},
            )
            tried = [(r["body"]["model"], r["status"]) for r in twin.chat_requests()[before:]]
            assert tried == [("gpt-sim-mini", "200")]  # resting, not retried
    finally:
        e2e.sim.clear_script()


def test_no_quota_left_anywhere_is_a_503_the_sdks_do_not_retry(stack: Stack, e2e: Stack) -> None:
    alone = make_openai_lab(stack)
    e2e.sim.script({**QUOTA, "times": 4})
    try:
        with pytest.raises(anthropic.InternalServerError) as raised:
            _client(alone, e2e, retries=2).messages.create(
                model=alone.model, max_tokens=30, messages=[{"role": "user", "content": "hi"}]
            )
        error = raised.value
        assert error.status_code == 503
        assert error.response.headers["x-should-retry"] == "false"
        assert error.body["error"]["type"] == "api_error"  # type: ignore[index]
        assert "quota" in error.message and "billing details" not in error.message
        assert len(alone.chat_requests()) == 1  # neither the gateway nor the SDK retried
        # The same on the OpenAI API (Chat Completions relayed), with the code to tell it apart.
        api = openai.OpenAI(
            api_key=alone.key.secret, base_url=e2e.url + "/openai/v1", max_retries=2
        )
        with pytest.raises(openai.InternalServerError) as relayed:
            api.chat.completions.create(
                model=alone.model, messages=[{"role": "user", "content": "hi"}]
            )
        assert relayed.value.status_code == 503
        assert relayed.value.code == "upstream_quota_exhausted"
        assert len(alone.chat_requests()) == 2
    finally:
        e2e.sim.clear_script()
