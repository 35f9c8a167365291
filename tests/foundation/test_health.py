"""Liveness and readiness endpoints."""

from __future__ import annotations

import subprocess
import sys


def test_readyz_checks_the_database(client, db) -> None:
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json()["database"] == "ok"


def test_healthz_through_django_too(client) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}


_PROBE = """
import asyncio, sys
from ezat.asgi import application

sent = []

async def receive():
    return {"type": "http.request", "body": b"", "more_body": False}

async def send(message):
    sent.append(message)

scope = {"type": "http", "method": "GET", "path": "/healthz", "headers": [], "query_string": b""}
asyncio.run(application(scope, receive, send))
assert sent[0]["status"] == 200 and sent[1]["body"] == b'{"status": "ok"}', sent
assert "ezat.urls" not in sys.modules, "the URLconf was loaded"
print("lean")
"""


def test_healthz_is_answered_without_loading_the_urlconf() -> None:
    """An API-only worker answering probes stays lean: Django's URLconf (admin, dashboard, DRF
    views) is never imported for them."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0 and done.stdout.strip() == "lean", done.stderr[-2000:]
