"""Liveness and readiness endpoints."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_readyz_checks_the_database(client, db) -> None:
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json()["database"] == "ok"


@pytest.fixture
def unreachable_database(monkeypatch: pytest.MonkeyPatch) -> None:
    from ezat import health

    monkeypatch.setattr(
        health, "readiness", health.Readiness(lambda: {"database": "unreachable"}, ttl=0)
    )


def test_readyz_stays_ready_but_degraded_when_a_shared_dependency_is_down(
    client, unreachable_database: None
) -> None:
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {"status": "degraded", "database": "unreachable"}


def test_readyz_can_require_its_dependencies(client, unreachable_database: None, settings) -> None:
    settings.EZAT_READYZ_REQUIRE_DEPENDENCIES = True
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json() == {"status": "unavailable", "database": "unreachable"}


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


def test_readyz_answers_from_one_cached_probe() -> None:
    """Within the cache window no probe runs; after it, exactly one runs again."""
    from ezat.health import Readiness

    now = [100.0]
    probes: list[int] = []

    def probe() -> dict[str, str]:
        probes.append(1)
        return {"database": "ok"}

    readiness = Readiness(probe, ttl=1.0, clock=lambda: now[0])
    assert readiness.checks() == {"database": "ok"}
    for _ in range(50):
        readiness.checks()
    now[0] += 0.99
    readiness.checks()
    assert len(probes) == 1
    now[0] += 0.02
    readiness.checks()
    assert len(probes) == 2


def test_readyz_concurrent_callers_share_one_probe_in_flight() -> None:
    """Single-flight: 12 callers arriving while a probe runs wait for it and share its result."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from ezat.health import Readiness

    started, release = threading.Event(), threading.Event()
    running = [0]
    peak = [0]
    probes: list[int] = []
    lock = threading.Lock()

    def probe() -> dict[str, str]:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            probes.append(1)
        started.set()
        assert release.wait(30)
        with lock:
            running[0] -= 1
        return {"database": "unreachable"}

    readiness = Readiness(probe, ttl=1.0)
    with ThreadPoolExecutor(max_workers=12) as pool:
        futures = [pool.submit(readiness.checks) for _ in range(12)]
        assert started.wait(30)
        release.set()
        results = [future.result(timeout=30) for future in futures]
    assert results == [{"database": "unreachable"}] * 12
    assert len(probes) == 1 and peak[0] == 1
