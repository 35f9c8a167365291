"""The test control API under /_sim/ (no auth): records, fault script, clock, reset, stats."""

from __future__ import annotations

import orjson
from aiohttp import web

from simulator.clock import ClockError
from simulator.errors import json_response
from simulator.faults import FaultError
from simulator.state import STATE


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
    from simulator.platforms import PLATFORM, reset_openai_settings

    request.app[STATE].reset()
    # Test state, unlike the platform's identity: a test that made the OpenAI front keyless
    # must not leave it so for the next one.
    reset_openai_settings(request.app[PLATFORM])
    return json_response({"ok": True})


async def release(request: web.Request) -> web.Response:
    """End every scripted pause in progress (streams held open by a test)."""
    request.app[STATE].release_pauses()
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


async def clear_script(request: web.Request) -> web.Response:
    """Drop the pending faults only (the cache, records and clock stay): a deployment that
    comes back keeps what it had cached."""
    script = request.app[STATE].script
    dropped = len(script)
    script.clear()
    return json_response({"dropped": dropped, "pending": 0})


async def get_clock(request: web.Request) -> web.Response:
    return json_response(request.app[STATE].clock_view())


async def set_clock(request: web.Request) -> web.Response:
    """`{"advance": seconds}` or `{"now": seconds}`: the cache's TTLs run on this time from now
    on (until /_sim/reset). Time never goes backwards."""
    try:
        payload = orjson.loads(await request.read())
    except orjson.JSONDecodeError:
        return _bad("body must be JSON")
    if not isinstance(payload, dict) or len(payload.keys() & {"advance", "now"}) != 1:
        return _bad('body must be {"advance": seconds} or {"now": seconds}')
    if set(payload) - {"advance", "now"}:
        return _bad(f"unknown field(s): {', '.join(sorted(set(payload) - {'advance', 'now'}))}")
    name = "advance" if "advance" in payload else "now"
    value = payload[name]
    # orjson refuses NaN and infinities, so a number here is finite.
    if not isinstance(value, int | float) or isinstance(value, bool):
        return _bad(f"{name} must be a number of seconds")
    clock = request.app[STATE].clock
    try:
        clock.advance(value) if name == "advance" else clock.set(value)
    except ClockError as exc:
        return _bad(f"{name}: {exc}")
    return json_response(request.app[STATE].clock_view())


async def stats(request: web.Request) -> web.Response:
    return json_response(request.app[STATE].stats_view())


def add_routes(app: web.Application) -> None:
    app.router.add_get("/_sim/health", health)
    app.router.add_get("/_sim/requests", list_requests)
    app.router.add_post("/_sim/reset", reset)
    app.router.add_post("/_sim/release", release)
    app.router.add_post("/_sim/script", add_script)
    app.router.add_get("/_sim/script", get_script)
    app.router.add_delete("/_sim/script", clear_script)
    app.router.add_get("/_sim/clock", get_clock)
    app.router.add_post("/_sim/clock", set_clock)
    app.router.add_get("/_sim/stats", stats)
    from simulator.platforms import platform_control

    app.router.add_get("/_sim/platform", platform_control)
    app.router.add_post("/_sim/platform", platform_control)
