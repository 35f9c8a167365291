"""POST /v1/messages, count_tokens and /v1/models through the official anthropic SDK."""

from __future__ import annotations

import re

import anthropic
import httpx
import pytest

from tests.support.stack import Stack
from tests.waiting import wait_for

pytestmark = pytest.mark.e2e

SONNET = "anthropic/claude-sonnet-5-5"
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Current weather for a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


def client(e2e: Stack, secret: str, **kwargs: object) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=e2e.url, api_key=secret, max_retries=0, **kwargs)  # type: ignore[arg-type]


def last_upstream(e2e: Stack, path: str = "/v1/messages") -> dict:
    requests = [r for r in e2e.sim.requests() if r["path"] == path]
    assert requests, f"the simulator received no {path}"
    return requests[-1]


def test_create_echoes_model_name_and_uses_deployment_key(e2e: Stack) -> None:
    key = e2e.new_key()
    message = client(e2e, key.secret).messages.create(
        model="  Claude-Sonnet-5.5 ", max_tokens=64, messages=[{"role": "user", "content": "Hello"}]
    )
    assert message.model == "  Claude-Sonnet-5.5 "
    assert message.content[0].text.startswith("Simulated reply to: Hello")
    upstream = last_upstream(e2e)
    assert upstream["body"]["model"] == "claude-sonnet-5-5"
    assert upstream["headers"]["x-api-key"] == "sk-sim-a"
    assert key.secret not in str(upstream["headers"])
    assert "authorization" not in upstream["headers"]


def test_stream_final_message_assembles_tool_use_and_thinking(e2e: Stack) -> None:
    key = e2e.new_key()
    with client(e2e, key.secret).messages.stream(
        model="sonnet",
        max_tokens=2000,
        tools=[WEATHER_TOOL],
        thinking={"type": "adaptive"},
        messages=[{"role": "user", "content": "Weather in Oslo?"}],
    ) as stream:
        final = stream.get_final_message()
    assert final.model == "sonnet"
    kinds = [block.type for block in final.content]
    assert kinds == ["thinking", "tool_use"]
    assert final.content[0].signature
    assert final.content[1].input == {"city": "Oslo"} or "city" in final.content[1].input
    assert final.stop_reason == "tool_use"
    assert final.usage.output_tokens > 0


def test_stream_events_have_event_lines_and_model_rewritten(e2e: Stack) -> None:
    key = e2e.new_key()
    with httpx.stream(
        "POST",
        e2e.url + "/v1/messages",
        headers={"x-api-key": key.secret},
        json={
            "model": "SONNET",
            "max_tokens": 50,
            "stream": True,
            "messages": [{"role": "user", "content": "hi"}],
        },
    ) as response:
        body = response.read().decode()
    assert response.status_code == 200
    names = re.findall(r"^event: (\w+)$", body, flags=re.M)
    assert names[0] == "message_start" and names[-1] == "message_stop"
    assert "content_block_delta" in names and "message_delta" in names
    assert '"model":"SONNET"' in body


def test_count_tokens_free_and_beta_not_forwarded(e2e: Stack) -> None:
    key = e2e.new_key()
    result = client(e2e, key.secret).messages.count_tokens(
        model="sonnet",
        messages=[{"role": "user", "content": "count these words please"}],
        extra_headers={"anthropic-beta": "token-counting-2024-11-01"},
    )
    assert result.input_tokens > 0
    upstream = last_upstream(e2e, "/v1/messages/count_tokens")
    assert "anthropic-beta" not in upstream["headers"]
    assert upstream["body"]["model"] == "claude-sonnet-5-5"
    assert e2e.usage(org_id=key.org_id) == []


def test_count_tokens_ignores_max_tokens_and_stream(e2e: Stack) -> None:
    key = e2e.new_key()
    response = httpx.post(
        e2e.url + "/v1/messages/count_tokens",
        headers={"x-api-key": key.secret},
        json={
            "model": "sonnet",
            "max_tokens": "junk",
            "stream": "x",
            "messages": [{"role": "user", "content": "hi"}],
        },
    )
    assert response.status_code == 200, response.text
    assert "max_tokens" not in last_upstream(e2e, "/v1/messages/count_tokens")["body"]


def test_beta_header_forwarded_unchanged(e2e: Stack) -> None:
    key = e2e.new_key()
    client(e2e, key.secret).messages.create(
        model="sonnet",
        max_tokens=20,
        messages=[{"role": "user", "content": "hi"}],
        extra_headers={"anthropic-beta": "context-1m-2025-08-07,interleaved-thinking-2025-05-14"},
    )
    beta = last_upstream(e2e)["headers"]["anthropic-beta"]
    assert beta == "context-1m-2025-08-07,interleaved-thinking-2025-05-14"


def test_unknown_fields_pass_through(e2e: Stack) -> None:
    key = e2e.new_key()
    client(e2e, key.secret).messages.create(
        model="sonnet",
        max_tokens=20,
        messages=[{"role": "user", "content": "hi"}],
        metadata={"user_id": "u-1"},
        extra_body={"some_future_field": {"x": 1}},
    )
    body = last_upstream(e2e)["body"]
    assert body["metadata"] == {"user_id": "u-1"}
    assert body["some_future_field"] == {"x": 1}


def test_cache_control_stripped_only_for_models_without_caching(e2e: Stack) -> None:
    key = e2e.new_key()
    system = [
        {"type": "text", "text": "You are terse. " * 50, "cache_control": {"type": "ephemeral"}}
    ]
    messages = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}],
        }
    ]
    api = client(e2e, key.secret)
    api.messages.create(model="claude-haiku-4-5", max_tokens=20, system=system, messages=messages)
    assert "cache_control" not in str(last_upstream(e2e)["body"])
    api.messages.create(model="sonnet", max_tokens=20, system=system, messages=messages)
    assert str(last_upstream(e2e)["body"]).count("cache_control") == 2


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        ({"max_tokens": 10, "messages": [{"role": "user", "content": "x"}]}, 400, "model"),
        (
            {"model": "", "max_tokens": 10, "messages": [{"role": "user", "content": "x"}]},
            400,
            "model",
        ),
        (
            {"model": "x" * 129, "max_tokens": 10, "messages": [{"role": "user", "content": "x"}]},
            400,
            "model",
        ),
        (
            {"model": "gpt-9", "max_tokens": 10, "messages": [{"role": "user", "content": "x"}]},
            404,
            "gpt-9",
        ),
        ({"model": "sonnet", "messages": [{"role": "user", "content": "x"}]}, 400, "max_tokens"),
        (
            {"model": "sonnet", "max_tokens": 0, "messages": [{"role": "user", "content": "x"}]},
            400,
            "max_tokens",
        ),
        (
            {"model": "sonnet", "max_tokens": 1.5, "messages": [{"role": "user", "content": "x"}]},
            400,
            "max_tokens",
        ),
        (
            {
                "model": "sonnet",
                "max_tokens": 10**9,
                "messages": [{"role": "user", "content": "x"}],
            },
            400,
            "max_tokens",
        ),
        ({"model": "sonnet", "max_tokens": 10, "messages": []}, 400, "messages"),
        ({"model": "sonnet", "max_tokens": 10, "messages": "hi"}, 400, "messages"),
        (
            {
                "model": "sonnet",
                "max_tokens": 10,
                "messages": [{"role": "user", "content": "x"}],
                "stream": "yes",
            },
            400,
            "stream",
        ),
    ],
)
def test_validation_errors(e2e: Stack, body: dict, status: int, needle: str) -> None:
    key = e2e.new_key()
    response = httpx.post(e2e.url + "/v1/messages", headers={"x-api-key": key.secret}, json=body)
    assert response.status_code == status, response.text
    error = response.json()
    assert error["type"] == "error"
    assert error["error"]["type"] == (
        "not_found_error" if status == 404 else "invalid_request_error"
    )
    assert needle in error["error"]["message"]
    assert error["request_id"] == response.headers["request-id"] == response.headers["x-request-id"]
    assert e2e.sim.requests() == []


def test_not_json_and_too_large(e2e: Stack) -> None:
    key = e2e.new_key()
    headers = {"x-api-key": key.secret, "content-type": "application/json"}
    response = httpx.post(e2e.url + "/v1/messages", headers=headers, content=b"{not json")
    assert response.status_code == 400 and "JSON" in response.json()["error"]["message"]
    big = (
        b'{"model":"sonnet","max_tokens":1,"messages":[{"role":"user","content":"'
        + b"a" * (33 * 1024 * 1024)
        + b'"}]}'
    )
    response = httpx.post(e2e.url + "/v1/messages", headers=headers, content=big, timeout=60)
    assert response.status_code == 413
    assert response.json()["error"]["type"] == "request_too_large"


def test_sdk_raises_typed_errors(e2e: Stack) -> None:
    key = e2e.new_key()
    with pytest.raises(anthropic.NotFoundError) as raised:
        client(e2e, key.secret).messages.create(
            model="nope", max_tokens=5, messages=[{"role": "user", "content": "x"}]
        )
    assert raised.value.request_id


@pytest.mark.parametrize("header", ["x-api-key", "authorization"])
def test_auth_by_both_headers(e2e: Stack, header: str) -> None:
    key = e2e.new_key()
    value = key.secret if header == "x-api-key" else f"Bearer {key.secret}"
    response = httpx.post(
        e2e.url + "/v1/messages",
        headers={header: value},
        json={"model": "sonnet", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]},
    )
    assert response.status_code == 200, response.text


@pytest.mark.parametrize("value", [None, "ezat_sk_wrong", "ezat_sk_" + "A" * 38])
def test_missing_or_wrong_key_is_401(e2e: Stack, value: str | None) -> None:
    headers = {"x-api-key": value} if value else {}
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        response = httpx.post(e2e.url + path, headers=headers, json={"model": "sonnet"})
        assert response.status_code == 401
        assert response.json()["error"]["type"] == "authentication_error"
    assert httpx.get(e2e.url + "/v1/models", headers=headers).status_code == 401


def test_revoked_key_refused_within_seconds(e2e: Stack) -> None:

    from accounts.models import ApiKey
    from accounts.services import revoke_api_key

    key = e2e.new_key()
    api = client(e2e, key.secret)
    api.messages.create(model="sonnet", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    with e2e.blocker.unblock():
        revoke_api_key(key=ApiKey.objects.get(pk=key.key_id))

    # Refused once the key cache (EZAT_KEY_CACHE_TTL 0.5 s in the e2e stack) lets it go.
    def refused() -> bool:
        try:
            api.messages.create(
                model="sonnet", max_tokens=5, messages=[{"role": "user", "content": "x"}]
            )
        except anthropic.AuthenticationError:
            return True
        return False

    wait_for(refused, 60, what="the revoked key to be refused")


@pytest.mark.parametrize(
    ("sent", "kept"),
    [
        ("my-id_1.2:3", True),
        ("a" * 128, True),
        ("a" * 129, False),
        ("has space", False),
        ("\xe9t\xe9", False),
    ],
)
def test_request_id_rules(e2e: Stack, sent: str, kept: bool) -> None:
    key = e2e.new_key()
    response = httpx.post(
        e2e.url + "/v1/messages",
        headers={"x-api-key": key.secret, "x-request-id": sent.encode("latin-1")},
        json={"model": "nope", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]},
    )
    rid = response.headers["x-request-id"]
    assert response.headers["request-id"] == rid == response.json()["request_id"]
    assert (rid == sent) is kept


@pytest.mark.parametrize(
    ("status", "kind"),
    [(400, "invalid_request_error"), (429, "rate_limit_error"), (500, "api_error")],
)
def test_upstream_error_before_stream_is_json(e2e: Stack, status: int, kind: str) -> None:
    key = e2e.new_key()
    # Every deployment fails the same way, so the last attempt's error comes back.
    for sim in e2e.sims.values():
        sim.script({"status": status, "message": f"scripted {status}", "times": 5})
    response = httpx.post(
        e2e.url + "/v1/messages",
        headers={"x-api-key": key.secret},
        json={
            "model": "sonnet",
            "max_tokens": 5,
            "stream": True,
            "messages": [{"role": "user", "content": "x"}],
        },
    )
    assert response.status_code == status
    assert response.headers["content-type"].startswith("application/json")
    assert response.json()["error"] == {"type": kind, "message": f"scripted {status}"}
    assert e2e.usage(org_id=key.org_id) == []


def test_error_event_mid_stream(e2e: Stack) -> None:
    key = e2e.new_key()
    e2e.sim.script({"error_after_events": 5})
    stream = client(e2e, key.secret).messages.stream(
        model="sonnet",
        max_tokens=500,
        messages=[{"role": "user", "content": "a long answer please"}],
    )
    with pytest.raises(anthropic.APIStatusError) as raised, stream as events:
        for _ in events:
            pass
    assert raised.value.type == "overloaded_error" or "Overloaded" in str(raised.value)
    # The output delivered before the error is billed, marked so.
    (record,) = e2e.usage(org_id=key.org_id)
    assert (record.status, record.output_exact) == ("stream_failed", False)
    assert record.output_tokens > 0


def test_ping_after_upstream_pause(e2e: Stack) -> None:
    key = e2e.new_key()
    e2e.sim.script({"pause_after_events": 4, "pause": 2.5})
    with httpx.stream(
        "POST",
        e2e.url + "/v1/messages",
        headers={"x-api-key": key.secret},
        timeout=30,
        json={
            "model": "sonnet",
            "max_tokens": 200,
            "stream": True,
            "messages": [{"role": "user", "content": "a long answer please"}],
        },
    ) as response:
        body = response.read().decode()
    # The simulator's own ping comes right after message_start; a pause of 2.5 s with a 1 s
    # interval must add at least one more from the gateway, in the middle of content.
    middle = body.split("content_block_start", 1)[1]
    assert "event: ping" in middle
    assert body.rstrip().endswith('data: {"type":"message_stop"}')


def test_models_list_anthropic_shape(e2e: Stack) -> None:
    key = e2e.new_key()
    page = client(e2e, key.secret).models.list()
    ids = [m.id for m in page.data]
    assert SONNET in ids
    raw = httpx.get(e2e.url + "/v1/models?limit=1000", headers={"x-api-key": key.secret}).json()
    assert raw["has_more"] is False
    assert raw["first_id"] == raw["data"][0]["id"] and raw["last_id"] == raw["data"][-1]["id"]


def test_usage_recorded_once_with_cost(e2e: Stack) -> None:
    key = e2e.new_key()
    message = client(e2e, key.secret).messages.create(
        model="sonnet", max_tokens=64, messages=[{"role": "user", "content": "Hello"}]
    )
    records = e2e.usage(org_id=key.org_id)
    assert len(records) == 1
    record = records[0]
    assert record.input_tokens == message.usage.input_tokens
    assert record.output_tokens == message.usage.output_tokens
    expected = (
        message.usage.input_tokens * 2_000_000 + message.usage.output_tokens * 10_000_000 + 500
    ) // 1000
    assert record.cost_nano == expected
    assert record.output_exact is True
