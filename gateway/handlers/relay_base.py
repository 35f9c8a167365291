"""What the two relays share: a request to an OpenAI-kind model passed on untranslated.

Chat Completions (gateway/handlers/chat_relay.py) and Responses
(gateway/handlers/responses_relay.py) each supply a `RelaySurface`: how the reply's usage and
finish reason read, what is kept once answered (Responses: the stored response's pin), how an
error is told in the stream, and the stream's hooks into the one pump (gateway/handlers/pump.py).
The body goes out as the client sent it (`RelayBody`), the answer comes back as the provider sent
it with the model renamed; admission, holds, failover, the request log and billing are the
exchange's.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, Generic, TypeVar

import orjson

from accounts.keycache import KeyInfo
from catalog.snapshot import ModelInfo, Route
from gateway.chain import Candidate, ModelChain, Prepared
from gateway.context import RequestContext
from gateway.errors import GatewayError
from gateway.exchange import Exchange, OpenStream
from gateway.handlers.common import HIGH_EFFORTS, OPENAI, RequestScope, open_stream, send_answer
from gateway.handlers.pump import After, Billed, Failure, Rewrite, StreamHooks, pump
from gateway.handlers.translated import error_from_event
from gateway.http import ApiRequest, Headers, Send
from gateway.protocols.anthropic.sse import SSEEvent
from gateway.protocols.media import MediaTally
from gateway.providers.openai.cache_key import derives_cache_key
from gateway.providers.openai.relay import ModelRename
from gateway.usage import UsageTracker

FMT = OPENAI
PING = b": ping\n\n"
EZAT_FIELDS = frozenset({"models"})  # the gateway's own body fields, never relayed


def tally_media(
    contents: Iterable[object],
    model: ModelInfo,
    *,
    image: str,
    image_url: Callable[[dict[str, Any]], object],
    file: str,
    file_data: Callable[[dict[str, Any]], object] | None = None,
) -> MediaTally:
    """The images and files of a relayed body's content arrays, for the hold: each at its worst
    case (the provider fetches URLs itself; EZAT does not on these paths). `image`/`file`: the
    surface's part types; `image_url`/`file_data`: where a part keeps its data (a `data:` URL,
    inline file bytes), counted as payload."""
    media = MediaTally()
    for content in contents:
        for part in content if isinstance(content, list) else ():
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == image:
                media.add_image(model.media, None)
                url = image_url(part)
                if isinstance(url, str) and url.startswith("data:"):
                    media.payload_chars += len(url)
            elif kind == file:
                media.unsized_documents += 1
                data = file_data(part) if file_data is not None else None
                if isinstance(data, str):
                    media.payload_chars += len(data)
    return media


class RelayBody:
    """The relayed body per route: the client's, less EZAT's own fields, with the model renamed
    and `prompt_cache_key` derived from the session when absent. `extend`: a surface's own
    per-route changes."""

    __slots__ = ("base", "cache_key", "stream")

    def __init__(self, body: dict[str, Any], cache_key: str) -> None:
        base = body
        for name in EZAT_FIELDS:  # absent in most requests: no copy then
            if name in base:
                base = {k: v for k, v in body.items() if k not in EZAT_FIELDS}
                break
        self.base = base
        self.stream = bool(body.get("stream"))
        self.cache_key = cache_key

    def body_for(self, route: Route) -> bytes:
        # Serialised again, not spliced into the client's bytes: orjson.dumps of the copied
        # dict cost 0.7 µs (100-token prompt) to 14 µs (100k tokens), a byte splice of the same
        # changes 4 to 195 µs (bench/README.md, "OpenAI-kind paths beside the Claude path").
        # `models` is EZAT's fallback list (docs/api.md), not an OpenAI parameter: a strict
        # provider answers an unknown one with a 400.
        sent = dict(self.base)  # a C-level copy: cheaper than filtering in a comprehension
        sent["model"] = route.upstream_model_id
        self.extend(sent)
        if "prompt_cache_key" not in sent and derives_cache_key(route.deployment):
            sent["prompt_cache_key"] = self.cache_key
        return orjson.dumps(sent)

    def extend(self, sent: dict[str, Any]) -> None:
        """A surface's own changes to the body sent (none here)."""


B = TypeVar("B", bound=RelayBody)


class RelayStream(ABC):
    """A relayed stream's hooks into the pump: the provider's bytes, model renamed in each
    write (one pass per read: the name never spans two chunks); a failure is not billed (the
    provider does not bill a failed generation either, issue 30). A surface says how an error
    is told in its stream (`told`)."""

    __slots__ = ("exchange", "rewrite")

    ping = PING

    def __init__(self, exchange: Exchange) -> None:
        self.exchange = exchange
        self.rewrite: Rewrite = ModelRename(
            exchange.route.upstream_model_id if exchange.route else "", exchange.model_name
        )

    @abstractmethod
    def told(self, err: GatewayError) -> bytes:
        """The error as the surface's stream tells it (its last bytes)."""

    def feed(self, event: SSEEvent, data: dict[str, Any]) -> bytes:
        # The final event goes out after the cost comment (`end`).
        return b"" if event.name == "message_stop" else event.raw

    def error(self, event: SSEEvent, data: dict[str, Any]) -> Failure | None:
        return self.failure(error_from_event(data))

    def failure(self, err: GatewayError) -> Failure:
        return Failure(self.told(err), err, Billed.NOTHING)

    async def end(
        self, event: SSEEvent, data: dict[str, Any]
    ) -> tuple[bytes, bytes, After] | Failure:
        return b"", self.rename(event.raw), None

    def rename(self, raw: bytes) -> bytes:
        rewrite = self.rewrite
        return rewrite(raw) if rewrite is not None else raw


class RelaySurface(ABC, Generic[B]):
    """One relayed API: its hooks into the shared relay, for one request's relayed body.
    (`duplicates` pairs the two subclasses by shape: the same hooks' signatures, one
    interface implemented twice; what their bodies share is here.)"""

    __slots__ = ("relayed",)

    def __init__(self, relayed: B) -> None:
        self.relayed = relayed

    path: ClassVar[str]  # the provider's path

    # The reply's usage object as Anthropic usage (what the tracker bills).
    usage: ClassVar[Callable[[dict[str, Any]], dict[str, Any]]]

    @abstractmethod
    def finish(self, reply: dict[str, Any]) -> str:
        """The reply's finish reason, for the request log ("" for none)."""

    def after(self, exchange: Exchange, reply: dict[str, Any]) -> After:
        """What to await once a JSON answer is recorded, before it goes out (none here)."""
        return None

    @abstractmethod
    def open_error(self, exchange: Exchange, err: GatewayError) -> bytes:
        """An error before the first token, told in a stream keep-alives opened already."""

    @abstractmethod
    def stream_hooks(self, exchange: Exchange, opened: OpenStream) -> StreamHooks:
        """The committed stream's hooks into the pump."""


def relay_context(
    api: str,
    request: ApiRequest,
    key: KeyInfo,
    chain: ModelChain,
    candidates: list[Candidate],
    *,
    stream: bool,
    session: str,
    effort: object,
) -> RequestContext:
    return RequestContext(
        api=api,
        request_id=request.request_id,
        key=key,
        model_name=chain.name,
        stream=stream,
        session=session,
        high_effort=effort in HIGH_EFFORTS,
        candidates=candidates,
        requested_id=chain.requested_id,
        skipped=chain.skipped,
    )


async def serve_relayed(
    request: ApiRequest,
    send: Send,
    scope: RequestScope,
    surface: RelaySurface[Any],
    context: RequestContext,
    relayed: RelayBody,
    *,
    effort: object,
    input_estimate: int,
    max_tokens: int,
    headers: Headers | None = None,
) -> int:
    """Admit the relayed request, exchange it, answer it: JSON, or the stream pumped."""
    exchange = Exchange(context)
    exchange.upstream_path = surface.path
    prepared = Prepared(relayed.body_for, effort if isinstance(effort, str) else None)
    for candidate in context.candidates:
        candidate.prepared = prepared
    await scope.admit(exchange, input_estimate=input_estimate, max_tokens=max_tokens)
    extra = FMT.rate_headers(scope.rate)
    if headers:
        extra = [*extra, *headers]
    if relayed.stream:
        return await _stream(request, send, surface, exchange, extra)
    return await _json(request, send, surface, exchange, extra)


async def _json(
    request: ApiRequest, send: Send, surface: RelaySurface[Any], exchange: Exchange, extra: Headers
) -> int:
    reply = await exchange.call(exchange.body_for, None)
    usage = reply.get("usage")
    tracker = UsageTracker(exact=isinstance(usage, dict))
    if isinstance(usage, dict):
        tracker.usage = surface.usage(usage)
    tracker.stop_reason = surface.finish(reply)
    reply["model"] = exchange.model_name
    await exchange.record(tracker)
    after = surface.after(exchange, reply)
    if after is not None:
        await after()
    return await send_answer(request, send, exchange, extra, orjson.dumps(reply))


async def _stream(
    request: ApiRequest, send: Send, surface: RelaySurface[Any], exchange: Exchange, extra: Headers
) -> int:
    def told(err: GatewayError) -> bytes:
        return surface.open_error(exchange, err)

    opened = await open_stream(request, send, exchange, extra, FMT, PING, told)
    if type(opened) is int:
        return opened
    writer, stream = opened
    return await pump(request, exchange, stream, writer, surface.stream_hooks(exchange, stream))
