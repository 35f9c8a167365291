"""The OpenAI front's streams and faults: chunk shapes, include_usage, tool-call deltas, n=2,
and every scripted fault in OpenAI's shapes."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import orjson
import pytest

from simulator.testing import SimulatorThread
from tests.simulator.openai_helpers import (
    AZURE_CHAT,
    body,
    error_of,
    post,
    sse_data,
    stream_chunks,
)

API_KEY = "sk-sim-openai-stream"
TOOL = {
    "type": "function",
    "function": {
        "name": "lookup",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}, "city": {"type": "string"}},
        },
    },
}

pytestmark = pytest.mark.usefixtures("reset_sim")


def _stream(sim: SimulatorThread, **extra: Any) -> tuple[list[dict[str, Any]], bool]:
    payload = body(**{"stream": True, **extra})
    return stream_chunks(post(sim, payload, key=API_KEY))


def _deltas(chunks: list[dict[str, Any]], index: int = 0) -> list[dict[str, Any]]:
    return [
        c["choices"][0]["delta"]
        for c in chunks
        if c["choices"] and c["choices"][0]["index"] == index
    ]


def test_stream_without_usage_has_no_usage_anywhere(sim: SimulatorThread) -> None:
    chunks, done = _stream(sim, model="gpt-sim-mini")
    assert done
    assert all("usage" not in c for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    deltas = _deltas(chunks)
    assert deltas[0]["role"] == "assistant"
    assert all("role" not in d for d in deltas[1:])
    text = "".join(d.get("content") or "" for d in deltas)
    assert text == "Simulated reply to: Hello simulator"
    finishes = [c["choices"][0]["finish_reason"] for c in chunks]
    assert finishes[:-1] == [None] * (len(chunks) - 1)
    assert finishes[-1] == "stop"
    assert chunks[-1]["choices"][0]["delta"] == {}


def test_stream_with_include_usage(sim: SimulatorThread) -> None:
    chunks, done = _stream(sim, model="gpt-sim", stream_options={"include_usage": True})
    assert done
    *body_chunks, last = chunks
    assert all("usage" in c and c["usage"] is None for c in body_chunks)
    assert last["choices"] == []
    usage = last["usage"]
    assert usage["completion_tokens_details"]["reasoning_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    # Same request, not streamed: the same usage.
    plain = post(sim, body(model="gpt-sim"), key=API_KEY).json()
    assert plain["usage"] == usage
    # No reasoning text in an OpenAI stream.
    assert all("reasoning_content" not in d for d in _deltas(chunks))


def test_stream_through_the_sdk(sim: SimulatorThread) -> None:
    client = openai.OpenAI(base_url=f"{sim.url}/openai/v1", api_key=API_KEY, max_retries=0)
    stream = client.chat.completions.create(
        model="qwen-sim",
        messages=[{"role": "user", "content": "stream me"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    pieces: list[str] = []
    reasoning: list[str] = []
    usage = None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            pieces.append(choice.delta.content or "")
            reasoning.append((choice.delta.model_extra or {}).get("reasoning_content", ""))
    assert "".join(pieces) == "Simulated reply to: stream me"
    assert "".join(reasoning).startswith("Thinking about: stream me")
    assert usage is not None and usage.completion_tokens > 0
    assert sim.requests()[-1]["path"] == AZURE_CHAT


def test_stream_tool_call_deltas(sim: SimulatorThread) -> None:
    chunks, _ = _stream(sim, model="gpt-sim-mini", tools=[TOOL], text="find it")
    calls = [d["tool_calls"][0] for d in _deltas(chunks) if d.get("tool_calls")]
    first, *rest = calls
    assert first["index"] == 0
    assert first["id"].startswith("call_")
    assert first["type"] == "function"
    assert first["function"] == {"name": "lookup", "arguments": ""}
    assert len(rest) >= 3
    for delta in rest:
        assert set(delta) == {"index", "function"}
        assert set(delta["function"]) == {"arguments"}
    arguments = "".join(d["function"]["arguments"] for d in rest)
    assert orjson.loads(arguments) == {"query": "weather in Oslo", "city": "Oslo"}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_stream_n_two(sim: SimulatorThread) -> None:
    chunks, done = _stream(sim, model="gpt-sim-mini", n=2)
    assert done
    for index in (0, 1):
        deltas = _deltas(chunks, index)
        assert deltas[0]["role"] == "assistant"
        assert "".join(d.get("content") or "" for d in deltas).startswith("Simulated reply")
    finals = [c["choices"][0] for c in chunks if c["choices"][0]["finish_reason"]]
    assert [f["index"] for f in finals] == [0, 1]


def test_stream_is_paced_by_event_delay(sim: SimulatorThread) -> None:
    sim.script({"path": "chat_completions", "event_delay": 0.05})
    with httpx.stream(
        "POST",
        f"{sim.url}/v1/chat/completions",
        json=body(stream=True),
        headers={"authorization": f"Bearer {API_KEY}"},
    ) as response:
        reads = [chunk for chunk in response.iter_bytes() if chunk]
    # One write per event instead of the whole stream at once.
    assert len(reads) > 3
    assert b"".join(reads).endswith(b"data: [DONE]\n\n")


# --- faults -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("fault", "status", "etype", "code"),
    [
        ({"status": 429}, 429, "requests", "rate_limit_exceeded"),
        ({"status": 500}, 500, "server_error", None),
        ({"status": 503}, 503, "service_unavailable_error", "server_is_overloaded"),
        (
            {"status": 400, "code": "context_length_exceeded"},
            400,
            "invalid_request_error",
            "context_length_exceeded",
        ),
        (
            {"status": 529, "type": "overloaded_error"},
            529,
            "service_unavailable_error",
            "server_is_overloaded",
        ),
        ({"status": 429, "type": "billing_error"}, 429, "insufficient_quota", "insufficient_quota"),
        (
            {"status": 400, "type": "context_length_exceeded"},
            400,
            "invalid_request_error",
            "context_length_exceeded",
        ),
    ],
)
def test_status_faults_in_openai_shape(
    sim: SimulatorThread, fault: dict[str, Any], status: int, etype: str, code: str | None
) -> None:
    sim.script({"path": "chat_completions", **fault})
    response = post(sim, body(), key=API_KEY)
    error = error_of(response, status)
    assert (error["type"], error["code"]) == (etype, code)
    assert response.headers["x-request-id"]
    if status == 429:
        assert response.headers["retry-after"] == "1"
    if code == "context_length_exceeded":
        assert "maximum context length" in error["message"]
    assert post(sim, body(), key=API_KEY).status_code == 200  # consumed


def test_rate_limit_through_the_sdk_with_retry_after(sim: SimulatorThread) -> None:
    sim.script({"path": "/v1/chat/completions", "status": 429, "retry_after": 7, "message": "slow"})
    client = openai.OpenAI(base_url=f"{sim.url}/v1", api_key=API_KEY, max_retries=0)
    with pytest.raises(openai.RateLimitError) as info:
        client.chat.completions.create(model="gpt-sim", messages=[{"role": "user", "content": "x"}])
    assert info.value.response.headers["retry-after"] == "7"
    assert info.value.code == "rate_limit_exceeded"
    assert info.value.body["message"] == "slow"  # type: ignore[index]


def test_real_context_length_is_enforced(sim: SimulatorThread) -> None:
    huge = body(model="gpt-sim-mini", text="word " * 110_000)  # > 128k tokens
    error = error_of(post(sim, huge, key=API_KEY), 400)
    assert error["code"] == "context_length_exceeded"
    assert "maximum context length is 128000 tokens" in error["message"]


def test_mid_stream_error_ends_the_stream_without_done(sim: SimulatorThread) -> None:
    sim.script({"path": "chat_completions", "error_after_events": 2})
    chunks, done = _stream(sim)
    assert not done
    assert len(chunks) == 3
    assert chunks[-1] == {
        "error": {
            "message": "The server had an error while processing your request. Sorry about that!",
            "type": "server_error",
            "param": None,
            "code": None,
        }
    }
    client = openai.OpenAI(base_url=f"{sim.url}/v1", api_key=API_KEY, max_retries=0)
    sim.script({"path": "chat_completions", "error_after_events": 1, "message": "boom"})
    with pytest.raises(openai.APIError) as info:
        for _ in client.chat.completions.create(
            model="gpt-sim", messages=[{"role": "user", "content": "x"}], stream=True
        ):
            pass
    assert info.value.message == "boom"


def test_mid_stream_error_in_the_vllm_flavour_is_followed_by_done(sim: SimulatorThread) -> None:
    sim.platform_state(openai_flavour="vllm")
    sim.script({"path": "chat_completions", "error_after_events": 2, "type": "rate_limit_error"})
    chunks, done = _stream(sim)
    assert done
    assert chunks[-1]["error"]["code"] == "rate_limit_exceeded"


def test_mid_stream_error_on_a_plain_request_is_a_500(sim: SimulatorThread) -> None:
    sim.script({"path": "chat_completions", "error_after_events": 2})
    error = error_of(post(sim, body(), key=API_KEY), 500)
    assert error["type"] == "server_error"


def test_cut_connections(sim: SimulatorThread) -> None:
    sim.script({"path": "chat_completions", "drop": True})
    with pytest.raises(httpx.RemoteProtocolError):
        post(sim, body(), key=API_KEY)
    sim.script({"path": "chat_completions", "drop_after_events": 3})
    with (
        pytest.raises(httpx.RemoteProtocolError),
        httpx.stream(
            "POST",
            f"{sim.url}/v1/chat/completions",
            json=body(stream=True),
            headers={"authorization": f"Bearer {API_KEY}"},
        ) as response,
    ):
        received = b""
        for piece in response.iter_bytes():
            received += piece
    assert len(sse_data(received.decode())) == 3
    assert sim.requests()[0]["status"] == "dropped"


def test_pause_holds_the_stream_until_released(sim: SimulatorThread) -> None:
    sim.script({"path": "chat_completions", "pause_after_events": 1, "pause": 60})
    with httpx.stream(
        "POST",
        f"{sim.url}/v1/chat/completions",
        json=body(stream=True),
        headers={"authorization": f"Bearer {API_KEY}"},
        timeout=30,
    ) as response:
        pieces = response.iter_bytes()
        first = next(pieces)
        assert first.startswith(b"data: ") and b'"role":"assistant"' in first
        sim.release()
        rest = b"".join(pieces)
    assert rest.endswith(b"data: [DONE]\n\n")


def test_fault_headers_ride_on_successes(sim: SimulatorThread) -> None:
    sim.script({"path": "chat_completions", "headers": {"x-ratelimit-remaining-tokens": "99"}})
    response = post(sim, body(), key=API_KEY)
    assert response.status_code == 200
    assert response.headers["x-ratelimit-remaining-tokens"] == "99"
