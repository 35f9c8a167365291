"""The Playground relay goes to the gateway's own address, whatever `Host` says (issue 31, item 3).

Driven over real HTTP against the production server (the e2e stack's `python -m ezat.serve`):
a logged-in owner posts a run with `Host: 127.0.0.1:<decoy>`, the port of a second local HTTP
server. Allowed hosts ignore the port, so the request is accepted; before the fix the relay sent
the run, with the org's Playground key, to the decoy and streamed its answer back.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from tests.support.stack import Stack

pytestmark = pytest.mark.e2e

PASSWORD = "relay-pass-13579"
SONNET = "anthropic/claude-sonnet-5-5"


class _Decoy(ThreadingHTTPServer):
    """Another local service: counts every connection it accepts and answers like a gateway
    would, so a relay that reached it would stream its text back."""

    daemon_threads = True

    def __init__(self) -> None:
        self.connections = 0
        super().__init__(("127.0.0.1", 0), _DecoyHandler)

    def verify_request(self, request: Any, client_address: Any) -> bool:
        self.connections += 1
        return True


class _DecoyHandler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = b"event: leak\ndata: DECOY-ANSWER\n\n"
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def decoy() -> Iterator[_Decoy]:
    server = _Decoy()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


class _Browser:
    """Cookies kept by hand: the stack serves plain http while its cookies are `Secure` (the
    production default), which a cookie jar would not send back."""

    def __init__(self, base: str) -> None:
        self.client = httpx.Client(base_url=base, timeout=60)
        self.cookies: dict[str, str] = {}

    def _keep(self, response: httpx.Response) -> httpx.Response:
        for header in response.headers.get_list("set-cookie"):
            name, _, rest = header.partition("=")
            self.cookies[name.strip()] = rest.split(";", 1)[0]
        return response

    def _headers(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        cookie = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        return {"cookie": cookie, **(extra or {})}

    def get(self, path: str) -> httpx.Response:
        return self._keep(self.client.get(path, headers=self._headers()))

    def post(self, path: str, headers: dict[str, str] | None = None, **kw: Any) -> httpx.Response:
        return self._keep(self.client.post(path, headers=self._headers(headers), **kw))

    def login(self, username: str) -> None:
        form = self.get("/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)
        assert token, form.text[:500]
        done = self.post(
            "/login/",
            data={"username": username, "password": PASSWORD, "csrfmiddlewaretoken": token[1]},
            headers={"referer": str(self.client.base_url) + "/login/"},
        )
        assert done.status_code == 302, done.text[:500]


def _owner(e2e: Stack) -> tuple[str, int]:
    from django.contrib.auth import get_user_model

    from accounts.models import Organization
    from accounts.services import add_member

    key = e2e.new_key(credit_usd="10")
    username = f"relay-owner-{os.getpid()}-{time.monotonic_ns()}"
    with e2e.blocker.unblock():
        user = get_user_model().objects.create_user(username, password=PASSWORD)
        add_member(org=Organization.objects.get(pk=key.org_id), user=user, role="owner")
    return username, key.org_id


def test_a_hostile_host_header_does_not_move_the_relay(e2e: Stack, decoy: _Decoy) -> None:
    username, org_id = _owner(e2e)
    browser = _Browser(e2e.url)
    browser.login(username)
    page = browser.get("/dashboard/playground/")
    assert page.status_code == 200, page.text[:500]
    hostile = f"127.0.0.1:{decoy.server_address[1]}"
    run = browser.post(
        "/dashboard/playground/run",
        json={"model": SONNET, "prompt": "Say hi"},
        headers={"host": hostile, "x-csrftoken": browser.cookies["csrftoken"]},
    )
    assert run.status_code == 200, run.text[:500]
    assert "DECOY-ANSWER" not in run.text
    assert decoy.connections == 0, "the relay connected to the host the request named"
    # The run went to the gateway itself: it started, and its usage was billed to the org.
    assert "event: ezat_start" in run.text, run.text[:1000]
    request_id = re.search(r'"request_id":"([^"]+)"', run.text)
    assert request_id, run.text[:1000]
    assert [r.request_id for r in e2e.usage(org_id=org_id)] == [request_id[1]]
