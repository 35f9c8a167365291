"""Relays one Playground run to the gateway's own Responses API and streams it back.

The Responses API because it is the OpenAI-compatible API that carries the model's thinking
(as a reasoning summary, `reasoning.summary: "auto"`); Chat Completions does not.

The browser never holds a key: it POSTs {model, reasoning, system, prompt} to the dashboard
(session cookie + CSRF token, org checked by `org_view`); the dashboard calls the gateway with
the session's Playground key, passes the gateway's SSE through unchanged, then appends one
`event: ezat_usage` with the tokens and the exact cost billed (the usage record the gateway
wrote, looked up by request id within the org). A refused request (bad input, no balance, rate
limit) comes back as `event: ezat_error` carrying the gateway's own status and error body.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
from asgiref.sync import sync_to_async
from django.db import connection
from django.urls import reverse

from billing.models import UsageRecord
from core import money

REASONING_LEVELS = ("", "none", "minimal", "low", "medium", "high", "xhigh", "max")
USAGE_WAIT_S = 15.0
TIMEOUT = httpx.Timeout(connect=10.0, read=600.0, write=30.0, pool=10.0)


class PlaygroundInputError(ValueError):
    """A malformed run request (not the prompt's content: the gateway validates that)."""


class RelayAddressUnknown(RuntimeError):
    """Neither EZAT_PLAYGROUND_GATEWAY_URL nor the server's own socket names where to relay."""


def gateway_url(configured: str, server: object) -> str:
    """Where the relay sends a run: the configured internal address, else this server at the
    address its socket accepted the connection on (the ASGI scope's `server`). Pure.

    Never the request's `Host` header: a browser (or anyone with a session) names any host in
    it, and allowed hosts ignore the port, so `Host: 127.0.0.1:8307` sent the org's key and the
    run to another local service and relayed its answer (issue 31, item 3). The socket's
    address is plain HTTP (TLS ends at the load balancer); a server that terminates TLS itself,
    or listens on a Unix socket, needs EZAT_PLAYGROUND_GATEWAY_URL.
    """
    configured = configured.strip().rstrip("/")
    if configured:
        return configured
    if (
        isinstance(server, (tuple, list))
        and len(server) == 2
        and isinstance(server[0], str)
        and server[0]
        and isinstance(server[1], int)
        and server[1] > 0
    ):
        host, port = server
        if host in ("0.0.0.0", "::"):  # a wildcard bind: the server is reachable on loopback
            host = "127.0.0.1"
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    raise RelayAddressUnknown(
        "the Playground cannot tell this server's own address (it does not listen on a TCP "
        "socket it can name); set EZAT_PLAYGROUND_GATEWAY_URL"
    )


def run_body(data: Any) -> dict[str, Any]:
    """The Responses API request for a run. Pure."""
    if not isinstance(data, dict):
        raise PlaygroundInputError("the body must be a JSON object")
    model = data.get("model")
    if not isinstance(model, str) or not model.strip():
        raise PlaygroundInputError("model: choose a model")
    system, prompt = data.get("system", ""), data.get("prompt", "")
    if not isinstance(system, str):
        raise PlaygroundInputError("system: must be text")
    if not isinstance(prompt, str):
        raise PlaygroundInputError("prompt: must be text")
    if not prompt.strip():
        # The page says so before sending (issue 34); a page that did not still gets a
        # sentence, not the Responses API's schema error about an empty input.
        raise PlaygroundInputError("prompt: write a prompt first")
    reasoning = data.get("reasoning", "")
    if reasoning not in REASONING_LEVELS:
        raise PlaygroundInputError(f"reasoning: one of {', '.join(REASONING_LEVELS[1:])}")
    body: dict[str, Any] = {
        "model": model.strip(),
        "input": [{"role": "user", "content": prompt}],
        "stream": True,
        "store": False,
        # Thinking is shown when the model shares it.
        "reasoning": {"summary": "auto"},
    }
    if system.strip():
        body["instructions"] = system
    if reasoning:
        body["reasoning"]["effort"] = reasoning
    return body


def sse(event: str, data: dict[str, Any]) -> bytes:
    return b"event: " + event.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def _usage(org_id: int, request_id: str) -> dict[str, Any] | None:
    # Runs on an executor thread: its connection is closed after the read, not kept per thread.
    try:
        return _usage_row(org_id, request_id)
    finally:
        connection.close()


def _usage_row(org_id: int, request_id: str) -> dict[str, Any] | None:
    record = (
        UsageRecord.objects.filter(org_id=org_id, request_id=request_id)
        .only(
            "request_id",
            "model_id",
            "input_tokens",
            "output_tokens",
            "cache_read_tokens",
            "cache_write_5m_tokens",
            "cache_write_1h_tokens",
            "reasoning_tokens",
            "cost_nano",
        )
        .first()
    )
    if record is None:
        return None
    return {
        "request_id": record.request_id,
        "model": record.model_id,
        "input_tokens": record.input_tokens,
        "output_tokens": record.output_tokens,
        "cache_read_tokens": record.cache_read_tokens,
        "cache_write_tokens": record.cache_write_5m_tokens + record.cache_write_1h_tokens,
        "reasoning_tokens": record.reasoning_tokens,
        "cost_nano": record.cost_nano,
        "cost_usd": money.usd_from_nano(record.cost_nano),
        "cost": money.usd_cost(record.cost_nano),  # the text the request log shows
        "detail_url": reverse("dashboard:request", args=[record.request_id]),
    }


async def _wait_for_usage(org_id: int, request_id: str) -> dict[str, Any] | None:
    """The gateway writes the usage record before its last event; a group commit may land a
    moment later, so poll briefly."""
    deadline = time.monotonic() + USAGE_WAIT_S
    lookup = sync_to_async(_usage, thread_sensitive=False)
    while True:
        found = await lookup(org_id, request_id)
        if found is not None or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.1)


async def relay(url: str, secret: str, body: dict[str, Any], org_id: int) -> AsyncIterator[bytes]:
    started = time.monotonic()
    headers = {"Authorization": f"Bearer {secret}", "Accept": "text/event-stream"}
    try:
        async with (
            httpx.AsyncClient(timeout=TIMEOUT, trust_env=False) as client,
            client.stream("POST", url, content=orjson.dumps(body), headers=headers) as resp,
        ):
            request_id = resp.headers.get("x-request-id", "")
            if resp.status_code != 200:
                raw = await resp.aread()
                try:
                    error: Any = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    error = {"error": {"message": raw.decode("utf-8", "replace")[:500]}}
                yield sse(
                    "ezat_error",
                    {"status": resp.status_code, "request_id": request_id, "body": error},
                )
                return
            yield sse("ezat_start", {"request_id": request_id})
            async for chunk in resp.aiter_raw():
                yield chunk
    except httpx.HTTPError as exc:
        yield sse(
            "ezat_error",
            {"status": 502, "body": {"error": {"message": f"gateway unreachable: {exc!s}"}}},
        )
        return
    usage = await _wait_for_usage(org_id, request_id) if request_id else None
    yield sse(
        "ezat_usage",
        {"request_id": request_id, "elapsed_ms": int((time.monotonic() - started) * 1000)}
        | (usage or {"missing": True}),
    )
