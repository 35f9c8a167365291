"""POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API, passed through."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from catalog.snapshot import ModelInfo, Route
from gateway.chain import Candidate, ModelChain, Prepared, fitting
from gateway.context import RequestContext, request_context, sole
from gateway.errors import GatewayError
from gateway.exchange import (
    Exchange,
    UsageTracker,
)
from gateway.handlers.common import (
    ANTHROPIC,
    RequestScope,
    answer_headers,
    authenticate,
    bar_fallbacks,
    committed_headers,
    counting_model,
    guarded,
    input_estimate,
    invalid_media,
    model_chain,
    read_json,
    snapshot,
    stream_headers,
)
from gateway.handlers.pump import After, Billed, Failure, pump
from gateway.handlers.translated import error_from_event
from gateway.http import (
    JSON_CT,
    SSE_HEADERS,
    ApiRequest,
    Send,
    StreamWriter,
    base_headers,
    send_response,
)
from gateway.protocols.anthropic import validation
from gateway.protocols.anthropic.gateway_thinking import (
    may_hold_gateway_thinking,
    strip_gateway_thinking,
)
from gateway.protocols.anthropic.media import tally_messages
from gateway.protocols.anthropic.rewrite import with_model
from gateway.protocols.anthropic.sse import PING_EVENT, SSEEvent, error_event, frame
from gateway.protocols.fallbacks import RequestNeeds, mapped_effort, messages_needs
from gateway.protocols.media import InvalidMedia, MediaTally
from gateway.routing import has_thinking_signatures, session_key

FMT = ANTHROPIC


async def create_message(request: ApiRequest, send: Send) -> int:
    async def handle(scope: RequestScope) -> int:
        key = await authenticate(request, FMT)
        body = await read_json(request)
        checked = validation.check_body(body)
        assert isinstance(body, dict) and checked.max_tokens is not None
        snap = await snapshot()
        models = await model_chain(request, snap, key, checked.model, FMT)
        # The requested model, or for ezat/auto what its chain shares: a request valid for it
        # is valid for the models that may answer.
        model = models.primary
        validation.check_max_tokens(checked.max_tokens, model.id, model.max_output_tokens)
        try:
            media = tally_messages(body, model.media)
        except InvalidMedia as exc:
            raise invalid_media(exc) from None
        validation.check_model_rules(
            body,
            model_id=model.id,
            forced_tool_choice=model.forced_tool_choice,
            thinking_can_be_disabled=model.thinking_can_be_disabled,
        )
        stripped = not model.prompt_caching and validation.strip_cache_control(body)
        raw = request.body
        if may_hold_gateway_thinking(raw) and strip_gateway_thinking(body):
            # Thinking EZAT made from a provider's reasoning: no provider takes it back.
            raw, stripped = orjson.dumps(body), True
        output_config = body.get("output_config")
        effort = output_config.get("effort") if isinstance(output_config, dict) else None
        signed = has_thinking_signatures(raw)
        candidates = _candidates(
            models,
            body,
            raw,
            stripped,
            media,
            max_tokens=checked.max_tokens,
            raw_len=len(request.body),
            effort=effort if isinstance(effort, str) else None,
        )
        barred = None
        if signed:
            candidates, barred = bar_fallbacks(candidates)
        exchange = Exchange(
            request_context(
                api="messages",
                request_id=request.request_id,
                headers=request.headers,
                key=key,
                models=models,
                candidates=candidates,
                body=body,
                stream=checked.stream,
                signed=signed,
                effort=effort,
                fallbacks_barred=barred,
            )
        )
        await scope.admit(
            exchange,
            input_estimate=input_estimate(len(request.body), media, model),
            max_tokens=checked.max_tokens,
        )
        beta = request.headers.get("anthropic-beta")
        if checked.stream:
            return await _stream(request, send, exchange, exchange.body_for, beta)
        return await _json(request, send, exchange, exchange.body_for, beta)

    return await guarded(request, send, FMT, handle)


def _upstream_body(body: dict[str, Any], upstream_model: str) -> bytes:
    body["model"] = upstream_model
    return orjson.dumps(body)


BodyFor = Callable[[Route], bytes]


def _body_for(body: dict[str, Any], raw: bytes | None) -> BodyFor:
    """The upstream body per deployment: the caller's bytes with only the model replaced when
    nothing else changed (no re-serialisation of a large prompt), else `body` serialised."""

    def build(route: Route) -> bytes:
        if raw is not None:
            spliced = with_model(raw, route.upstream_model_id)
            if spliced is not None:
                return spliced
        return _upstream_body(body, route.upstream_model_id)

    return build


def _candidates(
    models: ModelChain,
    body: dict[str, Any],
    raw: bytes,
    stripped: bool,
    media: MediaTally,
    *,
    max_tokens: int,
    raw_len: int,
    effort: str | None,
) -> list[Candidate]:
    """The models that may answer, each with its body: the requested model the caller's
    (spliced into the bytes as sent unless breakpoints were stripped), the others their own,
    parsed from the bytes as sent when they are tried, with the effort mapped to their
    nearest level and breakpoints dropped where they have no prompt caching."""
    primary = models.primary

    def estimate(model: ModelInfo) -> int:
        return input_estimate(raw_len, media, model)

    def needs() -> RequestNeeds:
        return messages_needs(body, media, max_tokens=max_tokens, honours_sampling=primary.sampling)

    found = []
    for model in fitting(models, needs, estimate):
        candidate = Candidate(
            model,
            models.response_name(model),
            estimate=estimate(model),
            max_tokens=max_tokens,
        )
        if model.id == models.requested_id:
            candidate.prepared = Prepared(_body_for(body, None if stripped else raw), effort)
        else:
            candidate.build = _other_model(raw, effort)
        found.append(candidate)
    return found


def _other_model(raw: bytes, effort: str | None) -> Callable[[ModelInfo], Prepared]:
    def build(model: ModelInfo) -> Prepared:
        own = orjson.loads(raw)  # the caller's body as sent: only requests that fall back pay it
        applied = effort
        if effort is not None:
            applied = mapped_effort(model, effort)
            own["output_config"]["effort"] = applied
        if not model.prompt_caching:
            validation.strip_cache_control(own)
        return Prepared(_body_for(own, None), applied)

    return build


async def _json(
    request: ApiRequest, send: Send, exchange: Exchange, body_for: BodyFor, beta: str | None
) -> int:
    reply = await exchange.call(body_for, beta)
    reply["model"] = exchange.model_name
    await exchange.record(UsageTracker(usage=reply.get("usage") or {}, exact=True))
    headers = (
        base_headers(request.request_id)
        + [JSON_CT]
        + FMT.rate_headers(exchange.rate)
        + answer_headers(exchange)
    )
    await send_response(send, 200, orjson.dumps(reply), headers)
    exchange.log(200)
    return 200


async def _stream(
    request: ApiRequest, send: Send, exchange: Exchange, body_for: BodyFor, beta: str | None
) -> int:
    writer = StreamWriter(
        send,
        base_headers(request.request_id)
        + SSE_HEADERS
        + FMT.rate_headers(exchange.rate)
        + stream_headers(exchange),
    )

    try:
        opened = await exchange.open_committed(body_for, beta, writer, PING_EVENT)
    except GatewayError as err:
        if not writer.opened:
            raise
        # Keep-alives already opened the response: the error goes in the stream.
        await exchange.fail_stream(
            writer, error_event(err.type, err.message, request.request_id), err.status, err=err
        )
        return err.status
    committed_headers(writer, exchange)
    hooks = _PassedThrough(request.request_id, exchange.model_name)
    return await pump(request, exchange, opened, writer, hooks)


class _PassedThrough:
    """The Messages stream's hooks into the pump: events as the upstream sent them, but for the
    model's name in `message_start`."""

    __slots__ = ("model_name", "request_id")

    ping = PING_EVENT
    rewrite = None

    def __init__(self, request_id: str, model_name: str) -> None:
        self.request_id = request_id
        self.model_name = model_name

    def feed(self, event: SSEEvent, data: dict[str, Any]) -> bytes:
        name = event.name
        if name == "message_start" and isinstance(data.get("message"), dict):
            data["message"]["model"] = self.model_name
            return frame(name, data)
        return b"" if name == "message_stop" else event.raw

    def error(self, event: SSEEvent, data: dict[str, Any]) -> Failure:
        # The upstream's own error event.
        return Failure(event.raw, error_from_event(data), Billed.OUTPUT)

    def failure(self, err: GatewayError) -> Failure:
        return Failure(error_event("api_error", err.message, self.request_id), err, Billed.OUTPUT)

    async def end(self, event: SSEEvent, data: dict[str, Any]) -> tuple[bytes, bytes, After]:
        return b"", event.raw, None


async def count_tokens(request: ApiRequest, send: Send) -> int:
    """Free (never billed or listed), but it counts toward the key's requests per minute."""

    async def handle(scope: RequestScope) -> int:
        key = await authenticate(request, FMT)
        body = await read_json(request)
        checked = validation.check_body(body, count_tokens=True)
        assert isinstance(body, dict)
        model = await counting_model(await snapshot(), key, checked.model, FMT)
        try:
            tally_messages(body, model.media)  # the same base64 checks as a billed request
        except InvalidMedia as exc:
            raise invalid_media(exc) from None
        body.pop("max_tokens", None)
        body.pop("stream", None)
        if not model.prompt_caching:
            validation.strip_cache_control(body)
        exchange = Exchange(
            RequestContext(
                api="count_tokens",
                request_id=request.request_id,
                key=key,
                model_name=checked.model,
                stream=False,
                session=session_key(request.headers.get("x-ezat-session"), None, body),
                candidates=sole(model, checked.model),
            )
        )
        await scope.admit(exchange, input_estimate=0, max_tokens=0, billable=False)

        payload = await exchange.count_tokens(body)
        headers = (
            base_headers(request.request_id)
            + [JSON_CT]
            + FMT.rate_headers(scope.rate)
            + answer_headers(exchange)
        )
        await send_response(send, 200, payload, headers)
        return 200

    return await guarded(request, send, FMT, handle)
