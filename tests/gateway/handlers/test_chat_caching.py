"""Automatic prompt caching on the chat API: where the gateway puts breakpoints, when it puts
none (caller's own markers, `x-ezat-cache: off`, models without caching), and prompt_cache_key."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.support.chat_support import (
    HAIKU,
    SONNET,
    TIME_TOOL,
    WEATHER_TOOL,
    cache_markers,
    client,
    error_of,
    upstream,
    upstream_records,
)
from tests.support.stack import Key, Stack

pytestmark = pytest.mark.e2e

EPHEMERAL = {"type": "ephemeral"}
SYSTEM = {"role": "system", "content": "You are terse."}
DEVELOPER = {"role": "developer", "content": "Use metric units."}
CONVERSATION = [
    {"role": "user", "content": "Weather in Oslo?"},
    {"role": "assistant", "content": "Which day?"},
    {"role": "user", "content": [{"type": "text", "text": "Today"}, {"type": "text", "text": "!"}]},
]


def send(e2e: Stack, key: Key | None = None, **kwargs: Any) -> dict[str, Any]:
    kwargs.setdefault("model", SONNET)
    kwargs.setdefault("max_tokens", 50)
    client(e2e, key or e2e.new_key()).chat.completions.create(**kwargs)
    return upstream(e2e)


def markers_of(body: dict[str, Any]) -> dict[str, Any]:
    """{JSON path: cache_control} for every breakpoint in an upstream body."""
    found = {}
    for path in cache_markers(body):
        node: Any = body
        for part in path.replace("[", ".").replace("]", "").split("."):
            node = node[int(part)] if part.isdigit() else node[part]
        found[path] = node["cache_control"]
    return found


@pytest.mark.parametrize(
    ("prefix", "tools", "markers"),
    [
        # The system prompt ends the stable prefix (after tools, which come first).
        ([SYSTEM, DEVELOPER], [WEATHER_TOOL], ["system[1]", "messages[2].content[1]"]),
        ([SYSTEM], [], ["system[0]", "messages[2].content[1]"]),
        # No system prompt: the tools end it.
        ([], [WEATHER_TOOL, TIME_TOOL], ["tools[1]", "messages[2].content[1]"]),
        # Nothing stable before the messages: only the newest message is marked.
        ([], [], ["messages[2].content[1]"]),
    ],
    ids=["system+tools", "system", "tools", "messages-only"],
)
def test_automatic_breakpoints(
    e2e: Stack, prefix: list[dict[str, Any]], tools: list[dict[str, Any]], markers: list[str]
) -> None:
    extra = {"tools": tools, "tool_choice": "none"} if tools else {}
    body = send(e2e, messages=[*prefix, *CONVERSATION], **extra)
    # 5-minute breakpoints: the default ephemeral marker, no ttl.
    assert markers_of(body) == dict.fromkeys(markers, EPHEMERAL)


def test_breakpoint_lands_on_a_trailing_tool_result(e2e: Stack) -> None:
    body = send(
        e2e,
        tools=[WEATHER_TOOL],
        messages=[
            SYSTEM,
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": "{}"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        ],
    )
    assert markers_of(body) == dict.fromkeys(["system[0]", "messages[2].content[0]"], EPHEMERAL)
    assert body["messages"][2]["content"][0]["type"] == "tool_result"


def test_next_turn_moves_the_message_breakpoint(e2e: Stack) -> None:
    key = e2e.new_key()
    api = client(e2e, key)
    messages: list[Any] = [SYSTEM, {"role": "user", "content": "Hello"}]
    first = api.chat.completions.create(model=SONNET, max_tokens=50, messages=messages)
    messages += [first.choices[0].message, {"role": "user", "content": "More please"}]
    second = api.chat.completions.create(model=SONNET, max_tokens=50, messages=messages)
    # Still exactly two: the earlier message's marker is not carried along.
    assert set(cache_markers(upstream(e2e))) == {"system[0]", "messages[2].content[0]"}
    assert second.usage.prompt_tokens_details.cached_tokens == first.usage.prompt_tokens


# -- the caller's own breakpoints ---------------------------------------------------------------


def cached_text(text: str, **marker: Any) -> dict[str, Any]:
    return {"type": "text", "text": text, "cache_control": {"type": "ephemeral", **marker}}


@pytest.mark.parametrize(
    ("messages", "tools", "markers"),
    [
        (
            [{"role": "user", "content": [cached_text("Long document", ttl="1h")]}],
            None,
            {"messages[0].content[0]": {"type": "ephemeral", "ttl": "1h"}},
        ),
        (
            [
                {"role": "system", "content": [cached_text("Be terse.")]},
                {"role": "user", "content": "hi"},
            ],
            None,
            {"system[0]": EPHEMERAL},
        ),
        (
            [{"role": "user", "content": "hi"}],
            [{**WEATHER_TOOL, "cache_control": EPHEMERAL}, TIME_TOOL],  # OpenRouter style
            {"tools[0]": EPHEMERAL},
        ),
        (
            [{"role": "user", "content": "hi"}],
            [
                WEATHER_TOOL,
                {**TIME_TOOL, "function": {**TIME_TOOL["function"], "cache_control": EPHEMERAL}},
            ],  # LiteLLM style
            {"tools[1]": EPHEMERAL},
        ),
        (
            [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image_url",
                            "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="},
                            "cache_control": EPHEMERAL,
                        },
                        {
                            "type": "file",
                            "file": {"file_data": "data:application/pdf;base64,JVBERi0="},
                            "cache_control": EPHEMERAL,
                        },
                        {"type": "text", "text": "Compare them"},
                    ],
                }
            ],
            None,
            {"messages[0].content[0]": EPHEMERAL, "messages[0].content[1]": EPHEMERAL},
        ),
    ],
    ids=["text-1h", "system-part", "tool", "function", "image+file"],
)
def test_caller_breakpoints_left_alone_and_none_added(
    e2e: Stack,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    markers: dict[str, Any],
) -> None:
    extra = {"tools": tools, "tool_choice": "none"} if tools else {}
    body = send(e2e, messages=[SYSTEM, *messages] if tools else messages, **extra)
    assert markers_of(body) == markers


def test_more_than_four_caller_breakpoints_is_400(e2e: Stack) -> None:
    key = e2e.new_key()
    parts = [cached_text(f"part {i}") for i in range(5)]
    with pytest.raises(openai.BadRequestError) as raised:
        client(e2e, key).chat.completions.create(
            model=SONNET, messages=[{"role": "user", "content": parts}]
        )
    assert error_of(raised.value)["param"] == "messages[0].content[4].cache_control"
    assert upstream_records(e2e) == []


# -- no caching ---------------------------------------------------------------------------------


def test_header_off_sends_no_breakpoints(e2e: Stack) -> None:
    key = e2e.new_key()
    completion = client(e2e, key).chat.completions.create(
        model=SONNET,
        max_tokens=50,
        tools=[WEATHER_TOOL],
        tool_choice="none",
        messages=[SYSTEM, *CONVERSATION],
        extra_headers={"x-ezat-cache": "off"},
    )
    assert cache_markers(upstream(e2e)) == []
    assert completion.usage.prompt_tokens_details.cache_write_tokens == 0
    (record,) = e2e.usage(org_id=key.org_id)
    assert record.cache_write_5m_tokens == 0 and record.cache_read_tokens == 0


@pytest.mark.parametrize("caller_marker", [False, True])
def test_model_without_caching_gets_no_breakpoints(e2e: Stack, caller_marker: bool) -> None:
    content: Any = [cached_text("hi")] if caller_marker else "hi"
    body = send(
        e2e,
        model=HAIKU,
        tools=[WEATHER_TOOL],
        messages=[SYSTEM, {"role": "user", "content": content}],
    )
    assert cache_markers(body) == []
    assert upstream_records(e2e)[-1]["status"] == "200"


# -- prompt_cache_key ---------------------------------------------------------------------------

ROUTED = "test/routed-abc"  # served by three simulated deployments


def deployment_for(e2e: Stack, key: Key, text: str, **kwargs: Any) -> str:
    client(e2e, key).chat.completions.create(
        model=ROUTED, max_tokens=5, messages=[{"role": "user", "content": text}], **kwargs
    )
    return e2e.usage(org_id=key.org_id)[-1].deployment


@pytest.mark.parametrize("length", [1, 256])
def test_prompt_cache_key_accepted_and_not_sent_upstream(e2e: Stack, length: int) -> None:
    body = send(e2e, prompt_cache_key="Ω" * length, messages=[{"role": "user", "content": "hi"}])
    assert "prompt_cache_key" not in body and "Ω" not in str(body)


def test_prompt_cache_key_over_256_chars_is_400(e2e: Stack) -> None:
    key = e2e.new_key()
    with pytest.raises(openai.BadRequestError) as raised:
        client(e2e, key).chat.completions.create(
            model=SONNET, prompt_cache_key="k" * 257, messages=[{"role": "user", "content": "hi"}]
        )
    error = error_of(raised.value)
    assert error["param"] == "prompt_cache_key" and "256" in error["message"]
    assert upstream_records(e2e) == []


def test_prompt_cache_key_keeps_a_conversation_on_one_deployment(e2e: Stack) -> None:
    key = e2e.new_key()
    # Without a key, the first message decides; with one, every turn follows the key.
    for conversation in ("conv-1", "conv-2", "conv-3"):
        seen = {
            deployment_for(e2e, key, f"turn {n} of {conversation}", prompt_cache_key=conversation)
            for n in range(4)
        }
        assert len(seen) == 1, (conversation, seen)


def test_session_header_wins_over_prompt_cache_key(e2e: Stack) -> None:
    key = e2e.new_key()
    by_key = {
        deployment_for(e2e, key, "x", prompt_cache_key=f"pk-{i}"): f"pk-{i}" for i in range(12)
    }
    by_header = {
        deployment_for(e2e, key, "x", extra_headers={"x-ezat-session": f"s-{i}"}): f"s-{i}"
        for i in range(12)
    }
    # A key and a header that, alone, route to different deployments.
    pk_deployment, pk = next(iter(by_key.items()))
    header_deployment, session = next((d, s) for d, s in by_header.items() if d != pk_deployment)
    both = deployment_for(
        e2e, key, "x", prompt_cache_key=pk, extra_headers={"x-ezat-session": session}
    )
    assert both == header_deployment != pk_deployment
