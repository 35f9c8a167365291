"""Log lines are JSON, and lines logged while a request runs carry its request id."""

from __future__ import annotations

import asyncio
import logging

import orjson

from core.logging import JsonFormatter, request_id_var
from gateway.app import GatewayApp


def test_json_line_with_extras() -> None:
    record = logging.makeLogRecord(
        {"msg": "request %s", "args": ("ok",), "levelname": "INFO", "name": "t", "api": "chat"}
    )
    line = orjson.loads(JsonFormatter().format(record))
    assert line["msg"] == "request ok" and line["api"] == "chat" and "request_id" not in line


def test_lines_inside_a_request_carry_its_id() -> None:
    seen: list[str | None] = []

    async def handler(request, send) -> int:  # type: ignore[no-untyped-def]
        seen.append(request_id_var.get())
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        return 200

    app = GatewayApp()
    app.routes[("GET", "/v1/probe")] = handler
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/v1/probe",
        "headers": [(b"x-request-id", b"req-probe-1")],
    }

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        return None

    asyncio.run(app(scope, receive, send))
    assert seen == ["req-probe-1"]
    record = logging.makeLogRecord({"msg": "x", "levelname": "INFO", "name": "t"})
    request_id_var.set(seen[0])
    assert orjson.loads(JsonFormatter().format(record))["request_id"] == "req-probe-1"
