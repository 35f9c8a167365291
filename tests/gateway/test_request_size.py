"""The upstream body is checked against the provider's request size limit before it is sent
(issue 13, finding 4): a 413 naming the limit from the gateway, not the provider's 413 after all
the work (three 9.7 MB images made a body over 32 MB)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anthropic
import openai
import pytest

from gateway.request_limits import MAX_REQUEST_BYTES
from tests.media_samples import b64, png
from tests.support.stack import Stack

pytestmark = pytest.mark.e2e

LIMIT = MAX_REQUEST_BYTES["anthropic"]
BIG = png(2000, 2000) + b"\x00" * (9_700_000 - len(png(2000, 2000)))  # a 9.7 MB PNG


@pytest.fixture(scope="module")
def big_png_url() -> Iterator[tuple[str, list[str]]]:
    hits: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            self.send_response(200)
            self.send_header("content-type", "image/png")
            self.send_header("content-length", str(len(BIG)))
            self.end_headers()
            self.wfile.write(BIG)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", hits
    finally:
        server.shutdown()
        server.server_close()


def test_three_large_image_urls_get_a_413_before_the_provider(
    e2e: Stack, big_png_url: tuple[str, list[str]]
) -> None:
    base, _hits = big_png_url
    key = e2e.new_key()
    client = openai.OpenAI(api_key=key.secret, base_url=e2e.url + "/openai/v1", max_retries=0)
    parts = [{"type": "image_url", "image_url": {"url": f"{base}/{n}.png"}} for n in range(3)]
    with pytest.raises(openai.APIStatusError) as raised:
        client.chat.completions.create(
            model="sonnet",
            max_completion_tokens=16,
            messages=[{"role": "user", "content": [{"type": "text", "text": "?"}, *parts]}],  # type: ignore[list-item]
        )
    assert raised.value.status_code == 413
    error = raised.value.body  # openai-python keeps the envelope's "error" object
    assert isinstance(error, dict) and error["code"] == "request_too_large"
    # 3 × 9.7 MB base64-encoded is ~38.8 MB: the third download stops at what still fits.
    assert "image downloads exceed" in error["message"], error
    assert e2e.sim.requests() == []  # the provider never saw it
    assert e2e.usage(org_id=key.org_id) == []


def test_a_messages_body_over_the_provider_limit_gets_a_413(e2e: Stack) -> None:
    key = e2e.new_key()
    # Under the gateway's own 32 MiB inbound limit, over Anthropic's 32 MB request limit.
    raw = png(100, 100) + b"\x00" * (24_100_000 - len(png(100, 100)))
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": b64(raw)},
    }
    client = anthropic.Anthropic(api_key=key.secret, base_url=e2e.url, max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as raised:
        client.messages.create(
            model="sonnet",
            max_tokens=16,
            messages=[{"role": "user", "content": [image]}],  # type: ignore[list-item]
        )
    assert raised.value.status_code == 413
    error = raised.value.body["error"]  # type: ignore[index]
    assert error["type"] == "request_too_large"
    assert f"over the {LIMIT:,}-byte limit of the anthropic platform" in error["message"], error
    assert e2e.sim.requests() == []
    assert e2e.usage(org_id=key.org_id) == []
