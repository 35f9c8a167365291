"""Failover before the first token, seen through the official SDKs and on the wire.

Each test gets a fresh lab (model + deployments x, y on their own simulators) and a session that
prefers x, then y: x is given the fault, y answers. The client must see one clean answer, and the
usage record must tell the story (attempts: deployment, outcome, time to first byte).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest

from simulator.testing import SimulatorThread
from tests.support.routing_lab import Lab, lab_simulators, make_lab, sse_events, user
from tests.support.stack import Stack

pytestmark = pytest.mark.e2e

START_DEADLINE = 3.0  # EZAT_ATTEMPT_START_DEADLINE of the e2e gateway
OPEN_AFTER = 1.5  # EZAT_STREAM_OPEN_AFTER


@pytest.fixture(scope="module")
def sims() -> Iterator[dict[str, SimulatorThread]]:
    with lab_simulators(("x", "y")) as started:
        yield started


@pytest.fixture
def lab(e2e: Stack, sims: dict[str, SimulatorThread]) -> Lab:
    return make_lab(e2e, sims)


def attempts(lab: Lab) -> list[tuple[str, str]]:
    [record] = lab.usage()
    assert all(isinstance(a.get("ttfb_ms"), int | float) for a in record.attempts)
    return [(lab.label(a["deployment"]), a["outcome"]) for a in record.attempts]


def ask_json(lab: Lab, api: str, session: str, text: str) -> str:
    if api == "messages":
        reply = lab.anthropic(session=session).messages.create(
            model=lab.model, max_tokens=32, messages=user(text)
        )
        assert reply.model == lab.model
        return reply.content[0].text  # type: ignore[union-attr]
    completion = lab.openai(session=session).chat.completions.create(
        model=lab.model, max_tokens=32, messages=user(text)
    )
    assert completion.choices[0].finish_reason == "stop"
    return completion.choices[0].message.content or ""


def ask_stream(lab: Lab, api: str, session: str, text: str) -> str:
    """Consume a stream with the SDK and check it is one clean stream; returns its text."""
    if api == "messages":
        events = list(
            lab.anthropic(session=session).messages.create(
                model=lab.model, max_tokens=32, messages=user(text), stream=True
            )
        )
        kinds = [e.type for e in events]
        assert kinds.count("message_start") == 1 and kinds[0] == "message_start"
        assert kinds.count("message_stop") == 1 and kinds[-1] == "message_stop"
        return "".join(
            e.delta.text  # type: ignore[union-attr]
            for e in events
            if e.type == "content_block_delta" and e.delta.type == "text_delta"
        )
    chunks = list(
        lab.openai(session=session).chat.completions.create(
            model=lab.model,
            max_tokens=32,
            messages=user(text),
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    roles = [c.choices[0].delta.role for c in chunks if c.choices and c.choices[0].delta.role]
    finishes = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert roles == ["assistant"] and finishes == ["stop"]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


JSON_FAULTS = [
    pytest.param({"status": 529}, "http_529", id="529"),
    pytest.param({"drop": True}, "connect_error", id="drop"),
]


@pytest.mark.parametrize("api", ["messages", "chat"])
@pytest.mark.parametrize(("fault", "outcome"), JSON_FAULTS)
def test_failure_before_answer_is_invisible_json(
    lab: Lab, api: str, fault: dict[str, Any], outcome: str
) -> None:
    session = lab.header_session("x", "y")
    lab.sims["x"].script(fault)
    text = ask_json(lab, api, session, f"{lab.token} json failover")
    assert text.startswith("Simulated reply to:")
    assert attempts(lab) == [("x", outcome), ("y", "ok")]
    [record] = lab.usage()
    assert record.deployment == lab.name("y") and record.status == "ok"
    assert lab.received("x", lab.token) == lab.received("y", lab.token) == 1


STREAM_FAULTS = [
    pytest.param({"status": 529}, "http_529", id="529"),
    pytest.param({"drop": True}, "connect_error", id="drop"),
    # message_start (and nothing more) arrives, then the connection closes.
    pytest.param({"drop_after_events": 1}, "dropped", id="drop-after-message-start"),
    pytest.param({"error_after_events": 2}, "error_event", id="overloaded-event"),
]


@pytest.mark.parametrize("api", ["messages", "chat"])
@pytest.mark.parametrize(("fault", "outcome"), STREAM_FAULTS)
def test_failure_before_first_token_is_invisible_stream(
    lab: Lab, api: str, fault: dict[str, Any], outcome: str
) -> None:
    session = lab.header_session("x", "y")
    lab.sims["x"].script(fault)
    text = ask_stream(lab, api, session, f"{lab.token} stream failover")
    assert text.startswith("Simulated reply to:")
    assert attempts(lab) == [("x", outcome), ("y", "ok")]
    [record] = lab.usage()
    assert record.stream and record.deployment == lab.name("y") and record.output_exact
    assert lab.received("x", lab.token) == lab.received("y", lab.token) == 1


def test_slower_than_start_deadline_is_abandoned_json(lab: Lab) -> None:
    session = lab.header_session("x", "y")
    # x would answer only after a minute: an answer well before that was abandoned at the
    # deadline (a wide window, so a loaded machine's slowness cannot fail it).
    lab.sims["x"].script({"delay": START_DEADLINE + 60})
    started = time.monotonic()
    text = ask_json(lab, "messages", session, f"{lab.token} slow")
    elapsed = time.monotonic() - started
    assert text.startswith("Simulated reply to:")
    assert START_DEADLINE <= elapsed < START_DEADLINE + 30
    assert attempts(lab) == [("x", "timeout"), ("y", "ok")]


def raw_stream(lab: Lab, api: str, session: str, text: str) -> tuple[str, float, float]:
    """The raw SSE body, when its first byte arrived, and when its first data event arrived."""
    path = "/v1/messages" if api == "messages" else "/openai/v1/chat/completions"
    # On /v1 a ping is an event with a data line; the first real data is message_start.
    data_mark = b"event: message_start" if api == "messages" else b"data:"
    first_byte = first_data = 0.0
    body = b""
    started = time.monotonic()
    with httpx.stream(
        "POST",
        lab.stack.url + path,
        headers={"authorization": f"Bearer {lab.key.secret}", "x-ezat-session": session},
        json={"model": lab.model, "max_tokens": 32, "stream": True, "messages": user(text)},
        timeout=30,
    ) as response:
        assert response.status_code == 200
        for chunk in response.iter_raw():
            now = time.monotonic() - started
            first_byte = first_byte or now
            body += chunk
            if not first_data and data_mark in body:
                first_data = now
    return body.decode(), first_byte, first_data


SLOW_STARTS = [
    # No response headers before the deadline.
    pytest.param({"delay": START_DEADLINE + 1.0}, id="no-headers"),
    # Headers and message_start, then nothing: pre-content events must not leak to the client.
    pytest.param({"pause_after_events": 2, "pause": START_DEADLINE + 1.0}, id="stalls"),
]


@pytest.mark.parametrize("api", ["messages", "chat"])
@pytest.mark.parametrize("fault", SLOW_STARTS)
def test_stream_opened_with_keepalives_then_switched_is_one_clean_stream(
    lab: Lab, api: str, fault: dict[str, Any]
) -> None:
    session = lab.header_session("x", "y")
    lab.sims["x"].script(fault)
    body, first_byte, first_data = raw_stream(lab, api, session, f"{lab.token} keepalive")
    # The response opened with keep-alives while x was still being waited for, and the first
    # data event only came from y, after the switch at the start deadline.
    assert OPEN_AFTER - 0.2 < first_byte < START_DEADLINE - 0.2, (first_byte, body[:300])
    assert first_data >= START_DEADLINE - 0.1
    events = sse_events(body)
    kinds = [kind for kind, _ in events]
    if api == "messages":
        before = kinds[: kinds.index("message_start")]
        assert before and set(before) == {"ping"}, kinds
        assert kinds.count("message_start") == 1 and kinds[-1] == "message_stop"
        assert "error" not in kinds
    else:
        before = kinds[: kinds.index("data")]
        assert before and all(p == ": ping" for k, p in events[: len(before)] if k == "comment")
        assert set(before) == {"comment"}, kinds
        payloads = [p for k, p in events if k == "data"]
        assert payloads[-1] == "[DONE]" and payloads.count("[DONE]") == 1
        chunks = [orjson.loads(p) for p in payloads[:-1]]
        assert not any("error" in c for c in chunks)
        assert sum(1 for c in chunks if c["choices"] and c["choices"][0]["delta"].get("role")) == 1
    assert attempts(lab) == [("x", "timeout"), ("y", "ok")]


@pytest.mark.parametrize(
    ("api", "status"),
    # Not 401/403: those are the provider refusing the deployment's own credential, an attempt
    # failure that fails over (tests/gateway/routing/test_bad_deployments.py).
    [("messages", 400), ("messages", 404), ("messages", 413), ("chat", 400)],
)
def test_request_errors_from_upstream_are_not_retried(lab: Lab, api: str, status: int) -> None:
    session = lab.header_session("x", "y")
    lab.sims["x"].script({"status": status, "message": f"scripted {status}"})
    error: anthropic.APIStatusError | openai.APIStatusError
    with pytest.raises((anthropic.APIStatusError, openai.APIStatusError)) as raised:
        ask_json(lab, api, session, f"{lab.token} bad request")
    error = raised.value  # type: ignore[assignment]
    assert error.status_code == status
    assert f"scripted {status}" in str(error)
    # Only x received it: no failover for an error caused by the request itself.
    for label in lab.all_sims():
        assert lab.received(label, lab.token) == (1 if label == "x" else 0), label
    assert lab.usage() == []
