"""Request handlers of the Bedrock and Vertex fronts (simulator/platforms.py).

Each checks the platform's URL, authentication and body, then hands the Messages request (with
the model named by the URL) to the same simulation the Anthropic API front uses, and frames its
answer the platform's way.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

import orjson
from aiohttp import web

from simulator import eventstream
from simulator.errors import DEFAULT_MESSAGES
from simulator.faults import Fault
from simulator.handlers import (
    _download_media,
    _pre_response_faults,
    assemble,
    handle_count_tokens,
    handle_messages,
    write_with_faults,
)
from simulator.platforms import (
    BEDROCK_VERSION,
    PLATFORM,
    STREAM_EXCEPTIONS,
    VERTEX_VERSION,
    _google_error,
    bedrock_authorized,
    bedrock_error,
    bedrock_from_anthropic,
    bedrock_model,
    vertex_authorized,
    vertex_model,
)
from simulator.replies import build_reply, reply_from_override
from simulator.sse import message_events
from simulator.state import CONTEXT, STATE
from simulator.thinking import SIGNING_PLATFORM, check_history
from simulator.validation import check_create

EVENTSTREAM_HEADERS = {
    "content-type": "application/vnd.amazon.eventstream",
    "x-amzn-bedrock-content-type": "application/json",
}
_BEDROCK_PATH = re.compile(
    r"^/model/(?P<model>[^/]+)/(?P<action>invoke|invoke-with-response-stream|count-tokens)$"
)
_VERTEX_PATH = re.compile(
    r"^/v1/projects/(?P<project>[^/]+)/locations/(?P<region>[^/]+)/publishers/anthropic/models/"
    r"(?P<model>[^/:]+):(?P<action>rawPredict|streamRawPredict)$"
)


def _strip_platform_keys(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k not in ("anthropic_version", "anthropic_beta")}


# --- Bedrock ------------------------------------------------------------------------------------
async def handle_bedrock(request: web.Request) -> web.StreamResponse:
    SIGNING_PLATFORM.set("bedrock")
    sim = request.app[PLATFORM]
    ctx = request[CONTEXT]
    match = _BEDROCK_PATH.match(request.raw_path.split("?", 1)[0])
    if match is None:
        return bedrock_error(404, "UnknownOperationException", "Unknown operation")
    problem = bedrock_authorized(sim, request, ctx.raw)
    if problem is not None:
        return bedrock_error(403, "InvalidSignatureException", problem)
    from urllib.parse import unquote

    model = bedrock_model(unquote(match["model"]))
    body = ctx.body
    if ctx.body_error is not None or not isinstance(body, dict):
        return bedrock_error(400, "ValidationException", "Malformed input request: not JSON")
    if match["action"] == "count-tokens":
        try:
            inner = orjson.loads(base64.b64decode(body["input"]["invokeModel"]["body"]))
        except (KeyError, TypeError, binascii.Error, orjson.JSONDecodeError):
            return bedrock_error(400, "ValidationException", "input.invokeModel.body is required")
        body = inner
    problem = _bedrock_body_problem(body)
    if problem is not None:
        return bedrock_error(400, "ValidationException", problem)
    stream = match["action"] == "invoke-with-response-stream"
    ctx.body = {**_strip_platform_keys(body), "model": model}
    if match["action"] == "count-tokens":
        response = await handle_count_tokens(request)
        if response.status != 200 or not isinstance(response, web.Response):
            return bedrock_from_anthropic(response)
        count = orjson.loads(response.body or b"{}")["input_tokens"]  # type: ignore[arg-type]
        return web.json_response({"inputTokens": count})
    if not stream:
        return bedrock_from_anthropic(await handle_messages(request))
    return await _bedrock_stream(request)


def _bedrock_body_problem(body: dict[str, Any]) -> str | None:
    for key in ("model", "stream"):
        if key in body:
            return f"Malformed input request: #: extraneous key [{key}] is not permitted"
    if body.get("anthropic_version") != BEDROCK_VERSION:
        return f"Malformed input request: anthropic_version must be {BEDROCK_VERSION}"
    betas = body.get("anthropic_beta")
    if betas is not None and not (
        isinstance(betas, list) and all(isinstance(b, str) for b in betas)
    ):
        return "Malformed input request: anthropic_beta must be an array of strings"
    return None


async def _bedrock_stream(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    ctx = request[CONTEXT]
    fault = state.script.take("messages", ctx.raw)
    early = await _pre_response_faults(request, ctx, fault)
    if early is not None:
        return bedrock_from_anthropic(early)
    body = ctx.body
    error = check_create(body) or check_history(body)
    if error:
        return bedrock_error(400, "ValidationException", error)
    failed = await _download_media(body)
    if failed:
        return bedrock_error(400, "ValidationException", failed)
    reply = reply_from_override(fault.reply) if fault and fault.reply else build_reply(body)
    inputs = state.cache.account(body["model"], body)
    message = assemble(body["model"], reply, inputs)
    if state.gate is not None:
        await state.gate(body, message["usage"])
    frames = _frames(message)
    resp = web.StreamResponse(headers=EVENTSTREAM_HEADERS)
    try:
        await resp.prepare(request)
        bad_crc = fault is not None and fault.spec.get("bad_crc_after_events") is not None
        if fault is None or not (fault.shapes_stream or bad_crc):
            await resp.write(b"".join(frames))
        elif not await write_with_faults(
            request, resp, frames, fault, error_frame=_exception_frame, corrupt=eventstream.corrupt
        ):
            return resp
        await resp.write_eof()
    except ConnectionError:
        if ctx.record is not None:
            ctx.record["client_disconnected"] = True
    return resp


def _frames(message: dict[str, Any]) -> list[bytes]:
    frames = []
    events = message_events(message)
    usage = message["usage"]
    for position, block in enumerate(events):
        data = block.split(b"\ndata: ", 1)[1].rstrip(b"\n")
        if position == len(events) - 1:
            event = orjson.loads(data)
            event["amazon-bedrock-invocationMetrics"] = {
                "inputTokenCount": usage["input_tokens"],
                "outputTokenCount": usage["output_tokens"],
                "invocationLatency": 1,
                "firstByteLatency": 1,
                "cacheReadInputTokenCount": usage["cache_read_input_tokens"],
                "cacheWriteInputTokenCount": usage["cache_creation_input_tokens"],
            }
            data = orjson.dumps(event)
        frames.append(eventstream.chunk(data))
    return frames


def _exception_frame(fault: Fault) -> bytes:
    """A scripted mid-stream error as Bedrock sends it: an exception message, not an event."""
    error_type = fault.error_type or "overloaded_error"
    name = STREAM_EXCEPTIONS.get(error_type, "internalServerException")
    text = fault.message or DEFAULT_MESSAGES.get(error_type, "Error")
    return eventstream.exception(name, text)


# --- Vertex -------------------------------------------------------------------------------------
async def handle_vertex(request: web.Request) -> web.StreamResponse:
    SIGNING_PLATFORM.set("vertex")
    sim = request.app[PLATFORM]
    ctx = request[CONTEXT]
    path = request.raw_path.split("?", 1)[0]
    counting = path.endswith("/models/count-tokens:rawPredict")
    match = None if counting else _VERTEX_PATH.match(path)
    prefix = f"/v1/projects/{sim.project}/locations/{sim.region}/publishers/anthropic/models/"
    if not path.startswith(prefix) or (match is None and not counting):
        return _google_error(404, "NOT_FOUND", f"The requested URL {path} was not found.")
    if not vertex_authorized(sim, request):
        return _google_error(
            401,
            "UNAUTHENTICATED",
            "Request had invalid authentication credentials. Expected OAuth 2 access token.",
        )
    body = ctx.body
    if ctx.body_error is not None or not isinstance(body, dict):
        return _google_error(400, "INVALID_ARGUMENT", "Invalid JSON payload received.")
    if body.get("anthropic_version") != VERTEX_VERSION:
        return _invalid(ctx, f"anthropic_version: must be {VERTEX_VERSION}")
    if counting:
        if not isinstance(body.get("model"), str):
            return _invalid(ctx, "model: Field required")
        ctx.body = {**_strip_platform_keys(body), "model": vertex_model(body["model"])}
        return await handle_count_tokens(request)
    assert match is not None
    if "model" in body:
        return _invalid(ctx, "model: Extra inputs are not permitted")
    stream = match["action"] == "streamRawPredict"
    if bool(body.get("stream")) != stream:
        return _invalid(ctx, f"stream must be {str(stream).lower()} for {match['action']}")
    ctx.body = {**_strip_platform_keys(body), "model": vertex_model(match["model"])}
    return await handle_messages(request)


def _invalid(ctx: Any, message: str) -> web.Response:
    from simulator.errors import error_response

    return error_response(400, message, ctx.request_id)
