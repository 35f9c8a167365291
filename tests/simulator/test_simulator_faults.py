from __future__ import annotations

import time
from typing import Any

import anthropic
import httpx
import httpx2
import pytest

from simulator.testing import SimulatorThread

API_KEY = "sk-sim-faults"
MODEL = "claude-sim-1"
BODY: dict[str, Any] = {
    "model": MODEL,
    "max_tokens": 100,
    "messages": [{"role": "user", "content": "fault test"}],
}


# The simulator is reset before every test (`sim`, `client`: tests/simulator/conftest.py).
pytestmark = pytest.mark.usefixtures("reset_sim")


def post(sim: SimulatorThread, body: dict[str, Any] = BODY, **kw: Any) -> httpx.Response:
    path = kw.pop("path", "/v1/messages")
    timeout = kw.pop("timeout", 10)
    return httpx.post(
        f"{sim.url}{path}", json=body, headers={"x-api-key": API_KEY}, timeout=timeout
    )


@pytest.mark.parametrize(
    ("status", "error_type", "exc"),
    [
        (400, "invalid_request_error", anthropic.BadRequestError),
        (401, "authentication_error", anthropic.AuthenticationError),
        (403, "permission_error", anthropic.PermissionDeniedError),
        (404, "not_found_error", anthropic.NotFoundError),
        (413, "request_too_large", anthropic.RequestTooLargeError),
        (429, "rate_limit_error", anthropic.RateLimitError),
        (500, "api_error", anthropic.InternalServerError),
        (504, "timeout_error", anthropic.InternalServerError),
        (529, "overloaded_error", anthropic.OverloadedError),
    ],
)
def test_status_faults(
    sim: SimulatorThread,
    client: anthropic.Anthropic,
    status: int,
    error_type: str,
    exc: type[anthropic.APIStatusError],
) -> None:
    sim.script({"status": status}, {"status": status, "message": "custom words"})
    raw = post(sim)
    assert raw.status_code == status
    body = raw.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == error_type
    assert body["request_id"] == raw.headers["request-id"]
    if status == 429:
        assert raw.headers["retry-after"] == "1"
    with pytest.raises(exc) as info:
        client.messages.create(**BODY)
    assert info.value.status_code == status
    assert info.value.body["error"]["message"] == "custom words"  # type: ignore[index]
    # Script consumed: the next request succeeds.
    assert post(sim).status_code == 200


def test_status_fault_with_headers_and_retry_after(sim: SimulatorThread) -> None:
    sim.script({"status": 429, "retry_after": 7, "headers": {"x-should-retry": "false"}})
    resp = post(sim)
    assert resp.headers["retry-after"] == "7"
    assert resp.headers["x-should-retry"] == "false"


def test_headers_on_successful_responses(sim: SimulatorThread) -> None:
    limits = {"anthropic-ratelimit-requests-remaining": "41"}
    sim.script({"headers": limits}, {"headers": limits})
    assert post(sim).headers["anthropic-ratelimit-requests-remaining"] == "41"
    streamed = post(sim, {**BODY, "stream": True})
    assert streamed.headers["anthropic-ratelimit-requests-remaining"] == "41"
    assert streamed.headers["content-type"].startswith("text/event-stream")


def test_delay(sim: SimulatorThread) -> None:
    sim.script({"delay": 0.4})
    started = time.monotonic()
    resp = post(sim)
    assert resp.status_code == 200
    assert time.monotonic() - started >= 0.4


def test_delay_triggers_client_timeout(sim: SimulatorThread) -> None:
    sim.script({"delay": 1.0})
    with pytest.raises(httpx.ReadTimeout):
        post(sim, timeout=0.2)


def test_drop_before_first_byte(sim: SimulatorThread, client: anthropic.Anthropic) -> None:
    sim.script({"drop": True}, {"drop": True})
    with pytest.raises(httpx.RemoteProtocolError, match="without sending a response"):
        post(sim)
    with pytest.raises(anthropic.APIConnectionError):
        client.messages.create(**BODY)
    assert sim.stats()["by_status"]["dropped"] == 2


def test_error_mid_stream_raises_in_sdk(sim: SimulatorThread, client: anthropic.Anthropic) -> None:
    sim.script({"error_after_events": 4})
    with (
        pytest.raises(anthropic.APIStatusError) as info,
        client.messages.stream(**BODY) as stream,
    ):
        stream.get_final_message()
    assert info.value.status_code == 200  # the HTTP status was already 200
    assert info.value.type == "overloaded_error"


def test_error_mid_stream_raw(sim: SimulatorThread) -> None:
    sim.script({"error_after_events": 2, "type": "api_error", "message": "boom"})
    resp = post(sim, {**BODY, "stream": True})
    assert resp.status_code == 200
    chunks = [c for c in resp.text.split("\n\n") if c]
    assert [c.split("\n")[0] for c in chunks] == [
        "event: message_start",
        "event: ping",
        "event: error",
    ]
    assert '"type":"api_error","message":"boom"' in chunks[-1]


def test_error_after_events_on_json_request_is_http_error(sim: SimulatorThread) -> None:
    sim.script({"error_after_events": 3})
    resp = post(sim)
    assert resp.status_code == 529
    assert resp.json()["error"]["type"] == "overloaded_error"


def test_drop_mid_stream(sim: SimulatorThread, client: anthropic.Anthropic) -> None:
    sim.script({"drop_after_events": 3}, {"drop_after_events": 5})
    with (
        pytest.raises(httpx.RemoteProtocolError),
        httpx.stream(
            "POST",
            f"{sim.url}/v1/messages",
            json={**BODY, "stream": True},
            headers={"x-api-key": API_KEY},
        ) as resp,
    ):
        assert resp.status_code == 200
        resp.read()
    with (
        # anthropic 2.x runs on httpx2 and lets a broken stream's protocol error through.
        pytest.raises((httpx2.RemoteProtocolError, anthropic.APIConnectionError)),
        client.messages.stream(**BODY) as stream,
    ):
        stream.get_final_message()


def test_drop_mid_body_for_json_request(sim: SimulatorThread) -> None:
    sim.script({"drop_after_events": 1})
    with pytest.raises(httpx.RemoteProtocolError):
        post(sim)


def test_pause_mid_stream(sim: SimulatorThread) -> None:
    # A pause long enough to tell apart from a loaded machine's scheduling delays.
    sim.script({"pause_after_events": 2, "pause": 5.0})
    arrivals: list[tuple[float, str]] = []
    started = time.monotonic()
    with httpx.stream(
        "POST",
        f"{sim.url}/v1/messages",
        json={**BODY, "stream": True},
        headers={"x-api-key": API_KEY},
        timeout=60,
    ) as resp:
        for line in resp.iter_lines():
            if line.startswith("event: "):
                arrivals.append((time.monotonic() - started, line[7:]))
    names = [name for _, name in arrivals]
    assert names[:2] == ["message_start", "ping"]
    assert names[-1] == "message_stop"
    assert arrivals[1][0] - arrivals[0][0] < 2.5  # the first two arrive together...
    assert arrivals[2][0] - arrivals[1][0] >= 4.5  # ...then silence, no pings


def test_pause_trips_read_timeout(sim: SimulatorThread) -> None:
    sim.script({"pause_after_events": 1, "pause": 1.0})
    with (
        pytest.raises(httpx.ReadTimeout),
        httpx.stream(
            "POST",
            f"{sim.url}/v1/messages",
            json={**BODY, "stream": True},
            headers={"x-api-key": API_KEY},
            timeout=httpx.Timeout(5, read=0.3),
        ) as resp,
    ):
        resp.read()


def test_event_delay(sim: SimulatorThread) -> None:
    sim.script({"event_delay": 0.05})
    started = time.monotonic()
    resp = post(sim, {**BODY, "stream": True})
    events = resp.text.count("event: ")
    assert time.monotonic() - started >= 0.05 * (events - 2)


def test_match_skips_without_consuming(sim: SimulatorThread) -> None:
    sim.script({"match": "special-marker", "status": 500})
    assert post(sim).status_code == 200  # no marker: entry skipped, not consumed
    marked = {**BODY, "messages": [{"role": "user", "content": "a special-marker here"}]}
    assert post(sim, marked).status_code == 500
    assert post(sim, marked).status_code == 200  # consumed


def test_fifo_order_and_times(sim: SimulatorThread) -> None:
    sim.script({"status": 500, "times": 2}, {"status": 529})
    assert [post(sim).status_code for _ in range(4)] == [500, 500, 529, 200]


def test_times_forever(sim: SimulatorThread) -> None:
    sim.script({"status": 503, "times": -1})
    assert [post(sim).status_code for _ in range(3)] == [503, 503, 503]
    assert httpx.get(f"{sim.url}/_sim/script").json()["faults"][0]["times"] == -1
    sim.reset()
    assert post(sim).status_code == 200


def test_count_tokens_faults_need_path(sim: SimulatorThread) -> None:
    count_body = {"model": MODEL, "messages": BODY["messages"]}
    sim.script({"status": 500})
    # A messages fault does not fire on count_tokens...
    assert post(sim, count_body, path="/v1/messages/count_tokens").status_code == 200
    assert post(sim).status_code == 500
    sim.script(
        {"path": "count_tokens", "status": 429},
        {"path": "count_tokens", "reply": {"input_tokens": 42}},
    )
    assert post(sim).status_code == 200  # ...and a count_tokens fault not on messages.
    assert post(sim, count_body, path="/v1/messages/count_tokens").status_code == 429
    resp = post(sim, count_body, path="/v1/messages/count_tokens")
    assert resp.json() == {"input_tokens": 42}


def test_scripted_reply(sim: SimulatorThread, client: anthropic.Anthropic) -> None:
    reply = {
        "content": [{"type": "text", "text": "I can't help with that."}],
        "stop_reason": "refusal",
        "stop_details": {"type": "refusal", "category": "cyber", "explanation": None},
        "usage": {"output_tokens": 99, "cache_creation": {"ephemeral_1h_input_tokens": 5}},
    }
    sim.script({"reply": reply}, {"reply": reply})
    plain = client.messages.create(**BODY)
    assert plain.content[0].text == "I can't help with that."
    assert plain.stop_reason == "refusal"
    assert plain.usage.output_tokens == 99
    assert plain.usage.cache_creation is not None
    assert plain.usage.cache_creation.ephemeral_1h_input_tokens == 5
    with client.messages.stream(**BODY) as stream:
        streamed = stream.get_final_message()
    assert streamed.content[0].text == "I can't help with that."
    assert streamed.stop_reason == "refusal"
    assert streamed.usage.output_tokens == 99


def test_scripted_tool_use_reply_streams(sim: SimulatorThread, client: anthropic.Anthropic) -> None:
    block = {"type": "tool_use", "id": "toolu_fixed", "name": "x", "input": {"a": [1, 2, 3]}}
    sim.script({"reply": {"content": [block]}})
    with client.messages.stream(**BODY) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    assert final.content[0].model_dump(exclude_none=True) == block


@pytest.mark.parametrize(
    "bad",
    [
        {"stauts": 500},
        {"status": 200},
        {"times": 0},
        {"delay": -1},
        {"pause_after_events": 2},
        {"path": "models"},
        {"drop": "yes"},
    ],
)
def test_bad_fault_entries_rejected(sim: SimulatorThread, bad: dict[str, Any]) -> None:
    resp = httpx.post(f"{sim.url}/_sim/script", json={"faults": [{"status": 500}, bad]})
    assert resp.status_code == 400
    assert "error" in resp.json()
    # All-or-nothing: the valid entry in the same call was not queued either.
    assert httpx.get(f"{sim.url}/_sim/script").json()["faults"] == []


def test_stats_and_reset(sim: SimulatorThread) -> None:
    sim.script({"status": 429})
    post(sim)
    post(sim)
    post(sim, {"model": MODEL, "messages": BODY["messages"]}, path="/v1/messages/count_tokens")
    stats = sim.stats()
    assert stats["total"] == 3
    assert stats["by_path"] == {"/v1/messages": 2, "/v1/messages/count_tokens": 1}
    assert stats["by_status"] == {"429": 1, "200": 2}
    assert stats["by_path_status"]["/v1/messages"] == {"429": 1, "200": 1}
    records = sim.requests()
    assert [r["status"] for r in records] == ["429", "200", "200"]
    assert records[0]["fault"] == {"status": 429}
    sim.reset()
    assert sim.stats()["total"] == 0
    assert sim.requests() == []


def test_fault_applies_before_auth_is_not_consumed(sim: SimulatorThread) -> None:
    sim.script({"status": 500})
    bad_auth = httpx.post(f"{sim.url}/v1/messages", json=BODY, headers={"x-api-key": "wrong"})
    assert bad_auth.status_code == 401
    assert post(sim).status_code == 500
