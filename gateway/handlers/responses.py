"""The OpenAI Responses API: `POST /openai/v1/responses` translated to Messages and back, the
stored-response endpoints and `POST /openai/v1/responses/input_tokens`.

Runs through the same admission, routing, failover, limits and billing as the other APIs
(Exchange, api="responses"); translation happens in the pure modules of
gateway.protocols.openai_responses. Reasoning a stateless client must carry is sealed
(gateway/sealing.py); stored responses (`store: true`) go through gateway/stored_responses.py.
"""

from __future__ import annotations

import time
from contextlib import aclosing
from typing import Any

import orjson

from accounts.keycache import KeyInfo
from catalog.snapshot import ModelInfo, Route
from gateway import stored_responses
from gateway.chain import Candidate, ModelChain, Prepared, fitting
from gateway.context import RequestContext, request_context, sole
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
    OPENAI,
    RequestScope,
    answer_headers,
    authenticate,
    bar_fallbacks,
    committed_headers,
    counting_model,
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
from gateway.protocols.openai.common import default_max_tokens, disable_thinking
from gateway.protocols.openai.types import InvalidRequest
from gateway.protocols.openai_responses import inbound
from gateway.protocols.openai_responses.outbound import translate_response
from gateway.protocols.openai_responses.stream import ResponsesStreamTranslator
from gateway.protocols.openai_responses.types import TranslatedResponsesRequest
from gateway.routing import session_key
from gateway.sealing import ChainOpener, Sealer

FMT = OPENAI
API = "responses"
PREFIX = "/openai/v1/responses/"


class _Request:
    """The Responses request as the chain's models need it: the caller's body, the stored state
    it continues, and what only the first translation fetched (image downloads).

    `sent_len` is the size of everything that goes upstream as text: the client's body plus the
    stored history and referenced items it expands to. Holds and size checks use it, not the
    body's bytes: a tiny body naming a large stored context costs the context (issue 31).
    """

    __slots__ = ("auto_cache", "body", "history", "images", "opener", "referenced", "sent_len")

    def __init__(
        self,
        body: dict[str, Any],
        auto_cache: bool,
        history: list[dict[str, Any]] | None,
        referenced: dict[str, dict[str, Any]],
        opener: ChainOpener,
        body_len: int,
    ) -> None:
        self.body = body
        self.auto_cache = auto_cache
        self.history = history
        self.referenced = referenced
        self.opener = opener
        self.images: dict[str, dict[str, Any]] = {}
        self.sent_len = body_len + stored_len(history, referenced)

    def translate(self, model: ModelInfo) -> TranslatedResponsesRequest:
        try:
            tr = inbound.translate_request(
                self.body,
                caps(model),
                history=self.history,
                referenced=self.referenced,
                unseal=self.opener.open,
                auto_cache=self.auto_cache,
            )
        except InvalidRequest as exc:
            raise invalid(exc) from None
        if tr.thinking and tr.tool_turn_without_thinking:
            # The tool turn's reasoning was not sent back (no encrypted_content): the upstream
            # would refuse the turn, so this one request runs without thinking instead.
            disable_thinking(tr.body)
            tr.thinking = False
        return tr

    def for_model(self, model: ModelInfo) -> Prepared:
        """Another model's request (a fallback, a model of ezat/auto's chain, or the model the
        conversation's thinking was sealed for)."""
        tr = self.translate(model)
        for ref in tr.images:
            ref.block["source"] = self.images[ref.param]
        return _prepared(tr)


def stored_len(history: list[dict[str, Any]] | None, referenced: dict[str, dict[str, Any]]) -> int:
    """The serialized size of the stored items a request expands to. Serialized again only for
    requests that continue stored state (they already paid a database lookup); its base64
    media is counted here as in the media tally, so the text estimate stays consistent.
    Instructions are not carried over from a previous response (OpenAI's rule, see
    inbound.translate_request), so the history is all a continuation adds."""
    size = len(orjson.dumps(history)) if history else 0
    if referenced:
        size += len(orjson.dumps(list(referenced.values())))
    return size


def _prepared(tr: TranslatedResponsesRequest) -> Prepared:
    return Prepared(lambda route: upstream_body(tr.body, route), tr.reasoning_effort, tr)


async def _request(
    request: ApiRequest, body: dict[str, Any], key: KeyInfo, opener: ChainOpener
) -> _Request:
    """Look up the stored state the request continues (404 when it is gone)."""
    previous = body.get("previous_response_id")
    if previous is not None and (not isinstance(previous, str) or not previous):
        raise GatewayError(
            400, "previous_response_id: must be a string", param="previous_response_id"
        )
    history, referenced = await stored_responses.continuation(
        key.org_id, previous, inbound.references(body)
    )
    if previous and history is None:
        raise GatewayError(
            404,
            f"previous_response_id: no stored response {previous!r} in this organization (it "
            "was not stored, was deleted or has expired); send the conversation as input",
            param="previous_response_id",
        )
    auto_cache = request.headers.get("x-ezat-cache", "").strip().lower() != "off"
    return _Request(body, auto_cache, history, referenced, opener, len(request.body))


async def _translate(
    request: ApiRequest, req: _Request, model: ModelInfo, scope: RequestScope
) -> tuple[TranslatedResponsesRequest, int]:
    """Translate, inline image URLs; also returns the worst-case input tokens (text by size,
    stored history included, media by its pixels and pages)."""
    tr = req.translate(model)
    await inline_images(tr.images, model, tr.media, req.sent_len, scope)
    req.images = {ref.param: ref.block["source"] for ref in tr.images}
    return tr, input_estimate(req.sent_len, tr.media, model)


def _sent_max_tokens(body: dict[str, Any], tr: TranslatedResponsesRequest) -> int | None:
    return None if body.get("max_output_tokens") is None else int(tr.body["max_tokens"])


def _candidates(
    models: ModelChain, req: _Request, tr: TranslatedResponsesRequest
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
        return input_estimate(req.sent_len, tr.media, model)

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


def _signed(tr: TranslatedResponsesRequest) -> bool:
    return any(
        b.get("type") in ("thinking", "redacted_thinking")
        for m in tr.body["messages"]
        if m["role"] == "assistant"
        for b in m["content"]
    )


async def create_response(request: ApiRequest, send: Send) -> int:
    async def handle(scope: RequestScope) -> int:
        key = await authenticate(request, FMT)
        body = await read_json(request)
        name = model_name(body)
        assert isinstance(body, dict)
        models = await model_chain(request, await snapshot(), key, name, FMT, body)
        # The requested model, or for ezat/auto what its chain shares: a request valid for it
        # is valid for the models that may answer.
        model = models.primary
        opener = ChainOpener(key.org_id, [m.id for m in models.models])
        req = await _request(request, body, key, opener)
        tr, estimate = await _translate(request, req, model, scope)
        # Signed thinking blocks are valid only on the platform and with the model that signed
        # them: the request goes to the model its reasoning was sealed for, and no further.
        signed = _signed(tr)
        candidates, barred = _candidates(models, req, tr), None
        if signed:
            candidates, barred = bar_fallbacks(
                pinned(candidates, {opener.opened_by} if opener.opened_by else set())
            )
        exchange = Exchange(
            request_context(
                api=API,
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
        if tr.dropped_tools:
            # Hosted tools EZAT does not run or bill (docs/api.md), left out, never refused.
            extra = [*extra, (b"x-ezat-dropped-tools", ",".join(tr.dropped_tools).encode())]
        if tr.stream:
            return await _stream(request, send, exchange, tr, extra)
        return await _json(request, send, exchange, tr, extra)

    return await guarded(request, send, FMT, handle)


def _seal(exchange: Exchange, tr: TranslatedResponsesRequest) -> Any:
    """Seal only when someone will read it (the client, or a stored continuation), for the
    model that answered: its thinking opens only with it."""
    if not (tr.include_encrypted or tr.store):
        return None
    return Sealer(exchange.key.org_id, exchange.model.id).seal


def _store(
    exchange: Exchange,
    tr: TranslatedResponsesRequest,
    response: dict[str, Any],
    output: list[dict[str, Any]],
) -> Any:
    if not tr.store:
        return None
    return stored_responses.writer.save(
        org_id=exchange.key.org_id,
        response_id=response["id"],
        model_id=exchange.model.id,
        response=response,
        context={"items": tr.items, "output": output},
    )


async def _json(
    request: ApiRequest,
    send: Send,
    exchange: Exchange,
    tr: TranslatedResponsesRequest,
    extra: Headers,
) -> int:
    reply = await exchange.call(exchange.body_for, None)
    tr = exchange.candidate.prepare().request  # the answering model's translation
    response, output = translate_response(
        reply,
        request_id=request.request_id,
        model_name=exchange.model_name,
        created_at=int(time.time()),
        echo=tr.echo,
        seal=_seal(exchange, tr),
        summary=tr.summary,
        include_encrypted=tr.include_encrypted,
        tools=tr.tool_map,
    )
    stored = _store(exchange, tr, response, output)
    await exchange.record(UsageTracker(usage=reply.get("usage") or {}, exact=True))
    if stored is not None:
        await stored_responses.writer.wait(stored)
    headers = base_headers(request.request_id) + [JSON_CT] + extra + answer_headers(exchange)
    await send_response(send, 200, orjson.dumps(response), headers)
    exchange.log(200)
    return 200


async def _stream(
    request: ApiRequest,
    send: Send,
    exchange: Exchange,
    tr: TranslatedResponsesRequest,
    extra: Headers,
) -> int:
    created_at = int(time.time())
    writer = StreamWriter(
        send, base_headers(request.request_id) + SSE_HEADERS + extra + stream_headers(exchange)
    )
    ping = ResponsesStreamTranslator.PING
    try:
        opened = await exchange.open_committed(exchange.body_for, None, writer, ping)
    except GatewayError as err:
        if not writer.opened:
            raise
        status = FMT.error_status(err)
        translator = _translator(request, exchange, created_at, tr)
        await exchange.fail_stream(writer, _failure(translator, err), status, err=err)
        return status
    committed_headers(writer, exchange)
    # Built at the first token: its events name the model that answers, and its reasoning is
    # sealed for that model.
    tr = exchange.candidate.prepare().request
    translator = _translator(request, exchange, created_at, tr)
    return await _pump(request, exchange, opened, writer, translator, tr)


def _translator(
    request: ApiRequest, exchange: Exchange, created_at: int, tr: TranslatedResponsesRequest
) -> ResponsesStreamTranslator:
    return ResponsesStreamTranslator(
        request_id=request.request_id,
        model_name=exchange.model_name,
        created_at=created_at,
        echo=tr.echo,
        seal=_seal(exchange, tr),
        summary=tr.summary,
        include_encrypted=tr.include_encrypted,
        tools=tr.tool_map,
    )


def _failure(translator: ResponsesStreamTranslator, err: GatewayError) -> bytes:
    error = openai_error_object(err)
    code = error["code"] if isinstance(error["code"], str) else None
    return translator.failure(err.message, code, FMT.error_status(err))


async def _pump(
    request: ApiRequest,
    exchange: Exchange,
    opened: OpenStream,
    writer: StreamWriter,
    translator: ResponsesStreamTranslator,
    tr: TranslatedResponsesRequest,
) -> int:
    """Translate events after the commit point; the final event only after the usage record
    (and the stored copy) are written."""
    tracker = UsageTracker()
    exchange.checkpoint(tracker)
    disconnected = request.watch_disconnect()
    ping = ResponsesStreamTranslator.PING
    batches = exchange.event_batches(opened, writer, ping, disconnected)
    try:
        async with aclosing(batches):
            async for batch in batches:
                out: list[bytes] = []
                for event, data in batch:
                    name = event.name
                    if name == "error":
                        if out:
                            await writer.write(b"".join(out))
                        raise AttemptFailed(error_from_event(data), "error_event", retryable=False)
                    tracker.absorb(name, data)
                    translated = translator.feed(data)
                    if translated:
                        out.append(translated)
                    if name == "message_stop":
                        if out:
                            await writer.write(b"".join(out))
                        final = translator.final_event()
                        stored = (
                            _store(exchange, tr, translator.response_snapshot(""), translator.items)
                            if tr.store
                            else None  # store: false (Codex, the Agents SDK): no snapshot built
                        )
                        await exchange.record(tracker)
                        if stored is not None:
                            await stored_responses.writer.wait(stored)
                        await writer.write(exchange.cost_comment() + final)
                        await writer.close()
                        exchange.log(200)
                        return 200
                if out:
                    await writer.write(b"".join(out))
    except ClientGone:
        return await exchange.drain_after_disconnect(opened, tracker)
    except STREAM_FAILURES as exc:
        err = exchange.stream_failure(exc)
        payload = _failure(translator, err)
        await exchange.fail_stream(
            writer, payload, 502, client_gone=request.disconnected, err=err, tracker=tracker
        )
        return 200
    finally:
        opened.response.close()
    raise AssertionError("event_batches ends only by return or raise")


# -- stored responses ------------------------------------------------------------------------------


def _response_id(request: ApiRequest, suffix: str = "") -> str:
    rest = request.path.rstrip("/")[len(PREFIX) :]
    return rest[: -len(suffix)] if suffix else rest


async def get_response(request: ApiRequest, send: Send) -> int:
    async def handle(scope: RequestScope) -> int:
        key = await authenticate(request, FMT)
        response_id = _response_id(request)
        if b"stream=true" in request.query:
            raise GatewayError(
                400,
                "stream: replaying a stored response as a stream is only for background "
                "responses, which are not supported",
                param="stream",
            )
        stored = await stored_responses.response(key.org_id, response_id)
        if stored is None:
            raise _not_found(response_id)
        headers = base_headers(request.request_id) + [JSON_CT]
        await send_response(send, 200, orjson.dumps(stored), headers)
        return 200

    return await guarded(request, send, FMT, handle)


async def delete_response(request: ApiRequest, send: Send) -> int:
    async def handle(scope: RequestScope) -> int:
        key = await authenticate(request, FMT)
        response_id = _response_id(request)
        if not await stored_responses.delete(key.org_id, response_id):
            raise _not_found(response_id)
        body = {"id": response_id, "object": "response", "deleted": True}
        await send_response(
            send, 200, orjson.dumps(body), base_headers(request.request_id) + [JSON_CT]
        )
        return 200

    return await guarded(request, send, FMT, handle)


async def cancel_response(request: ApiRequest, send: Send) -> int:
    async def handle(scope: RequestScope) -> int:
        await authenticate(request, FMT)
        raise GatewayError(
            400,
            "only background responses can be cancelled, and background mode is not offered: "
            "every response here completes within its request",
            param="response_id",
        )

    return await guarded(request, send, FMT, handle)


def _not_found(response_id: str) -> GatewayError:
    return GatewayError(
        404,
        f"Response with id {response_id!r} not found (never stored, deleted, expired, or of "
        "another organization).",
        param="response_id",
    )


# -- input_tokens ----------------------------------------------------------------------------------


async def input_tokens(request: ApiRequest, send: Send) -> int:
    """Free (never billed or listed), but it counts toward the key's requests per minute."""

    async def handle(scope: RequestScope) -> int:
        key = await authenticate(request, FMT)
        body = await read_json(request)
        name = model_name(body)
        assert isinstance(body, dict)
        model = await counting_model(await snapshot(), key, name, FMT)
        body = {**body, "stream": False}
        req = await _request(request, body, key, ChainOpener(key.org_id, [model.id]))
        tr, _ = await _translate(request, req, model, scope)
        counted = {k: v for k, v in tr.body.items() if k not in ("max_tokens", "stream")}
        exchange = Exchange(
            RequestContext(
                api="responses_input_tokens",
                request_id=request.request_id,
                key=key,
                model_name=name,
                stream=False,
                session=session_key(
                    request.headers.get("x-ezat-session"), tr.session_hint, counted
                ),
                candidates=sole(model, name),
            )
        )
        await scope.admit(exchange, input_estimate=0, max_tokens=0, billable=False)

        async def attempt(route: Route) -> bytes:
            upstream = upstream_body(counted, route)
            _, payload = await exchange.post_json(
                route, "/v1/messages/count_tokens", upstream, None
            )
            return payload

        payload = await exchange.run(attempt)
        try:
            count = orjson.loads(payload).get("input_tokens")
        except (orjson.JSONDecodeError, AttributeError):
            count = None
        if type(count) is not int:
            raise GatewayError(502, "the provider answered with an invalid body", type_="api_error")
        answer = {"object": "response.input_tokens", "input_tokens": count}
        headers = (
            base_headers(request.request_id)
            + [JSON_CT]
            + FMT.rate_headers(scope.rate)
            + answer_headers(exchange)
        )
        await send_response(send, 200, orjson.dumps(answer), headers)
        return 200

    return await guarded(request, send, FMT, handle)
