"""Graceful shutdown (ezat/serve.py, core/draining.py): a real gateway process with a stream
open gets SIGTERM. /readyz turns 503 at once, new requests are refused with a retryable 503, the
open stream is served to its end, the usage record is written, and the process exits."""

from __future__ import annotations

import signal
import threading
import uuid
from typing import Any

import httpx
import openai
import pytest

from tests.support.stack import Stack, database_url, e2e_redis_url, start_gateway
from tests.waiting import wait_for

pytestmark = pytest.mark.e2e

PROMPT_MODEL = "anthropic/claude-sonnet-5-5"


def test_sigterm_drains_open_stream_then_exits(e2e: Stack, tmp_path: Any) -> None:
    from django.db import connection

    with e2e.blocker.unblock():
        db_url = database_url(connection.settings_dict)
    gateway = start_gateway(
        db_url, e2e_redis_url(), tmp_path, {"EZAT_SHUTDOWN_GRACE_SECONDS": "60"}
    )
    try:
        key = e2e.new_key()
        marker = f"drain-{uuid.uuid4().hex}"
        # The upstream stream stops after its first events and stays silent until released.
        e2e.sim.script({"match": marker, "pause_after_events": 8, "pause": 120})
        client = openai.OpenAI(base_url=gateway.url + "/openai/v1", api_key=key.secret)
        received: list[str] = []
        outcome: dict[str, Any] = {}

        def stream() -> None:
            try:
                chunks = client.chat.completions.create(
                    model=PROMPT_MODEL,
                    messages=[{"role": "user", "content": f"Write a long reply {marker}"}],
                    max_tokens=200,
                    stream=True,
                    stream_options={"include_usage": True},
                )
                for chunk in chunks:
                    if chunk.choices and chunk.choices[0].delta.content:
                        received.append(chunk.choices[0].delta.content)
                    if chunk.usage is not None:
                        outcome["usage"] = chunk.usage
                    outcome["id"] = chunk.id
            except Exception as exc:  # reported by the assertion below
                outcome["error"] = exc

        reader = threading.Thread(target=stream, daemon=True)
        reader.start()
        wait_for(lambda: received, what="the first streamed text")

        gateway.process.send_signal(signal.SIGTERM)
        # Readiness fails at once, though a stream is still open (the process keeps running).
        wait_for(
            lambda: _status(gateway.url + "/readyz") == 503,
            deadline=10,
            what="/readyz to answer 503 after SIGTERM",
        )
        assert gateway.process.poll() is None, "exited with a stream still open"
        assert reader.is_alive()
        assert _status(gateway.url + "/healthz") == 200  # alive, just not ready
        # A new request is refused with a 503 that the SDKs retry, and the connection closed.
        refused = httpx.post(
            gateway.url + "/openai/v1/chat/completions",
            headers={"authorization": f"Bearer {key.secret}"},
            json={"model": PROMPT_MODEL, "messages": [{"role": "user", "content": "hi"}]},
            timeout=10,
        )
        assert refused.status_code == 503
        assert refused.headers["x-should-retry"] == "true"
        assert refused.headers["connection"] == "close"
        assert refused.json()["error"]["message"].startswith("this gateway node is shutting down")
        assert gateway.process.poll() is None

        e2e.sim.release()  # the upstream goes on: the stream is served to its end
        reader.join(60)
        assert not reader.is_alive()
        assert "error" not in outcome, outcome.get("error")
        text = "".join(received)
        assert text.startswith("Simulated") and outcome["usage"].completion_tokens > 0
        gateway.process.wait(60)  # then the process exits by itself
        assert gateway.process.returncode == -signal.SIGTERM, gateway.log()
        records = e2e.usage(org_id=key.org_id)
        assert len(records) == 1, records
        assert records[0].output_tokens == outcome["usage"].completion_tokens
        assert records[0].cost_nano > 0
    finally:
        e2e.sim.release()
        if gateway.process.poll() is None:
            gateway.process.kill()
            gateway.process.wait(30)


def test_sigterm_with_nothing_open_exits_at_once(e2e: Stack, tmp_path: Any) -> None:
    from django.db import connection

    with e2e.blocker.unblock():
        db_url = database_url(connection.settings_dict)
    gateway = start_gateway(db_url, e2e_redis_url(), tmp_path)
    gateway.process.send_signal(signal.SIGTERM)
    # No grace period to sit out: the default (30 s) is far above this deadline.
    gateway.process.wait(15)
    # Like uvicorn, the server re-raises the signal once it has shut down cleanly, so its
    # parent sees "ended by SIGTERM" (and no traceback on the way).
    assert gateway.process.returncode == -signal.SIGTERM, gateway.log()
    assert "Traceback" not in gateway.log()


def _status(url: str) -> int | None:
    try:
        return httpx.get(url, timeout=5).status_code
    except httpx.HTTPError:
        return None
