"""Shared helpers for the OpenAI front's tests (simulator/openai_front.py)."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from simulator.testing import SimulatorThread

CHAT = "/v1/chat/completions"
AZURE_CHAT = "/openai/v1/chat/completions"


def body(model: str = "gpt-sim", text: str = "Hello simulator", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": text}], **extra}


def post(
    sim: SimulatorThread,
    payload: Any,
    *,
    key: str | None,
    path: str = CHAT,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    hdrs = dict(headers or {})
    if key is not None:
        hdrs["authorization"] = f"Bearer {key}"
    content = payload if isinstance(payload, bytes) else orjson.dumps(payload)
    hdrs.setdefault("content-type", "application/json")
    return httpx.post(f"{sim.url}{path}", content=content, headers=hdrs, timeout=30)


def completion(response: httpx.Response) -> ChatCompletion:
    assert response.status_code == 200, response.text
    return ChatCompletion.model_validate(response.json())


def sse_data(text: str) -> list[str]:
    """The `data:` payloads of an SSE body, in order ([DONE] included)."""
    out = []
    for event in text.split("\n\n"):
        if event.startswith("data: "):
            out.append(event[len("data: ") :])
        else:
            assert not event.strip(), f"unexpected SSE event {event!r}"
    return out


def stream_chunks(response: httpx.Response) -> tuple[list[dict[str, Any]], bool]:
    """Raw chunk objects of a stream (each validated as a ChatCompletionChunk), and whether it
    ended with [DONE]."""
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    data = sse_data(response.text)
    done = bool(data) and data[-1] == "[DONE]"
    raw = [orjson.loads(d) for d in (data[:-1] if done else data)]
    for chunk in raw:
        if "error" not in chunk:
            ChatCompletionChunk.model_validate(chunk)
    return raw, done


def error_of(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return dict(error)
