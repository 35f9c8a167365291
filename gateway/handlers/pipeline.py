"""One handler pipeline for the translated APIs (Chat Completions, Responses).

Every request takes the same path, in this order and once each:

1. authenticate the key, read the JSON body, check the model name;
2. resolve the model chain (gateway/chain.py); a surface may serve it another way here
   (`Surface.divert`: Chat Completions relays to OpenAI-kind models untranslated);
3. translate it for the requested model (`Surface.conversion`, `Conversion.translate`), with
   image URLs downloaded once for every model of the chain;
4. build the chain's candidates and the request context (gateway/context.py), admit it;
5. exchange: one call, or a stream up to its first token, over the chain with failover;
6. translate the answer (`Surface.answer`) or every stream event (`Surface.translator`);
7. record the usage, then send the end of the answer.

A surface supplies only its hooks: how its body becomes a Messages request for a model, how a
reply and stream events become its own, how an error is told in its stream, what it keeps once
answered (Chat Completions: thinking blocks; Responses: stored responses). A new surface (the
Batch API next) writes a `Conversion` and a `Surface` and calls `serve`.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import orjson

from accounts.keycache import KeyInfo
from catalog.snapshot import ModelInfo
from gateway.chain import Candidate, ModelChain, Prepared, fitting
from gateway.context import request_context
from gateway.errors import GatewayError, openai_error_object
from gateway.exchange import Exchange, UsageTracker
from gateway.handlers.common import (
    OPENAI,
    RequestScope,
    authenticate,
    bar_fallbacks,
    guarded,
    input_estimate,
    model_chain,
    open_stream,
    pinned,
    read_json,
    send_answer,
    snapshot,
)
from gateway.handlers.pump import After, Billed, Failure, pump
from gateway.handlers.translated import (
    caps,
    error_from_event,
    inline_images,
    model_name,
    upstream_body,
)
from gateway.http import ApiRequest, Headers, Send
from gateway.protocols.anthropic.sse import SSEEvent
from gateway.protocols.fallbacks import RequestNeeds, translated_needs
from gateway.protocols.media import MediaTally
from gateway.protocols.openai.common import default_max_tokens
from gateway.protocols.openai.types import ImageRef

FMT = OPENAI


class Translation(Protocol):
    """What the pipeline reads of a surface's translated request."""

    body: dict[str, Any]  # the Anthropic Messages body, without "model"
    stream: bool
    session_hint: str | None
    reasoning_effort: str | None
    images: list[ImageRef]
    media: MediaTally


class EventTranslator(Protocol):
    """A surface's stream translator: Messages events in, its own SSE bytes out."""

    def feed(self, event: dict[str, Any]) -> bytes: ...


# Serves a request another way: (request, send, scope, key, body) → its status.
Diverted = Callable[[ApiRequest, Send, RequestScope, KeyInfo, dict[str, Any]], Awaitable[int]]

TR = TypeVar("TR", bound=Translation)
ST = TypeVar("ST", bound=EventTranslator)


def auto_cache(request: ApiRequest) -> bool:
    """Automatic prompt-cache breakpoints, unless the caller turned them off."""
    return request.headers.get("x-ezat-cache", "").strip().lower() != "off"


def prepared(tr: Translation) -> Prepared:
    return Prepared(lambda route: upstream_body(tr.body, route), tr.reasoning_effort, tr)


class Conversion(ABC, Generic[TR]):
    """A surface's request as the chain's models need it: the caller's body, its translation
    for any model, and what only the first translation fetched (image downloads), so another
    model's translation reuses them. `sent_len`: the size of the text that goes upstream, which
    the hold's estimate and the image allowance are reckoned from."""

    __slots__ = ("auto_cache", "body", "images", "sent_len")

    def __init__(self, body: dict[str, Any], auto_cache: bool, sent_len: int) -> None:
        self.body = body
        self.auto_cache = auto_cache
        self.sent_len = sent_len
        self.images: dict[str, dict[str, Any]] = {}  # param → the downloaded image's source

    @abstractmethod
    def translate(self, model: ModelInfo) -> TR:
        """The body as a Messages request for `model` (a 4xx naming the field when it cannot)."""

    @abstractmethod
    def sent_max_tokens(self, tr: TR) -> int | None:
        """The request's own output limit; None when it was defaulted."""

    async def restore(self, tr: TR) -> None:
        """The first translation's own lookups before its images are fetched (none here)."""

    def adapt(self, tr: TR, model: ModelInfo) -> None:
        """What another model's translation reuses of the first besides its images (none here)."""

    async def first(self, model: ModelInfo, scope: RequestScope) -> TR:
        """The translation for `model` (the requested one, or ezat/auto's shared caps), its
        image URLs downloaded (SSRF-safe) and bounded in its media tally."""
        tr = self.translate(model)
        await self.restore(tr)
        await inline_images(tr.images, model, tr.media, self.sent_len, scope)
        self.images = {ref.param: ref.block["source"] for ref in tr.images}
        return tr

    def for_model(self, model: ModelInfo) -> Prepared:
        """Another model's request (a fallback, or a model of ezat/auto's chain)."""
        tr = self.translate(model)
        for ref in tr.images:
            ref.block["source"] = self.images[ref.param]
        self.adapt(tr, model)
        return prepared(tr)


class Surface(ABC, Generic[TR, ST]):
    """One translated API: its hooks into the pipeline."""

    api: ClassVar[str]  # the usage record's label
    ping: ClassVar[bytes]  # its keep-alive (an SSE comment)

    async def divert(
        self, key: KeyInfo, body: dict[str, Any], models: ModelChain
    ) -> Diverted | None:
        """Another way to serve a request for these models than translated, or None (async: the
        Responses relay looks up where a stored conversation lives)."""
        return None

    @abstractmethod
    async def conversion(
        self, request: ApiRequest, key: KeyInfo, body: dict[str, Any], models: list[ModelInfo]
    ) -> Conversion[TR]:
        """The request, read and checked, for the models that may answer it."""

    @abstractmethod
    def thinking_by(self, conv: Conversion[TR], tr: TR) -> set[str] | None:
        """None when the conversation carries no signed thinking; else the models it may have
        come from (one: the chain is pinned to it), as signed thinking goes to one model only."""

    def headers(self, tr: TR) -> Headers:
        """The surface's own answer headers."""
        return []

    @abstractmethod
    async def answer(self, exchange: Exchange, reply: dict[str, Any], tr: TR) -> tuple[Any, After]:
        """A Messages reply as the surface's JSON answer, and what to await once recorded."""

    @abstractmethod
    def translator(self, exchange: Exchange, created: int, tr: TR) -> ST:
        """The stream translator for the model that answers."""

    @abstractmethod
    def stream_error(self, translator: ST, err: GatewayError) -> bytes:
        """The error as the surface's stream tells it (its last bytes)."""

    @abstractmethod
    async def stream_end(
        self, exchange: Exchange, translator: ST, tr: TR
    ) -> tuple[bytes, bytes, After]:
        """At `message_stop`, before the usage record: what goes out before the cost comment,
        the final event after it, and what to await once recorded."""


def openai_error_parts(err: GatewayError) -> tuple[str, str | None]:
    """The OpenAI envelope's `type` of an error, and its `code` when that is a string."""
    error = openai_error_object(err)
    code = error["code"]
    return str(error["type"]), code if isinstance(code, str) else None


async def read_request(request: ApiRequest) -> tuple[KeyInfo, dict[str, Any], str]:
    """The key (authenticated), the JSON body (a JSON object) and the model name it sends."""
    key = await authenticate(request, FMT)
    body = await read_json(request)
    name = model_name(body)
    assert isinstance(body, dict)
    return key, body, name


async def serve(request: ApiRequest, send: Send, surface: Surface[Any, Any]) -> int:
    async def handle(scope: RequestScope) -> int:
        key, body, name = await read_request(request)
        models = await model_chain(request, await snapshot(), key, name, FMT, body)
        diverted = await surface.divert(key, body, models)
        if diverted is not None:
            return await diverted(request, send, scope, key, body)
        # The requested model, or for ezat/auto what its chain shares: a request valid for it
        # is valid for the models that may answer.
        model = models.primary
        conv = await surface.conversion(request, key, body, models.models)
        tr = await conv.first(model, scope)
        thinking_by = surface.thinking_by(conv, tr)
        candidates, barred = _candidates(models, conv, tr), None
        if thinking_by is not None:
            # Signed thinking blocks are valid only with the model (and on the platform) that
            # signed them: the request goes to that model, and no further.
            candidates, barred = bar_fallbacks(pinned(candidates, thinking_by))
        exchange = Exchange(
            request_context(
                api=surface.api,
                request_id=request.request_id,
                headers=request.headers,
                key=key,
                models=models,
                candidates=candidates,
                body=tr.body,
                stream=tr.stream,
                signed=thinking_by is not None,
                effort=tr.reasoning_effort,
                session_hint=tr.session_hint,
                fallbacks_barred=barred,
            )
        )
        await scope.admit(
            exchange,
            input_estimate=input_estimate(conv.sent_len, tr.media, model),
            max_tokens=tr.body["max_tokens"],
        )
        extra = FMT.rate_headers(scope.rate) + surface.headers(tr)
        if tr.stream:
            return await _stream(request, send, surface, exchange, tr, extra)
        return await _json(request, send, surface, exchange, extra)

    return await guarded(request, send, FMT, handle)


def _candidates(models: ModelChain, conv: Conversion[Any], tr: Translation) -> list[Candidate]:
    sent = conv.sent_max_tokens(tr)

    def needs() -> RequestNeeds:
        return translated_needs(
            tr.body,
            tr.media,
            pending_images=len(tr.images),
            max_tokens=sent,
            honours_sampling=models.primary.sampling,
        )

    def estimate(model: ModelInfo) -> int:
        return input_estimate(conv.sent_len, tr.media, model)

    found = []
    for model in fitting(models, needs, estimate):
        candidate = Candidate(
            model,
            models.response_name(model),
            build=conv.for_model,
            estimate=estimate(model),
            max_tokens=sent if sent is not None else default_max_tokens(caps(model)),
        )
        if model.id == models.requested_id:
            candidate.prepared = prepared(tr)
        found.append(candidate)
    return found


async def _json(
    request: ApiRequest, send: Send, surface: Surface[Any, Any], exchange: Exchange, extra: Headers
) -> int:
    reply = await exchange.call(exchange.body_for, None)
    tr = exchange.candidate.prepare().request  # the answering model's translation
    answer, after = await surface.answer(exchange, reply, tr)
    await exchange.record(UsageTracker(usage=reply.get("usage") or {}, exact=True))
    if after is not None:
        await after()
    return await send_answer(request, send, exchange, extra, orjson.dumps(answer))


async def _stream(
    request: ApiRequest,
    send: Send,
    surface: Surface[Any, Any],
    exchange: Exchange,
    tr: Translation,
    extra: Headers,
) -> int:
    created = int(time.time())

    def told(err: GatewayError) -> bytes:
        # Keep-alives opened the response already: the error goes in the stream.
        return surface.stream_error(surface.translator(exchange, created, tr), err)

    started = await open_stream(request, send, exchange, extra, FMT, surface.ping, told)
    if type(started) is int:
        return started
    writer, opened = started
    # Built at the first token: its events name the model that answers (and the Responses API
    # seals its reasoning for that model).
    tr = exchange.candidate.prepare().request
    translator = surface.translator(exchange, created, tr)
    return await pump(
        request, exchange, opened, writer, _Translated(surface, exchange, translator, tr)
    )


class _Translated:
    """A translated stream's hooks into the pump: the surface's translator and its end."""

    __slots__ = ("_feed", "exchange", "ping", "surface", "tr", "translator")
    rewrite = None

    def __init__(
        self, surface: Surface[Any, Any], exchange: Exchange, translator: Any, tr: Translation
    ) -> None:
        self.surface = surface
        self.exchange = exchange
        self.translator = translator
        self._feed = translator.feed
        self.tr = tr
        self.ping = surface.ping

    def feed(self, event: SSEEvent, data: dict[str, Any]) -> bytes:
        return self._feed(data)

    def error(self, event: SSEEvent, data: dict[str, Any]) -> Failure:
        return self.failure(error_from_event(data))

    def failure(self, err: GatewayError) -> Failure:
        return Failure(self.surface.stream_error(self.translator, err), err, Billed.OUTPUT)

    async def end(self, event: SSEEvent, data: dict[str, Any]) -> tuple[bytes, bytes, After]:
        return await self.surface.stream_end(self.exchange, self.translator, self.tr)
