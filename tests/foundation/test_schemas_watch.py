"""The SDK-type check every e2e test runs under (tests/support/schemas.py) sees the gateway's
answers, whole and streamed, and catches what a strict client rejects."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import anthropic
import httpx
import pytest
from openai import OpenAI

from tests.support import schemas
from tests.support.responses_support import SONNET
from tests.support.stack import Stack

pytestmark = pytest.mark.e2e

BAD_FAILED = (
    b'event: response.failed\ndata: {"type":"response.failed","sequence_number":0,"response":'
    b'{"id":"resp_1","object":"response","created_at":1,"status":"failed","error":{"code":'
    b'"overloaded","message":"x"},"incomplete_details":null,"instructions":null,"model":"m",'
    b'"output":[],"parallel_tool_calls":true,"metadata":{},"tool_choice":"auto","tools":[],'
    b'"temperature":null,"top_p":null}}\n\n'
)


@pytest.fixture
def fake_gateway() -> Iterator[str]:
    """Answers like the gateway (x-request-id) with what issue 32 found: a bad error code,
    and a model object without its required fields."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_response(200)
            self.send_header("x-request-id", "r1")
            self.send_header("content-type", "text/event-stream")
            self.send_header("content-length", str(len(BAD_FAILED)))
            self.end_headers()
            self.wfile.write(BAD_FAILED)

        def do_GET(self) -> None:
            body = b'{"type":"model","id":"m"}'
            self.send_response(200)
            self.send_header("x-request-id", "r2")
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_watch_catches_what_strict_clients_reject(
    fake_gateway: str, sdk_schemas: schemas.Watch
) -> None:
    with schemas.watch() as seen:
        httpx.post(fake_gateway + "/openai/v1/responses", json={})
        anthropic.Anthropic(base_url=fake_gateway, api_key="k").models.retrieve("m")
    assert len(seen.violations) == 2, seen.violations
    assert "code" in seen.violations[0] and "display_name" in seen.violations[1]
    sdk_schemas.violations.clear()  # the suite's own watch saw them too: expected here


def test_the_gateway_answers_are_checked(e2e: Stack, sdk_schemas: schemas.Watch) -> None:
    key = e2e.new_key()
    oai = OpenAI(base_url=e2e.url + "/openai/v1", api_key=key.secret, max_retries=0)
    before = sdk_schemas.checked
    oai.responses.create(model=SONNET, input="hi")
    with oai.responses.stream(model=SONNET, input="Tell me a long answer") as stream:
        stream.get_final_response()
    oai.chat.completions.create(model=SONNET, messages=[{"role": "user", "content": "hi"}])
    # One whole body, every event of the stream, one chat completion: all validated.
    assert sdk_schemas.checked - before > 10
    assert sdk_schemas.violations == []
