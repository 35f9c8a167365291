"""The aiohttp application: auth, request ids, recording and routing."""

from __future__ import annotations

import asyncio
import hmac
import sys

import orjson
from aiohttp import web
from aiohttp.typedefs import Handler

from simulator import control, openai_front
from simulator.errors import error_response, new_request_id
from simulator.handlers import handle_count_tokens, handle_messages
from simulator.platform_handlers import handle_bedrock, handle_vertex
from simulator.platforms import (
    PLATFORM,
    PlatformSim,
    handle_token,
    load_or_write_service_account,
)
from simulator.state import CONTEXT, STATE, RequestContext, SimState

# The real API caps Messages and count_tokens bodies at 32 MB (protocol.md 1.1).
MAX_BODY_BYTES = 32 * 1024 * 1024
CONTROL_PREFIX = "/_sim/"


def _authorized(request: web.Request, api_key: str) -> bool:
    given = request.headers.get("x-api-key")
    if given is None:
        auth = request.headers.get("authorization", "")
        given = auth[7:] if auth[:7].lower() == "bearer " else None
    # Constant-time compare: cheap, and keeps the simulator from modelling a timing leak.
    return given is not None and hmac.compare_digest(given.encode(), api_key.encode())


async def _read_body(request: web.Request, ctx: RequestContext) -> web.Response | None:
    try:
        ctx.raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        return error_response(413, None, ctx.request_id)
    if not ctx.raw:
        if request.method == "POST":
            ctx.body_error = "Request body is empty; expected a JSON object"
        return None
    try:
        ctx.body = orjson.loads(ctx.raw)
    except orjson.JSONDecodeError:
        ctx.body_error = "Invalid JSON in request body"
        return None
    if not isinstance(ctx.body, dict):
        ctx.body_error = "Request body must be a JSON object"
    return None


@web.middleware
async def api_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    ctx = RequestContext(request_id=new_request_id())
    request[CONTEXT] = ctx
    if request.path.startswith(CONTROL_PREFIX):
        return await handler(request)

    state = request.app[STATE]
    status = "error"  # stays so only if a handler bug escapes
    try:
        too_large = await _read_body(request, ctx)
        ctx.record = state.record(request, ctx)
        if too_large is not None:
            response: web.StreamResponse = too_large
            if openai_front.owns(request.path):
                too_big = web.HTTPRequestEntityTooLarge(MAX_BODY_BYTES, len(ctx.raw))
                response = openai_front.http_error(too_big, request, ctx.request_id)
        elif (
            state.api_key
            and not openai_front.owns(request.path)  # it authenticates OpenAI's way
            and not _authorized(request, state.api_key)
        ):
            missing = "x-api-key" not in request.headers and "authorization" not in request.headers
            text = "x-api-key header is required" if missing else "invalid x-api-key"
            response = error_response(401, text, ctx.request_id)
        else:
            try:
                response = await handler(request)
            except web.HTTPException as exc:
                # Unknown paths and wrong methods get the front's error envelope too.
                if openai_front.owns(request.path):
                    response = openai_front.http_error(exc, request, ctx.request_id)
                else:
                    response = error_response(exc.status, exc.reason, ctx.request_id)
        status = ctx.outcome or str(response.status)
        return response
    finally:
        if ctx.record is not None:
            ctx.record["status"] = status
        state.count(request.path, status)


async def _add_request_id(request: web.Request, response: web.StreamResponse) -> None:
    # Set on every response, streams included: on_response_prepare runs before headers go out.
    ctx = request.get(CONTEXT)
    request_id = ctx.request_id if ctx is not None else new_request_id()
    response.headers["request-id"] = request_id
    if openai_front.owns(request.path):
        response.headers["x-request-id"] = request_id  # the openai SDK's request_id


def build_app(api_key: str | None = None, platform: PlatformSim | None = None) -> web.Application:
    """The Anthropic API simulation, or with `platform` its Bedrock or Vertex front; the
    OpenAI-compatible front (simulator/openai_front.py) is on every one."""
    app = web.Application(middlewares=[api_middleware], client_max_size=MAX_BODY_BYTES)
    platform = platform or PlatformSim()
    # The platforms authenticate their own way (SigV4, Bedrock API keys, OAuth2 tokens).
    app[STATE] = SimState(
        api_key=(api_key or None) if platform.platform == "anthropic" else None,
        openai_key=api_key or None,
    )
    app[PLATFORM] = platform
    app.on_response_prepare.append(_add_request_id)
    if platform.platform == "bedrock":
        app.router.add_post("/model/{tail:.*}", handle_bedrock)
    elif platform.platform == "vertex":
        app.router.add_post("/token", handle_token)
        app.router.add_post("/v1/projects/{tail:.*}", handle_vertex)
    else:
        app.router.add_post("/v1/messages", handle_messages)
        app.router.add_post("/v1/messages/count_tokens", handle_count_tokens)
    # The OpenAI-compatible front answers on every platform's simulator.
    openai_front.add_routes(app)
    control.add_routes(app)
    return app


async def serve(
    host: str = "127.0.0.1",
    port: int = 8787,
    api_key: str | None = None,
    platform: PlatformSim | None = None,
    service_account_file: str = "",
) -> None:
    """Run the simulator until cancelled. Prints the bound address (useful with port 0).

    Vertex: `service_account_file` is trusted by the token endpoint; written (its token_uri
    pointing here) when it does not exist yet."""
    # No access log: per-request logging costs more than the simulated work in benchmarks.
    app = build_app(api_key, platform)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port, backlog=1024)
        await site.start()
        if service_account_file:
            bound = runner.addresses[0]
            load_or_write_service_account(
                app[PLATFORM], service_account_file, f"http://{bound[0]}:{bound[1]}/token"
            )
        for bound_host, bound_port, *_ in runner.addresses:
            print(
                f"EZAT upstream simulator listening on http://{bound_host}:{bound_port}",
                file=sys.stdout,
                flush=True,
            )
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
