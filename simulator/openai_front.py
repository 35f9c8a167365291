"""The simulator's OpenAI-compatible front: Chat Completions, Responses and the model list.

Served by every simulator, next to its Anthropic (or Bedrock/Vertex) front:

- `POST /v1/chat/completions`, `POST /v1/responses`, `GET /v1/models[/{id}]`: OpenAI's API,
  `Authorization: Bearer <the simulator's api key>`;
- the same under `/openai/v1/`: Azure OpenAI's v1 API, `api-key: <key>` (a Bearer key is taken
  too: the plain OpenAI SDK pointed at Azure's v1 base URL sends one).

Settings, per simulator (`POST /_sim/platform`, `SimulatorThread.platform_state(...)`):
`openai_auth` "required" (default; no key is checked when the simulator has none, as on the
Messages front) or "none" (vLLM/Ollama run keyless: every request is taken, whatever it sends);
`openai_flavour` "openai" (default, strict) or "vllm" (extra top-level fields accepted, a
mid-stream error is followed by `data: [DONE]` as vLLM's server sends it);
`openai_reasoning_field` "reasoning_content" (default) or "reasoning" (vLLM >= 0.11 naming).

Replies, faults (path "chat_completions" / "responses"), pauses, the clock, the prompt cache
(automatic, by prefix: simulator/cache.py `account_prefix`) and request recording are the
simulation's own, shared with the Messages front.
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
import time
from typing import Any

import orjson
from aiohttp import web

from simulator import openai_responses as responses
from simulator import openai_responses_render as responses_render
from simulator.cache import TTL_5M
from simulator.errors import json_response
from simulator.faults import Fault
from simulator.handlers import SSE_HEADERS, drop_connection, write_with_faults
from simulator.openai_errors import (
    CONTEXT_CODE,
    OpenAIError,
    azure_auth_error,
    error_response,
    fault_error,
    stream_error,
)
from simulator.openai_models import MODELS, OpenAIModel
from simulator.openai_render import (
    cached_tokens,
    chunks,
    completion,
    reply_body,
    segments,
    usage,
)
from simulator.openai_validation import check_chat
from simulator.platforms import PLATFORM
from simulator.replies import build_reply, reply_from_override
from simulator.state import CONTEXT, STATE, RequestContext, SimState
from simulator.tokens import Segment, total_tokens

AZURE_PREFIX = "/openai/"
_PREFIXES = ("/v1/chat/", "/v1/models", "/v1/responses", AZURE_PREFIX)
TTL_24H = 86_400.0
MAX_STORED_RESPONSES = 1000

_NO_KEY = (
    "You didn't provide an API key. You need to provide your API key in an Authorization header"
    " using Bearer auth (i.e. Authorization: Bearer YOUR_KEY). You can obtain an API key from"
    " https://platform.openai.com/account/api-keys."
)
_BAD_JSON = (
    "We could not parse the JSON body of your request. (HINT: This likely means you aren't using"
    " your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was"
    " not valid JSON.)"
)


def owns(path: str) -> bool:
    """Paths this front answers (and authenticates) itself."""
    return path.startswith(_PREFIXES)


def http_error(exc: web.HTTPException, request: web.Request, request_id: str) -> web.Response:
    """An unknown path, a wrong method or a body over the size limit on this front, in OpenAI's
    envelope ("Invalid URL (POST /v1/foo)" is the real API's answer to a path it lacks)."""
    if exc.status == 413:
        text = "Request too large."
    else:
        text = f"Invalid URL ({request.method} {request.path})"
    return error_response(OpenAIError(exc.status, text), request_id)


def _bearer(request: web.Request) -> str | None:
    auth = request.headers.get("authorization", "")
    return auth[7:] if auth[:7].lower() == "bearer " else None


def _auth_problem(request: web.Request) -> web.Response | None:
    key = request.app[STATE].openai_key
    sim = request.app[PLATFORM]
    if sim.openai_auth == "none" or not key:
        return None
    ctx = request[CONTEXT]
    if request.path.startswith(AZURE_PREFIX):
        given = request.headers.get("api-key") or _bearer(request)
        if given is not None and hmac.compare_digest(given.encode(), key.encode()):
            return None
        return azure_auth_error(ctx.request_id)
    given = _bearer(request)
    if given is not None and hmac.compare_digest(given.encode(), key.encode()):
        return None
    if given is None:
        error = OpenAIError(401, _NO_KEY, None, "invalid_api_key")
    else:
        shown = f"{given[:3]}***{given[-4:]}" if len(given) > 8 else "***"
        error = OpenAIError(
            401,
            f"Incorrect API key provided: {shown}. You can find your API key at"
            " https://platform.openai.com/account/api-keys.",
            None,
            "invalid_api_key",
        )
    return error_response(error, ctx.request_id)


async def _early_faults(
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
        return error_response(fault_error(fault), ctx.request_id, fault.response_headers())
    return None


async def handle_chat(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    sim = request.app[PLATFORM]
    ctx = request[CONTEXT]
    refused = _auth_problem(request)
    if refused is not None:
        return refused
    fault = state.script.take("chat_completions", ctx.raw)
    early = await _early_faults(request, ctx, fault)
    if early is not None:
        return early
    if ctx.body_error is not None:
        return error_response(OpenAIError(400, _BAD_JSON), ctx.request_id)
    body = ctx.body
    problem = check_chat(body, flavour=sim.openai_flavour)
    if problem is not None:
        return error_response(problem, ctx.request_id)
    model = MODELS[body["model"]]
    prompt_segments = segments(body)
    prompt = total_tokens(prompt_segments)
    if prompt > model.context_window:
        return error_response(_too_long(model.context_window, prompt), ctx.request_id)

    reply = (
        reply_from_override(fault.reply)
        if fault and fault.reply
        else build_reply(reply_body(body, model))
    )
    cached = _cached(state, ctx, model, body, prompt_segments, prompt)
    counts = usage(prompt, cached, reply, body.get("n") or 1)
    done = completion(
        completion_id="chatcmpl-" + secrets.token_urlsafe(21).replace("-", "x").replace("_", "y"),
        created=int(time.time()),
        body=body,
        model=model,
        reply=reply,
        usage_=counts,
        reasoning_field=sim.openai_reasoning_field,
    )
    if state.gate is not None:
        await state.gate(body, counts)
    if body.get("stream"):
        return await _stream(request, ctx, body, done, fault)
    return await _json(request, ctx, done, fault)


def _cached(
    state: SimState,
    ctx: RequestContext,
    model: OpenAIModel,
    body: dict[str, Any],
    prompt_segments: list[Segment],
    prompt: int,
) -> int:
    """Cached prompt tokens as OpenAI reports them (automatic prefix caching)."""
    if ctx.record is not None:
        ctx.record["prompt_cache_key"] = body.get("prompt_cache_key")
    if prompt < 1024:  # OpenAI caches nothing shorter (providers.md §4)
        return 0
    # prompt_cache_key scopes the cache: requests sharing a key (and model) share prefixes, as
    # OpenAI routes them to the same cache.
    scope = f"{model.id}\x1f{body.get('prompt_cache_key') or ''}"
    ttl = TTL_24H if body.get("prompt_cache_retention") == "24h" else TTL_5M
    return cached_tokens(state.cache.account_prefix(scope, prompt_segments, ttl))


async def handle_responses(request: web.Request) -> web.StreamResponse:
    """POST /v1/responses (openai_responses.py): the Responses API, stored for
    previous_response_id unless `store` is false."""
    state = request.app[STATE]
    sim = request.app[PLATFORM]
    ctx = request[CONTEXT]
    refused = _auth_problem(request)
    if refused is not None:
        return refused
    fault = state.script.take("responses", ctx.raw)
    early = await _early_faults(request, ctx, fault)
    if early is not None:
        return early
    if ctx.body_error is not None:
        return error_response(OpenAIError(400, _BAD_JSON), ctx.request_id)
    body = ctx.body
    history: list[dict[str, Any]] = []
    previous = body.get("previous_response_id") if isinstance(body, dict) else None
    if previous is not None:
        stored = state.stored_responses.get(previous) if isinstance(previous, str) else None
        if stored is None:
            error = OpenAIError(
                404,
                f"Previous response with id '{previous}' not found.",
                "previous_response_id",
                "previous_response_not_found",
            )
            return error_response(error, ctx.request_id)
        history = stored
    problem = responses.check_response(body, history, flavour=sim.openai_flavour)
    if problem is not None:
        return error_response(problem, ctx.request_id)
    model = MODELS[body["model"]]
    items = responses.items_of(body, history)
    prompt_segments = responses.segments(body, items)
    prompt = total_tokens(prompt_segments)
    if prompt > model.context_window:
        return error_response(_too_long(model.context_window, prompt), ctx.request_id)
    reply = (
        reply_from_override(fault.reply)
        if fault and fault.reply
        else build_reply(responses.reply_body(body, items, model))
    )
    cached = _cached(state, ctx, model, body, prompt_segments, prompt)
    counts = responses_render.usage(prompt, cached, reply)
    done = responses_render.response(
        response_id="resp_" + secrets.token_hex(24),
        created=int(time.time()),
        body=body,
        model=model,
        reply=reply,
        usage_=counts,
    )
    if body.get("store", True):
        stored_items = state.stored_responses
        stored_items[done["id"]] = [*items, *done["output"]]
        while len(stored_items) > MAX_STORED_RESPONSES:
            del stored_items[next(iter(stored_items))]
    if state.gate is not None:
        await state.gate(body, counts)
    if not body.get("stream"):
        return await _json(request, ctx, done, fault)
    frames = responses_render.events(done)
    resp = web.StreamResponse(
        headers={**(fault.response_headers() if fault else {}), **SSE_HEADERS}
    )

    def error_frame(f: Fault) -> bytes:
        at = min(f.error_after_events or 0, len(frames))
        inner = stream_error(f)["error"]
        assert isinstance(inner, dict)
        return responses_render.error_frames(done, at, inner)

    try:
        await resp.prepare(request)
        if fault is None or not fault.shapes_stream:
            await resp.write(b"".join(frames))
        elif not await write_with_faults(request, resp, frames, fault, error_frame=error_frame):
            return resp
        await resp.write_eof()
    except ConnectionError:
        if ctx.record is not None:
            ctx.record["client_disconnected"] = True
    return resp


def _too_long(window: int, prompt: int) -> OpenAIError:
    return OpenAIError(
        400,
        f"This model's maximum context length is {window} tokens. However, your messages"
        f" resulted in {prompt} tokens. Please reduce the length of the messages.",
        "messages",
        CONTEXT_CODE,
    )


async def _json(
    request: web.Request, ctx: RequestContext, done: dict[str, Any], fault: Fault | None
) -> web.StreamResponse:
    payload = orjson.dumps(done)
    extra = fault.response_headers() if fault is not None else None
    if fault is None or not fault.shapes_stream:
        return web.Response(body=payload, content_type="application/json", headers=extra)
    # Stream-shaped faults on a non-streaming request, as on the Messages front.
    if fault.pause_after_events is not None:
        await request.app[STATE].pause(fault.pause)
    if fault.error_after_events is not None:
        return error_response(fault_error(fault, 500), ctx.request_id)
    if fault.drop_after_events is not None:
        resp = web.StreamResponse(headers={**(extra or {}), "content-type": "application/json"})
        resp.content_length = len(payload)
        await resp.prepare(request)
        await resp.write(payload[: len(payload) // 2])
        if request.transport is not None:
            request.transport.close()
        return resp
    return web.Response(body=payload, content_type="application/json", headers=extra)


async def _stream(
    request: web.Request,
    ctx: RequestContext,
    body: dict[str, Any],
    done: dict[str, Any],
    fault: Fault | None,
) -> web.StreamResponse:
    sim = request.app[PLATFORM]
    options = body.get("stream_options") or {}
    events = chunks(
        done,
        include_usage=bool(options.get("include_usage")),
        reasoning_field=sim.openai_reasoning_field,
    )
    extra = fault.response_headers() if fault is not None else {}
    resp = web.StreamResponse(headers={**extra, **SSE_HEADERS})
    # OpenAI ends the stream after an error event; vLLM still sends [DONE] (providers.md §1.3,
    # protocol.md 2.6).
    tail = b"data: [DONE]\n\n" if sim.openai_flavour == "vllm" else b""

    def error_frame(f: Fault) -> bytes:
        return b"data: " + orjson.dumps(stream_error(f)) + b"\n\n" + tail

    try:
        await resp.prepare(request)
        if fault is None or not fault.shapes_stream:
            await resp.write(b"".join(events))
        elif not await write_with_faults(request, resp, events, fault, error_frame=error_frame):
            return resp
        await resp.write_eof()
    except ConnectionError:
        if ctx.record is not None:
            ctx.record["client_disconnected"] = True
    return resp


def _model_entry(model_id: str) -> dict[str, Any]:
    model = MODELS[model_id]
    return {"id": model.id, "object": "model", "created": model.created, "owned_by": model.owned_by}


async def handle_models(request: web.Request) -> web.StreamResponse:
    refused = _auth_problem(request)
    if refused is not None:
        return refused
    return json_response({"object": "list", "data": [_model_entry(m) for m in MODELS]})


async def handle_model(request: web.Request) -> web.StreamResponse:
    refused = _auth_problem(request)
    if refused is not None:
        return refused
    model_id = request.match_info["model"]
    if model_id not in MODELS:
        error = OpenAIError(
            404,
            f"The model `{model_id}` does not exist or you do not have access to it.",
            "model",
            "model_not_found",
        )
        return error_response(error, request[CONTEXT].request_id)
    return json_response(_model_entry(model_id))


def add_routes(app: web.Application) -> None:
    for prefix in ("/v1", "/openai/v1"):
        app.router.add_post(f"{prefix}/chat/completions", handle_chat)
        app.router.add_post(f"{prefix}/responses", handle_responses)
        app.router.add_get(f"{prefix}/models", handle_models)
        app.router.add_get(f"{prefix}/models/{{model}}", handle_model)
