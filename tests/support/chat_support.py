"""Shared helpers for the /openai/v1/chat/completions end-to-end tests (test_chat_*.py).

Every test drives the real gateway with the official openai SDK (or raw httpx where the wire
itself is the point) and then reads what the upstream simulator received.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import openai
import orjson
from openai import OpenAI

from tests.support.stack import Key, Stack

SONNET = "anthropic/claude-sonnet-5-5"  # sampling false, caching on, levels low..max
OPUS_46 = "anthropic/claude-opus-4-6"  # sampling true, no xhigh level
SONNET_46 = "anthropic/claude-sonnet-4-6"  # sampling true
# Like Sonnet 5.5 (sampling false, levels low..max) but it takes a forced tool_choice.
SONNET_5 = "anthropic/claude-sonnet-5"
HAIKU = "anthropic/claude-haiku-4-5"  # sampling true, promptCaching false, no effort levels

NO_CACHE = {"x-ezat-cache": "off"}

WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
TIME_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Local time in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "format": {"type": "string"}},
            "required": ["city"],
        },
    },
}

# Keys an Anthropic Messages body built by the translator may carry. Anything else upstream
# means a client field leaked through.
ANTHROPIC_KEYS = frozenset(
    {
        "model",
        "max_tokens",
        "messages",
        "system",
        "stop_sequences",
        "tools",
        "tool_choice",
        "thinking",
        "output_config",
        "temperature",
        "top_p",
        "stream",
    }
)


def client(e2e: Stack, key: Key, **kwargs: Any) -> OpenAI:
    return OpenAI(base_url=e2e.url + "/openai/v1", api_key=key.secret, max_retries=0, **kwargs)


def error_of(exc: openai.APIStatusError) -> dict[str, Any]:
    """The OpenAI error object of a failed call (the SDK keeps `body["error"]` as `.body`)."""
    assert isinstance(exc.body, dict), exc.body
    assert set(exc.body) == {"message", "type", "param", "code"}, exc.body
    return exc.body


def chat_url(e2e: Stack) -> str:
    return e2e.url + "/openai/v1/chat/completions"


def post_chat(
    e2e: Stack, key: Key, body: dict[str, Any], headers: dict[str, str] | None = None
) -> httpx.Response:
    """A raw POST, for checks of the exact JSON the SDK would hide or normalise."""
    return httpx.post(
        chat_url(e2e),
        headers={"authorization": f"Bearer {key.secret}", **(headers or {})},
        json=body,
        timeout=60,
    )


def upstream_records(e2e: Stack) -> list[dict[str, Any]]:
    return [r for r in e2e.sim.requests() if r["path"] == "/v1/messages"]


def upstream(e2e: Stack) -> dict[str, Any]:
    """The body of the last Messages request the main simulator received."""
    records = upstream_records(e2e)
    assert records, "the simulator received no /v1/messages request"
    return records[-1]["body"]


def without_cache_control(value: Any) -> Any:
    """A copy with every cache_control marker removed (automatic caching adds them)."""
    if isinstance(value, dict):
        return {k: without_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [without_cache_control(v) for v in value]
    return value


def cache_markers(body: Any, path: str = "") -> list[str]:
    """JSON paths of every cache_control marker in an upstream body, in document order."""
    found: list[str] = []
    if isinstance(body, dict):
        for k, v in body.items():
            if k == "cache_control":
                found.append(path)
            else:
                found.extend(cache_markers(v, f"{path}.{k}" if path else k))
    elif isinstance(body, list):
        for i, v in enumerate(body):
            found.extend(cache_markers(v, f"{path}[{i}]"))
    return found


# -- raw SSE ----------------------------------------------------------------------------------


@dataclass
class RawStream:
    status: int
    headers: httpx.Headers
    text: str
    lines: list[str] = field(default_factory=list)

    @property
    def data(self) -> list[str]:
        """The payload of every `data:` line, in order ([DONE] included)."""
        return [line[6:] for line in self.lines if line.startswith("data: ")]

    @property
    def chunks(self) -> list[dict[str, Any]]:
        return [orjson.loads(d) for d in self.data if d != "[DONE]"]


def stream_raw(
    e2e: Stack, key: Key, body: dict[str, Any], headers: dict[str, str] | None = None
) -> RawStream:
    with httpx.stream(
        "POST",
        chat_url(e2e),
        headers={"authorization": f"Bearer {key.secret}", **(headers or {})},
        json={**body, "stream": True},
        timeout=60,
    ) as response:
        text = response.read().decode()
    return RawStream(response.status_code, response.headers, text, text.splitlines())


# -- a local image host -----------------------------------------------------------------------

# Just enough of each format for magic-byte sniffing.
IMAGES: dict[str, tuple[bytes, str]] = {
    "png": (b"\x89PNG\r\n\x1a\n" + b"\x00" * 64, "image/png"),
    "jpeg": (b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + b"\x00" * 64, "image/jpeg"),
    "gif": (b"GIF89a" + b"\x00" * 64, "image/gif"),
    "webp": (b"RIFF\x24\x00\x00\x00WEBPVP8 " + b"\x00" * 64, "image/webp"),
}


@dataclass
class ImageHost:
    base: str
    hits: list[str]

    def url(self, path: str) -> str:
        return self.base + path


@contextmanager
def image_host() -> Iterator[ImageHost]:
    """A real HTTP server on 127.0.0.1 (the e2e gateway allows loopback image hosts).

    /img/<kind> answers with a lying Content-Type, so only magic-byte sniffing gets the media
    type right; /status/<code> answers that status; /html is text posing as image/png.
    """
    hits: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            status, body, ctype = 404, b"not found", "text/plain"
            if self.path.startswith("/img/") and self.path[5:] in IMAGES:
                status, body, ctype = 200, IMAGES[self.path[5:]][0], "application/octet-stream"
            elif self.path.startswith("/status/"):
                status, body = int(self.path[8:]), IMAGES["png"][0]
            elif self.path == "/html":
                status, body, ctype = 200, b"<html>not an image</html>", "image/png"
            self.send_response(status)
            self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep pytest output clean

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield ImageHost(base=f"http://127.0.0.1:{server.server_address[1]}", hits=hits)
    finally:
        server.shutdown()
        server.server_close()
