"""Shared helpers for the /openai/v1/responses end-to-end tests (test_responses_*.py)."""

from __future__ import annotations

from typing import Any

import httpx
import orjson

from tests.support.chat_support import RawStream
from tests.support.stack import Key, Stack

SONNET = "anthropic/claude-sonnet-5-5"

WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}


def responses_url(e2e: Stack) -> str:
    return e2e.url + "/openai/v1/responses"


def post(
    e2e: Stack,
    key: Key | str,
    body: dict[str, Any],
    headers: dict[str, str] | None = None,
    path: str = "",
) -> httpx.Response:
    secret = key if isinstance(key, str) else key.secret
    return httpx.post(
        responses_url(e2e) + path,
        headers={"authorization": f"Bearer {secret}", **(headers or {})},
        json=body,
        timeout=60,
    )


def stream_raw(e2e: Stack, key: Key, body: dict[str, Any], url: str | None = None) -> RawStream:
    with httpx.stream(
        "POST",
        url or responses_url(e2e),
        headers={"authorization": f"Bearer {key.secret}"},
        json={**body, "stream": True},
        timeout=60,
    ) as response:
        text = response.read().decode()
    return RawStream(response.status_code, response.headers, text, text.splitlines())


def events(stream: RawStream) -> list[dict[str, Any]]:
    """Every `data:` payload, checked against its `event:` line."""
    out: list[dict[str, Any]] = []
    name = None
    for line in stream.lines:
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            data = orjson.loads(line[6:])
            assert data["type"] == name, (name, data)
            out.append(data)
    return out
