"""The test control API under /_sim/ (no auth): records, fault script, reset, stats."""

from __future__ import annotations

import orjson
from aiohttp import web

from gateway.simulator.errors import json_response
from gateway.simulator.faults import FaultError
from gateway.simulator.state import STATE


def _bad(message: str) -> web.Response:
    return json_response({"error": message}, status=400)


async def health(request: web.Request) -> web.Response:
    return json_response({"ok": True})


async def list_requests(request: web.Request) -> web.Response:
    """Recorded requests, oldest first. ?path=/v1/messages filters, ?limit=N keeps the last N."""
    records = list(request.app[STATE].records)
    path = request.query.get("path")
    if path:
        records = [r for r in records if r["path"] == path]
    limit = request.query.get("limit", "")
    if limit.isdigit():
        records = records[-int(limit) :] if int(limit) else []
    return json_response(records)


async def reset(request: web.Request) -> web.Response:
    request.app[STATE].reset()
    return json_response({"ok": True})


async def add_script(request: web.Request) -> web.Response:
    try:
        payload = orjson.loads(await request.read())
    except orjson.JSONDecodeError:
        return _bad("body must be JSON")
    faults = payload.get("faults") if isinstance(payload, dict) else None
    if not isinstance(faults, list):
        return _bad('body must be {"faults": [ ... ]}')
    script = request.app[STATE].script
    try:
        queued = script.extend(faults)
    except FaultError as exc:
        return _bad(str(exc))
    return json_response({"queued": queued, "pending": len(script)})


async def get_script(request: web.Request) -> web.Response:
    return json_response({"faults": request.app[STATE].script.pending()})


async def stats(request: web.Request) -> web.Response:
    return json_response(request.app[STATE].stats_view())


def add_routes(app: web.Application) -> None:
    app.router.add_get("/_sim/health", health)
    app.router.add_get("/_sim/requests", list_requests)
    app.router.add_post("/_sim/reset", reset)
    app.router.add_post("/_sim/script", add_script)
    app.router.add_get("/_sim/script", get_script)
    app.router.add_get("/_sim/stats", stats)
