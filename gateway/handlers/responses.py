"""The OpenAI Responses API: `POST /openai/v1/responses` translated to Messages and back, the
stored-response endpoints and `POST /openai/v1/responses/input_tokens`.

The pipeline of the translated APIs (gateway/handlers/pipeline.py) runs it, with the same
admission, routing, failover, limits and billing as the other APIs (api="responses"); this module
holds the Responses API's hooks, and translation happens in the pure modules of
gateway.protocols.openai_responses. Reasoning a stateless client must carry is sealed
(gateway/sealing.py); stored responses (`store: true`) go through gateway/stored_responses.py.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from accounts.keycache import KeyInfo
from catalog.snapshot import ModelInfo
from gateway import stored_responses
from gateway.chain import ModelChain
from gateway.context import RequestContext, sole
from gateway.errors import GatewayError
from gateway.exchange import Exchange
from gateway.handlers import responses_relay
from gateway.handlers.common import (
    OPENAI,
    RequestScope,
    answer_headers,
    authenticate,
    counting_model,
    guarded,
    snapshot,
)
from gateway.handlers.pipeline import (
    After,
    Conversion,
    Diverted,
    Surface,
    auto_cache,
    openai_error_parts,
    read_request,
    serve,
)
from gateway.handlers.translated import caps, invalid
from gateway.http import JSON_CT, ApiRequest, Headers, Send, base_headers, send_response
from gateway.protocols.openai.common import disable_thinking
from gateway.protocols.openai.types import InvalidRequest
from gateway.protocols.openai_responses import inbound
from gateway.protocols.openai_responses.outbound import translate_response
from gateway.protocols.openai_responses.stream import ResponsesStreamTranslator
from gateway.protocols.openai_responses.types import Rendering, TranslatedResponsesRequest
from gateway.routing import session_key
from gateway.sealing import ChainOpener, Sealer

FMT = OPENAI
API = "responses"
PREFIX = "/openai/v1/responses/"


class _Responses(Conversion[TranslatedResponsesRequest]):
    """The Responses request for the chain's models: the caller's body and the stored state it
    continues.

    `sent_len` is the size of everything that goes upstream as text: the client's body plus the
    stored history and referenced items it expands to. Holds and size checks use it, not the
    body's bytes: a tiny body naming a large stored context costs the context (issue 31).
    """

    __slots__ = ("history", "opener", "referenced")

    def __init__(
        self,
        body: dict[str, Any],
        auto_cache: bool,
        history: list[dict[str, Any]] | None,
        referenced: dict[str, dict[str, Any]],
        opener: ChainOpener,
        body_len: int,
    ) -> None:
        super().__init__(body, auto_cache, body_len + stored_len(history, referenced))
        self.history = history
        self.referenced = referenced
        self.opener = opener

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

    def sent_max_tokens(self, tr: TranslatedResponsesRequest) -> int | None:
        return None if self.body.get("max_output_tokens") is None else int(tr.body["max_tokens"])


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


async def _conversion(
    request: ApiRequest, body: dict[str, Any], key: KeyInfo, opener: ChainOpener
) -> _Responses:
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
    return _Responses(body, auto_cache(request), history, referenced, opener, len(request.body))


def _rendering(exchange: Exchange, created_at: int, tr: TranslatedResponsesRequest) -> Rendering:
    """What the reply's translation and the stream's take from the request alike."""
    return Rendering(
        request_id=exchange.request_id,
        model_name=exchange.model_name,
        created_at=created_at,
        echo=tr.echo,
        seal=_seal(exchange, tr),
        summary=tr.summary,
        include_encrypted=tr.include_encrypted,
        tools=tr.tool_map,
    )


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
) -> After:
    """The stored copy (`store: true`), written while the usage is recorded; awaited after."""
    if not tr.store:
        return None
    stored = stored_responses.writer.save(
        org_id=exchange.key.org_id,
        response_id=response["id"],
        model_id=exchange.model.id,
        response=response,
        context={"items": tr.items, "output": output},
    )
    return lambda: stored_responses.writer.wait(stored)


class Responses(Surface[TranslatedResponsesRequest, ResponsesStreamTranslator]):
    api = API
    ping = ResponsesStreamTranslator.PING

    async def divert(
        self, key: KeyInfo, body: dict[str, Any], models: ModelChain
    ) -> Diverted | None:
        planned = await responses_relay.plan(key, body, models)
        if planned is None:
            return None

        # To the provider's /responses as sent, where every deployment has one
        # (responses_relay.py says when, and how a relayed conversation is continued).
        async def relayed(
            request: ApiRequest, send: Send, scope: RequestScope, key: KeyInfo, body: Any
        ) -> int:
            return await responses_relay.relay(request, send, scope, key, body, models, planned)

        return relayed

    async def conversion(
        self, request: ApiRequest, key: KeyInfo, body: dict[str, Any], models: list[ModelInfo]
    ) -> _Responses:
        opener = ChainOpener(key.org_id, [m.id for m in models])
        return await _conversion(request, body, key, opener)

    def thinking_by(
        self, conv: Conversion[TranslatedResponsesRequest], tr: TranslatedResponsesRequest
    ) -> set[str] | None:
        if not any(
            b.get("type") in ("thinking", "redacted_thinking")
            for m in tr.body["messages"]
            if m["role"] == "assistant"
            for b in m["content"]
        ):
            return None
        # The model its reasoning was sealed for.
        assert isinstance(conv, _Responses)
        opened_by = conv.opener.opened_by
        return {opened_by} if opened_by else set()

    def headers(self, tr: TranslatedResponsesRequest) -> Headers:
        if not tr.dropped_tools:
            return []
        # Hosted tools EZAT does not run or bill (docs/api.md), left out, never refused.
        return [(b"x-ezat-dropped-tools", ",".join(tr.dropped_tools).encode())]

    async def answer(
        self, exchange: Exchange, reply: dict[str, Any], tr: TranslatedResponsesRequest
    ) -> tuple[Any, After]:
        response, output = translate_response(reply, _rendering(exchange, int(time.time()), tr))
        return response, _store(exchange, tr, response, output)

    def translator(
        self, exchange: Exchange, created: int, tr: TranslatedResponsesRequest
    ) -> ResponsesStreamTranslator:
        return ResponsesStreamTranslator(_rendering(exchange, created, tr))

    def stream_error(self, translator: ResponsesStreamTranslator, err: GatewayError) -> bytes:
        _, code = openai_error_parts(err)
        return translator.failure(err.message, code, FMT.error_status(err))

    async def stream_end(
        self,
        exchange: Exchange,
        translator: ResponsesStreamTranslator,
        tr: TranslatedResponsesRequest,
    ) -> tuple[bytes, bytes, After]:
        final = translator.final_event()
        # store: false (Codex, the Agents SDK): no snapshot built.
        after = (
            _store(exchange, tr, translator.response_snapshot(""), translator.items)
            if tr.store
            else None
        )
        return b"", final, after


RESPONSES = Responses()


async def create_response(request: ApiRequest, send: Send) -> int:
    return await serve(request, send, RESPONSES)


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
        key, body, name = await read_request(request)
        model = await counting_model(await snapshot(), key, name, FMT)
        body = {**body, "stream": False}
        conv = await _conversion(request, body, key, ChainOpener(key.org_id, [model.id]))
        tr = await conv.first(model, scope)
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

        payload = await exchange.count_tokens(counted)
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
