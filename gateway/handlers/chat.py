"""POST /openai/v1/chat/completions: translated to a Messages request and back.

Runs through the same admission, routing, failover and billing as /v1/messages (Exchange);
translation itself happens in the pure modules of gateway.protocols.openai.
"""

from __future__ import annotations

import time
from contextlib import aclosing
from typing import Any

import orjson

from catalog.snapshot import ModelInfo, Route
from gateway.errors import GatewayError, openai_error_object
from gateway.exchange import (
    STREAM_FAILURES,
    AttemptFailed,
    ClientGone,
    Exchange,
    OpenStream,
    UsageTracker,
)
from gateway.handlers.common import (
    HIGH_EFFORTS,
    OPENAI,
    RequestScope,
    authenticate,
    guarded,
    input_estimate,
    read_json,
    resolve_model,
    snapshot,
)
from gateway.handlers.translated import (
    caps,
    error_from_event,
    inline_images,
    invalid,
    model_name,
    upstream_body,
)
from gateway.http import (
    JSON_CT,
    SSE_HEADERS,
    ApiRequest,
    Headers,
    Send,
    StreamWriter,
    base_headers,
    send_response,
)
from gateway.protocols.openai.inbound import (
    InvalidRequest,
    TranslatedRequest,
    attach_thinking,
    disable_thinking,
    translate_request,
)
from gateway.protocols.openai.outbound import thinking_blocks_by_tool_id, translate_response
from gateway.protocols.openai.stream import ChatStreamTranslator
from gateway.routing import has_thinking_signatures, session_key
from gateway.thinking_store import store as thinking_store

FMT = OPENAI


async def _prepare(
    request: ApiRequest, body: dict[str, Any], model: ModelInfo, org_id: int, scope: RequestScope
) -> tuple[TranslatedRequest, int]:
    """Translate, restore thinking blocks, inline image URLs; also returns the worst-case input
    tokens (text by size, media by its pixels and pages)."""
    auto_cache = request.headers.get("x-ezat-cache", "").strip().lower() != "off"
    try:
        tr = translate_request(body, caps(model), auto_cache=auto_cache)
    except InvalidRequest as exc:
        raise invalid(exc) from None
    if tr.tool_call_ids_needing_thinking:
        blocks = await thinking_store.get_many(org_id, tr.tool_call_ids_needing_thinking)
        if not attach_thinking(tr.body, blocks, tr.thinking):
            # The signed blocks are gone (expired, other process without Redis): the upstream
            # would refuse the turn, so this one request runs without thinking instead.
            disable_thinking(tr.body)
    await inline_images(tr.images, model, tr.media, len(request.body), scope)
    return tr, input_estimate(len(request.body), tr.media, model)


async def create_chat_completion(request: ApiRequest, send: Send) -> int:
    async def handle(scope: RequestScope) -> int:
        key = await authenticate(request, FMT)
        body = await read_json(request)
        name = model_name(body)
        assert isinstance(body, dict)
        model = resolve_model(await snapshot(), name, FMT)
        tr, estimate = await _prepare(request, body, model, key.org_id, scope)
        raw_upstream_hint = orjson.dumps(tr.body) if tr.tool_call_ids_needing_thinking else b""
        exchange = Exchange(
            api="chat",
            request_id=request.request_id,
            key=key,
            model=model,
            model_name=name,
            stream=tr.stream,
            session=session_key(request.headers.get("x-ezat-session"), tr.session_hint, tr.body),
            pin_kind=has_thinking_signatures(raw_upstream_hint),
            high_effort=tr.reasoning_effort in HIGH_EFFORTS,
        )
        await scope.admit(
            exchange,
            input_estimate=estimate,
            max_tokens=tr.body["max_tokens"],
        )
        extra = FMT.rate_headers(scope.rate)
        if tr.reasoning_effort is not None:
            extra.append((b"x-ezat-reasoning-effort", tr.reasoning_effort.encode()))
        if tr.stream:
            return await _stream(request, send, exchange, tr, extra)
        return await _json(request, send, exchange, tr, extra)

    return await guarded(request, send, FMT, handle)


def _upstream_body(tr: TranslatedRequest, route: Route) -> bytes:
    return upstream_body(tr.body, route)


async def _json(
    request: ApiRequest, send: Send, exchange: Exchange, tr: TranslatedRequest, extra: Headers
) -> int:
    reply = await exchange.call(lambda route: _upstream_body(tr, route), None)
    await thinking_store.put(
        exchange.key.org_id, thinking_blocks_by_tool_id(reply.get("content") or [])
    )
    completion = translate_response(
        reply,
        request_id=request.request_id,
        model_name=exchange.model_name,
        created=int(time.time()),
    )
    await exchange.record(UsageTracker(usage=reply.get("usage") or {}, exact=True))
    headers = base_headers(request.request_id) + [JSON_CT] + extra
    await send_response(send, 200, orjson.dumps(completion), headers)
    exchange.log(200)
    return 200


async def _stream(
    request: ApiRequest, send: Send, exchange: Exchange, tr: TranslatedRequest, extra: Headers
) -> int:
    translator = ChatStreamTranslator(
        request_id=request.request_id,
        model_name=exchange.model_name,
        created=int(time.time()),
        include_usage=tr.include_usage,
    )
    writer = StreamWriter(send, base_headers(request.request_id) + SSE_HEADERS + extra)

    try:
        opened = await exchange.open_committed(
            lambda route: _upstream_body(tr, route), None, writer, ChatStreamTranslator.PING
        )
    except GatewayError as err:
        if not writer.opened:
            raise
        status = FMT.error_status(err)
        await exchange.fail_stream(writer, _stream_error(translator, err), status)
        return status
    return await _pump(request, exchange, opened, writer, translator)


def _stream_error(translator: ChatStreamTranslator, err: GatewayError) -> bytes:
    """`data: {"error": …}` then `data: [DONE]`: openai-python raises APIError on the first."""
    error = openai_error_object(err)
    code = error["code"] if isinstance(error["code"], str) else None
    return translator.error_chunk(err.message, str(error["type"]), code) + ChatStreamTranslator.DONE


async def _pump(
    request: ApiRequest,
    exchange: Exchange,
    opened: OpenStream,
    writer: StreamWriter,
    translator: ChatStreamTranslator,
) -> int:
    """Translate events after the commit point; `[DONE]` only after the usage is recorded."""
    tracker = UsageTracker()
    disconnected = request.watch_disconnect()
    batches = exchange.event_batches(opened, writer, ChatStreamTranslator.PING, disconnected)
    try:
        async with aclosing(batches):
            async for batch in batches:
                out: list[bytes] = []
                for event, data in batch:
                    name = event.name
                    if name == "error":
                        if out:
                            # Chunks translated from the same read go out before the error: the
                            # client must not lose the role chunk and content it was owed.
                            await writer.write(b"".join(out))
                        raise AttemptFailed(error_from_event(data), "error_event", retryable=False)
                    tracker.absorb(name, data)
                    chunk = translator.feed(data)
                    if chunk:
                        out.append(chunk)
                    if name == "message_stop":
                        if out:
                            await writer.write(b"".join(out))
                        blocks = translator.thinking_blocks_by_tool_id
                        await thinking_store.put(exchange.key.org_id, blocks)
                        await exchange.record(tracker)
                        await writer.write(translator.usage_chunk() + ChatStreamTranslator.DONE)
                        await writer.close()
                        exchange.log(200)
                        return 200
                if out:
                    await writer.write(b"".join(out))
    except ClientGone:
        return await exchange.drain_after_disconnect(opened, tracker)
    except STREAM_FAILURES as exc:
        payload = _stream_error(translator, exchange.stream_failure(exc))
        await exchange.fail_stream(writer, payload, 502, client_gone=request.disconnected)
        return 200
    finally:
        opened.response.close()
    raise AssertionError("event_batches ends only by return or raise")
