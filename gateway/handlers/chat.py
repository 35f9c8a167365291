"""POST /openai/v1/chat/completions: translated to a Messages request and back.

Runs through the same admission, routing, failover and billing as /v1/messages (Exchange);
translation itself happens in the pure modules of gateway.protocols.openai.
"""

from __future__ import annotations

import time
from contextlib import aclosing
from typing import Any

import orjson

from catalog.snapshot import ModelInfo
from gateway.chain import Candidate, ModelChain, Prepared, fitting
from gateway.context import request_context
from gateway.errors import GatewayError, openai_error_object
from gateway.exchange import (
    STREAM_FAILURES,
    AttemptFailed,
    ClientGone,
    Exchange,
    OpenStream,
    UsageTracker,
)
from gateway.handlers.chat_relay import relay, relays
from gateway.handlers.common import (
    OPENAI,
    RequestScope,
    answer_headers,
    authenticate,
    bar_fallbacks,
    committed_headers,
    guarded,
    input_estimate,
    model_chain,
    pinned,
    read_json,
    snapshot,
    stream_headers,
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
from gateway.protocols.fallbacks import RequestNeeds, translated_needs
from gateway.protocols.openai.common import default_max_tokens
from gateway.protocols.openai.inbound import (
    InvalidRequest,
    TranslatedRequest,
    attach_thinking,
    disable_thinking,
    translate_request,
)
from gateway.protocols.openai.outbound import thinking_blocks_by_tool_id, translate_response
from gateway.protocols.openai.stream import ChatStreamTranslator
from gateway.routing import has_thinking_signatures
from gateway.thinking_store import store as thinking_store

FMT = OPENAI


class _Request:
    """The chat request as the chain's models need it: the caller's body, the options of its
    translation, and what only the first translation fetched (image downloads, whether stored
    thinking was missing), so another model's translation reuses them."""

    __slots__ = ("auto_cache", "blocks", "body", "images", "thinking_by")

    def __init__(self, body: dict[str, Any], auto_cache: bool) -> None:
        self.body = body
        self.auto_cache = auto_cache
        self.images: dict[str, dict[str, Any]] = {}  # param → the downloaded image's source
        self.blocks: dict[str, list[dict[str, Any]]] = {}  # stored thinking by tool call id
        self.thinking_by: set[str] = set()  # the models that produced it

    def translate(self, model: ModelInfo) -> TranslatedRequest:
        try:
            return translate_request(self.body, caps(model), auto_cache=self.auto_cache)
        except InvalidRequest as exc:
            raise invalid(exc) from None

    def for_model(self, model: ModelInfo) -> Prepared:
        """Another model's request (a fallback, or a model of ezat/auto's chain)."""
        tr = self.translate(model)
        for ref in tr.images:
            ref.block["source"] = self.images[ref.param]
        # Signed thinking goes only to the model that produced it (this one, when the chain was
        # pinned to it; then the chain stops here): otherwise the blocks stay out, and a tool
        # loop whose thinking is not this model's runs without thinking.
        blocks = self.blocks if self.thinking_by == {model.id} else {}
        if not attach_thinking(tr.body, blocks, tr.thinking):
            disable_thinking(tr.body)
        return _prepared(tr)


def _prepared(tr: TranslatedRequest) -> Prepared:
    return Prepared(lambda route: upstream_body(tr.body, route), tr.reasoning_effort, tr)


async def _prepare(
    request: ApiRequest, req: _Request, model: ModelInfo, org_id: int, scope: RequestScope
) -> tuple[TranslatedRequest, int]:
    """Translate, restore thinking blocks, inline image URLs; also returns the worst-case input
    tokens (text by size, media by its pixels and pages)."""
    tr = req.translate(model)
    if tr.tool_call_ids_needing_thinking:
        stored = await thinking_store.lookup(org_id, tr.tool_call_ids_needing_thinking)
        req.blocks, req.thinking_by = stored.blocks, stored.models
        if not attach_thinking(tr.body, stored.blocks, tr.thinking):
            # The signed blocks are gone (expired, other process without Redis): the upstream
            # would refuse the turn, so this one request runs without thinking instead.
            disable_thinking(tr.body)
    await inline_images(tr.images, model, tr.media, len(request.body), scope)
    req.images = {ref.param: ref.block["source"] for ref in tr.images}
    return tr, input_estimate(len(request.body), tr.media, model)


def _sent_max_tokens(body: dict[str, Any], tr: TranslatedRequest) -> int | None:
    """The request's own output limit; None when it was defaulted."""
    if body.get("max_completion_tokens") is None and body.get("max_tokens") is None:
        return None
    return int(tr.body["max_tokens"])


def _candidates(
    models: ModelChain, req: _Request, tr: TranslatedRequest, raw_len: int
) -> list[Candidate]:
    sent = _sent_max_tokens(req.body, tr)

    def needs() -> RequestNeeds:
        return translated_needs(
            tr.body,
            tr.media,
            pending_images=len(tr.images),
            max_tokens=sent,
            honours_sampling=models.primary.sampling,
        )

    def estimate(model: ModelInfo) -> int:
        return input_estimate(raw_len, tr.media, model)

    found = []
    for model in fitting(models, needs, estimate):
        candidate = Candidate(
            model,
            models.response_name(model),
            build=req.for_model,
            estimate=estimate(model),
            max_tokens=sent if sent is not None else default_max_tokens(caps(model)),
        )
        if model.id == models.requested_id:
            candidate.prepared = _prepared(tr)
        found.append(candidate)
    return found


async def create_chat_completion(request: ApiRequest, send: Send) -> int:
    async def handle(scope: RequestScope) -> int:
        key = await authenticate(request, FMT)
        body = await read_json(request)
        name = model_name(body)
        assert isinstance(body, dict)
        models = await model_chain(request, await snapshot(), key, name, FMT, body)
        if relays(models):
            # OpenAI-kind models only: relayed as sent, not translated (chat_relay.py says why).
            args = {"api": "chat", "request_id": request.request_id, "key": key, "model_name": name}
            return await relay(request, send, scope, args, body, models)
        # The requested model, or for ezat/auto what its chain shares: a request valid for it
        # is valid for the models that may answer.
        model = models.primary
        auto_cache = request.headers.get("x-ezat-cache", "").strip().lower() != "off"
        req = _Request(body, auto_cache)
        tr, estimate = await _prepare(request, req, model, key.org_id, scope)
        raw_upstream_hint = orjson.dumps(tr.body) if tr.tool_call_ids_needing_thinking else b""
        signed = has_thinking_signatures(raw_upstream_hint)
        candidates, barred = _candidates(models, req, tr, len(request.body)), None
        if signed:
            # To the model whose thinking the conversation carries, and no further.
            candidates, barred = bar_fallbacks(pinned(candidates, req.thinking_by))
        exchange = Exchange(
            request_context(
                api="chat",
                request_id=request.request_id,
                headers=request.headers,
                key=key,
                models=models,
                candidates=candidates,
                body=tr.body,
                stream=tr.stream,
                signed=signed,
                effort=tr.reasoning_effort,
                session_hint=tr.session_hint,
                fallbacks_barred=barred,
            )
        )
        await scope.admit(
            exchange,
            input_estimate=estimate,
            max_tokens=tr.body["max_tokens"],
        )
        extra = FMT.rate_headers(scope.rate)
        if tr.stream:
            return await _stream(request, send, exchange, tr, extra)
        return await _json(request, send, exchange, extra)

    return await guarded(request, send, FMT, handle)


async def _json(request: ApiRequest, send: Send, exchange: Exchange, extra: Headers) -> int:
    reply = await exchange.call(exchange.body_for, None)
    await thinking_store.put(
        exchange.key.org_id,
        thinking_blocks_by_tool_id(reply.get("content") or []),
        exchange.model.id,
    )
    completion = translate_response(
        reply,
        request_id=request.request_id,
        model_name=exchange.model_name,
        created=int(time.time()),
    )
    await exchange.record(UsageTracker(usage=reply.get("usage") or {}, exact=True))
    headers = base_headers(request.request_id) + [JSON_CT] + extra + answer_headers(exchange)
    await send_response(send, 200, orjson.dumps(completion), headers)
    exchange.log(200)
    return 200


async def _stream(
    request: ApiRequest, send: Send, exchange: Exchange, tr: TranslatedRequest, extra: Headers
) -> int:
    created = int(time.time())
    writer = StreamWriter(
        send, base_headers(request.request_id) + SSE_HEADERS + extra + stream_headers(exchange)
    )
    try:
        opened = await exchange.open_committed(
            exchange.body_for, None, writer, ChatStreamTranslator.PING
        )
    except GatewayError as err:
        if not writer.opened:
            raise
        status = FMT.error_status(err)
        translator = _translator(request, exchange, created, tr)
        await exchange.fail_stream(writer, _stream_error(translator, err), status, err=err)
        return status
    committed_headers(writer, exchange)
    # Built at the first token: its chunks name the model that answers.
    translator = _translator(request, exchange, created, tr)
    return await _pump(request, exchange, opened, writer, translator)


def _translator(
    request: ApiRequest, exchange: Exchange, created: int, tr: TranslatedRequest
) -> ChatStreamTranslator:
    return ChatStreamTranslator(
        request_id=request.request_id,
        model_name=exchange.model_name,
        created=created,
        include_usage=tr.include_usage,
    )


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
    exchange.checkpoint(tracker)
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
                        await thinking_store.put(exchange.key.org_id, blocks, exchange.model.id)
                        await exchange.record(tracker)
                        await writer.write(
                            translator.usage_chunk()
                            + exchange.cost_comment()
                            + ChatStreamTranslator.DONE
                        )
                        await writer.close()
                        exchange.log(200)
                        return 200
                if out:
                    await writer.write(b"".join(out))
    except ClientGone:
        return await exchange.drain_after_disconnect(opened, tracker)
    except STREAM_FAILURES as exc:
        err = exchange.stream_failure(exc)
        payload = _stream_error(translator, err)
        await exchange.fail_stream(
            writer, payload, 502, client_gone=request.disconnected, err=err, tracker=tracker
        )
        return 200
    finally:
        opened.response.close()
    raise AssertionError("event_batches ends only by return or raise")
