"""POST /v1/messages and POST /v1/messages/count_tokens, with scripted faults applied."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable, Mapping
from typing import Any

import orjson
from aiohttp import web

from simulator.cache import InputUsage
from simulator.errors import DEFAULT_MESSAGES, error_response, json_response, status_for
from simulator.faults import Fault
from simulator.media import MediaDownloadFailed, download, url_media, url_sources
from simulator.replies import Reply, build_reply, reply_from_override
from simulator.sse import error_event, message_events
from simulator.state import CONTEXT, STATE, RequestContext
from simulator.thinking import check_history
from simulator.tokens import estimate_input_tokens
from simulator.validation import check_create, check_messages

SSE_HEADERS = {"content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache"}


def invalid_request(ctx: RequestContext, message: str) -> web.Response:
    return error_response(400, message, ctx.request_id)


def drop_connection(request: web.Request, ctx: RequestContext) -> web.Response:
    """Close the TCP connection without sending a byte.

    The returned response is never delivered: aiohttp tries to send it, hits the closed
    transport, and swallows the ConnectionError in its own finish_response.
    """
    if request.transport is not None:
        request.transport.close()
    ctx.outcome = "dropped"
    return web.Response(status=499)


async def _pre_response_faults(
    request: web.Request, ctx: RequestContext, fault: Fault | None
) -> web.StreamResponse | None:
    """delay / drop / status: the faults that act before any response byte."""
    if fault is None:
        return None
    if ctx.record is not None:
        ctx.record["fault"] = fault.spec
    if fault.delay:
        await asyncio.sleep(fault.delay)
    if fault.drop:
        return drop_connection(request, ctx)
    if fault.status is not None:
        return error_response(
            fault.status,
            fault.message,
            ctx.request_id,
            error_type=fault.error_type,
            headers=fault.response_headers(),
        )
    return None


def _usage(reply: Reply, inputs: InputUsage) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "input_tokens": inputs.input_tokens,
        "output_tokens": reply.output_tokens,
        "cache_creation_input_tokens": inputs.cache_creation,
        "cache_read_input_tokens": inputs.cache_read,
        "cache_creation": {
            "ephemeral_5m_input_tokens": inputs.cache_creation_5m,
            "ephemeral_1h_input_tokens": inputs.cache_creation_1h,
        },
        "service_tier": "standard",
        "output_tokens_details": {"thinking_tokens": reply.thinking_tokens},
    }
    for key, value in (reply.usage_overrides or {}).items():
        if isinstance(value, Mapping) and isinstance(usage.get(key), dict):
            usage[key] = {**usage[key], **value}
        else:
            usage[key] = value
    return usage


def assemble(model: str, reply: Reply, inputs: InputUsage) -> dict[str, Any]:
    return {
        "id": "msg_01" + secrets.token_hex(11),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": reply.content,
        "stop_reason": reply.stop_reason,
        "stop_sequence": reply.stop_sequence,
        "stop_details": reply.stop_details,
        "container": None,
        "usage": _usage(reply, inputs),
    }


async def handle_messages(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    ctx = request[CONTEXT]
    fault = state.script.take("messages", ctx.raw)
    early = await _pre_response_faults(request, ctx, fault)
    if early is not None:
        return early
    if ctx.body_error is not None:
        return invalid_request(ctx, ctx.body_error)
    body = ctx.body
    error = check_create(body) or check_history(body)
    if error:
        return invalid_request(ctx, error)
    failed = await _download_media(body)
    if failed:
        return invalid_request(ctx, failed)

    reply = reply_from_override(fault.reply) if fault and fault.reply else build_reply(body)
    inputs = state.cache.account(body["model"], body)
    message = assemble(body["model"], reply, inputs)
    if state.gate is not None:
        await state.gate(body, message["usage"])
    if body.get("stream"):
        return await _stream(request, ctx, message, fault)
    return await _json(request, ctx, message, fault)


async def _download_media(body: Mapping[str, Any]) -> str | None:
    """Download the request's URL sources (priced by their pixels and pages); an error text."""
    urls = url_sources(body)
    if not urls:
        return None
    try:
        url_media.set(await download(urls))
    except MediaDownloadFailed as exc:
        return f"Unable to download the file at the given URL: {exc}"
    return None


def _fault_error(fault: Fault) -> tuple[str, str]:
    """Error type and message for mid-stream errors (default: overloaded, like the live API)."""
    error_type = fault.error_type or "overloaded_error"
    return error_type, fault.message or DEFAULT_MESSAGES.get(error_type, "Error")


async def _json(
    request: web.Request, ctx: RequestContext, message: dict[str, Any], fault: Fault | None
) -> web.StreamResponse:
    payload = orjson.dumps(message)
    # Scripted headers ride on successes too, e.g. anthropic-ratelimit-* for pass-through tests.
    extra = fault.response_headers() if fault is not None else None
    if fault is None or not fault.shapes_stream:
        return web.Response(body=payload, content_type="application/json", headers=extra)
    # Stream-shaped faults on a non-streaming request, mapped to their nearest JSON equivalent.
    if fault.pause_after_events is not None:
        await request.app[STATE].pause(fault.pause)
    if fault.error_after_events is not None:
        error_type, text = _fault_error(fault)
        return error_response(status_for(error_type), text, ctx.request_id, error_type=error_type)
    if fault.drop_after_events is not None:
        # Headers and half of the body, then the connection goes: a truncated JSON body.
        resp = web.StreamResponse(headers={**(extra or {}), "content-type": "application/json"})
        resp.content_length = len(payload)
        await resp.prepare(request)
        await resp.write(payload[: len(payload) // 2])
        if request.transport is not None:
            request.transport.close()
        return resp
    return web.Response(body=payload, content_type="application/json", headers=extra)


async def _stream(
    request: web.Request, ctx: RequestContext, message: dict[str, Any], fault: Fault | None
) -> web.StreamResponse:
    events = message_events(message)
    extra = fault.response_headers() if fault is not None else {}
    resp = web.StreamResponse(headers={**extra, **SSE_HEADERS})
    try:
        await resp.prepare(request)
        if fault is None or not fault.shapes_stream:
            # One write: the fastest path for benchmarks; the client still parses events.
            await resp.write(b"".join(events))
        elif not await write_with_faults(request, resp, events, fault):
            return resp
        await resp.write_eof()
    except ConnectionError:
        # The client went away mid-stream; there is nobody left to answer.
        if ctx.record is not None:
            ctx.record["client_disconnected"] = True
    return resp


async def write_with_faults(
    request: web.Request,
    resp: web.StreamResponse,
    events: list[bytes],
    fault: Fault,
    *,
    error_frame: Callable[[Fault], bytes] | None = None,
    corrupt: Callable[[bytes], bytes] | None = None,
) -> bool:
    """Write events one by one with the fault's hooks; False if the connection was dropped.

    One loop for every platform's framing: `error_frame` encodes the scripted mid-stream error
    (an SSE `error` event by default; Bedrock passes its exception frame) and `corrupt`, where the
    framing has a checksum, breaks the frame at `bad_crc_after_events`."""
    total = len(events)

    def at(value: int | None) -> int | None:
        return None if value is None else min(value, total)

    drop_at = at(fault.drop_after_events)
    error_at = at(fault.error_after_events)
    pause_at = at(fault.pause_after_events)
    bad_at = at(fault.spec.get("bad_crc_after_events")) if corrupt is not None else None
    for sent in range(total + 1):
        if sent == drop_at:
            if request.transport is not None:
                request.transport.close()
            return False
        if sent == error_at:
            frame = error_frame(fault) if error_frame else error_event(*_fault_error(fault))
            await resp.write(frame)
            return True
        if corrupt is not None and sent == bad_at:
            await resp.write(corrupt(events[min(sent, total - 1)]))
            return True
        if sent == pause_at:
            # Silence: no pings either, so client-side idle timeouts fire.
            await request.app[STATE].pause(fault.pause)
        elif fault.event_delay and 0 < sent < total:
            await asyncio.sleep(fault.event_delay)
        if sent < total:
            await resp.write(events[sent])
    return True


async def handle_count_tokens(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    ctx = request[CONTEXT]
    fault = state.script.take("count_tokens", ctx.raw)
    early = await _pre_response_faults(request, ctx, fault)
    if early is not None:
        return early
    if ctx.body_error is not None:
        return invalid_request(ctx, ctx.body_error)
    error = check_messages(ctx.body)
    if error:
        return invalid_request(ctx, error)
    failed = await _download_media(ctx.body)
    if failed:
        return invalid_request(ctx, failed)
    count = fault.reply.get("input_tokens") if fault and fault.reply else None
    if not isinstance(count, int):
        count = estimate_input_tokens(ctx.body)
    return json_response({"input_tokens": count})
