"""What both API handlers share: auth, body parsing, model lookup, error and header rendering."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
from django.conf import settings

from accounts import ip_allow
from accounts.keycache import KeyInfo, KeyLookupUnavailable
from accounts.keycache import cache as key_cache
from billing.recorder import REFUSED_UNRECORDABLE
from billing.recorder import writer as usage_writer
from catalog.chains import is_auto
from catalog.snapshot import CatalogSnapshot, ModelInfo
from catalog.snapshot import holder as catalog
from gateway import chain, limits, outcome
from gateway.chain import Candidate, ModelChain
from gateway.errors import (
    GatewayError,
    anthropic_body,
    database_unavailable,
    openai_body,
    openai_status,
    usage_unrecordable,
)
from gateway.exchange import HIGH_EFFORTS, Exchange, OpenStream
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
from gateway.metrics import IN_FLIGHT, LIMITER_DECISIONS, child
from gateway.protocols.anthropic.validation import unknown_model
from gateway.protocols.media import InvalidMedia, MediaTally
from gateway.protocols.nesting import nesting_exceeds, nesting_message

__all__ = ["HIGH_EFFORTS"]  # re-exported: the handlers pick the start deadline with it


@dataclass(frozen=True, slots=True)
class ApiFormat:
    """How one API renders errors and rate-limit headers."""

    name: str  # "messages" (Anthropic format) or "chat" (OpenAI format)

    @property
    def is_openai(self) -> bool:
        return self.name == "chat"

    def error_status(self, err: GatewayError) -> int:
        return openai_status(err.status) if self.is_openai else err.status

    def error_body(self, err: GatewayError, request_id: str) -> bytes:
        return openai_body(err) if self.is_openai else anthropic_body(err, request_id)

    def rate_headers(self, rate: limits.RateInfo | None) -> Headers:
        if rate is None:
            return []
        remaining = str(max(rate.remaining, 0)).encode()
        if self.is_openai:
            seconds = max(0, int(rate.reset_at - time.time() + 0.999))
            return [
                (b"x-ratelimit-limit-requests", str(rate.limit).encode()),
                (b"x-ratelimit-remaining-requests", remaining),
                (b"x-ratelimit-reset-requests", f"{seconds}s".encode()),
            ]
        reset = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(rate.reset_at))
        return [
            (b"anthropic-ratelimit-requests-limit", str(rate.limit).encode()),
            (b"anthropic-ratelimit-requests-remaining", remaining),
            (b"anthropic-ratelimit-requests-reset", reset.encode()),
        ]

    async def send_error(
        self,
        send,
        request: ApiRequest,
        err: GatewayError,
        rate: limits.RateInfo | None = None,  # type: ignore[no-untyped-def]
    ) -> int:
        status = self.error_status(err)
        headers = base_headers(request.request_id) + [JSON_CT] + self.rate_headers(rate)
        headers += [(k.encode(), v.encode()) for k, v in err.headers.items()]
        await send_response(send, status, self.error_body(err, request.request_id), headers)
        return status


ANTHROPIC = ApiFormat("messages")
OPENAI = ApiFormat("chat")


async def authenticate(request: ApiRequest, fmt: ApiFormat) -> KeyInfo:
    secret = request.bearer_or_api_key()
    if not secret:
        raise GatewayError(
            401,
            "missing API key: send it as `x-api-key` or `Authorization: Bearer`",
            type_="authentication_error",
        )
    try:
        info = await key_cache.lookup(secret)
    except KeyLookupUnavailable:
        raise database_unavailable("the API key check") from None
    if info is None:
        raise GatewayError(
            401, "invalid API key", type_="authentication_error", code="invalid_api_key"
        )
    if info.revoked_at is not None:
        when = time.strftime("%Y-%m-%d at %H:%M UTC", time.gmtime(info.revoked_at))
        raise GatewayError(
            401,
            f"this API key was revoked on {when}; create a new key on the dashboard",
            type_="authentication_error",
            code="invalid_api_key",
        )
    if info.disabled:
        raise GatewayError(
            401,
            "this API key is disabled; an owner of its organization can enable it again",
            type_="authentication_error",
            code="invalid_api_key",
        )
    if info.expired(time.time()):
        assert info.expires_at is not None
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(info.expires_at))
        raise GatewayError(
            401,
            f"this API key expired at {when} (UTC); create a new key or extend its expiry",
            type_="authentication_error",
            code="invalid_api_key",
        )
    # Known before the address check: a refusal from outside the allow-list is the org's to see
    # in its request log (who tried the key from where), unlike a bad or revoked key.
    request.key = info
    check_address(request, info)
    return info


@functools.cache
def _trusted_proxies(configured: tuple[str, ...]) -> tuple[ip_allow.Network, ...]:
    return ip_allow.networks(configured)


def caller_address(request: ApiRequest) -> str | None:
    """The caller's address: the TCP peer, or X-Forwarded-For read through trusted proxies."""
    trusted = _trusted_proxies(tuple(settings.EZAT_TRUSTED_PROXIES))
    return ip_allow.client_address(request.peer, request.headers.get("x-forwarded-for"), trusted)


def check_address(request: ApiRequest, info: KeyInfo) -> None:
    """A key with an IP allow-list answers only from inside it: 403 naming the address, so the
    caller sees which address to add (it is their own; nothing is revealed)."""
    if not info.allowed_networks:
        return
    address = caller_address(request)
    if ip_allow.allows(address, info.allowed_networks):
        return
    raise GatewayError(
        403,
        f"this API key may not be used from {address or 'an unknown address'}: the address is "
        "not in the key's IP allow-list; an owner of its organization can add it",
        type_="permission_error",
        code="permission_denied",
    )


async def read_json(request: ApiRequest) -> object:
    """The parsed body of an inference request, within the size and nesting limits."""
    raw = await request.read_body(settings.EZAT_MAX_BODY_BYTES)
    if not raw:
        raise GatewayError(400, "request body is empty; send a JSON object")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        if "depth limit" in str(exc):  # orjson's own bound (1,024 levels)
            raise GatewayError(400, nesting_message("request body")) from None
        raise GatewayError(400, f"request body is not valid JSON: {exc}") from None
    if nesting_exceeds(body):
        raise GatewayError(400, nesting_message("request body"))
    return body


async def snapshot() -> CatalogSnapshot:
    return await catalog.get()


async def model_chain(
    request: ApiRequest,
    snap: CatalogSnapshot,
    key: KeyInfo,
    name: str,
    fmt: ApiFormat,
    body: dict[str, Any] | None = None,
) -> ModelChain:
    """The request's model chain (gateway/chain.py): its `models` list (the OpenAI APIs pass
    `body`), else its x-ezat-fallback-models header, else the org's policy. The body's list
    wins over the header: it is the more specific of the two."""
    explicit = chain.parse_body_list(body, snap) if body is not None else None
    if explicit is None:
        explicit = chain.parse_header(request.headers.get(chain.FALLBACK_HEADER), snap)
    return await chain.resolve_chain(snap, key, name, explicit, openai=fmt.is_openai)


async def counting_model(
    snap: CatalogSnapshot, key: KeyInfo, name: str, fmt: ApiFormat
) -> ModelInfo:
    """The model a token count runs on: the one named, or for ezat/auto its first model (the
    org's chain). Counting never falls back: it is free and answers from one model."""
    if not is_auto(name):
        model = resolve_model(snap, name, fmt)
        chain.check_allowed(key, model.id, name)
        return model
    models = await chain.resolve_chain(snap, key, name, None, openai=fmt.is_openai)
    return models.models[0]


def bar_fallbacks(candidates: list[Candidate]) -> tuple[list[Candidate], str | None]:
    """A conversation carrying signed thinking goes to one model only: thinking blocks are bound
    to the model that produced them (https://platform.claude.com/docs/en/build-with-claude/
    preserved-thinking: a model reads only its own blocks and a fixed set of others'), so a
    tool loop with thinking is never moved to another model. Returns the first candidate alone
    and, when there were others, why they are not tried (the error says it if the model cannot
    answer)."""
    if len(candidates) < 2:
        return candidates, None
    others = ", ".join(c.model.id for c in candidates[1:])
    return candidates[:1], (
        f"the fallback models ({others}) were not tried: this conversation carries signed "
        "thinking blocks, which only the model that produced them can continue"
    )


def pinned(candidates: list[Candidate], produced_by: set[str]) -> list[Candidate]:
    """The model the conversation's thinking was produced by goes first, when it is one model
    of the chain (bar_fallbacks then stops the chain there)."""
    if len(produced_by) != 1:
        return candidates
    (model_id,) = produced_by
    first = [c for c in candidates if c.model.id == model_id]
    return first + [c for c in candidates if c.model.id != model_id] if first else candidates


def answer_headers(exchange: Exchange) -> Headers:
    """x-ezat-model (the answering model's canonical id) and x-ezat-reasoning-effort (the level
    applied on it, when an effort was asked for)."""
    headers: Headers = [(b"x-ezat-model", exchange.model.id.encode())]
    if exchange.effort is not None:
        headers.append((b"x-ezat-reasoning-effort", exchange.effort.encode()))
    if exchange.tokens is not None:
        # A non-stream answer, recorded: its cost exactly as billed (streams: an SSE comment).
        headers.append((b"x-ezat-cost-usd", exchange.cost_usd))
        balance = exchange.balance_usd
        if balance is not None:  # the org's balance after this request's settlement
            headers.append((b"x-ezat-balance-usd", balance))
    return headers


def stream_headers(exchange: Exchange) -> Headers:
    """What a stream's headers say about the model before it is known: with a single model, the
    answer can only come from it, so the headers name it even if keep-alives open the stream
    before its first token. With fallbacks they wait for the first token (`committed_headers`):
    until then the model is not known, and the first chunk / message_start names it."""
    return [] if exchange.has_fallbacks else answer_headers(exchange)


def committed_headers(writer: StreamWriter, exchange: Exchange) -> None:
    """At the first token: name the answering model in the headers, unless keep-alives opened
    the stream already (then the first chunk / message_start does)."""
    if exchange.has_fallbacks and not writer.opened:
        writer.headers = writer.headers + answer_headers(exchange)


async def send_answer(
    request: ApiRequest, send: Send, exchange: Exchange, extra: Headers, answer: bytes
) -> int:
    """An exchange's JSON answer, with the rate's and the surface's `extra` headers and the
    routing's; then the request log."""
    headers = base_headers(request.request_id) + [JSON_CT] + extra + answer_headers(exchange)
    await send_response(send, 200, answer, headers)
    exchange.log(200)
    return 200


async def open_stream(
    request: ApiRequest,
    send: Send,
    exchange: Exchange,
    extra: Headers,
    fmt: ApiFormat,
    ping: bytes,
    told: Callable[[GatewayError], bytes],
) -> tuple[StreamWriter, OpenStream] | int:
    """An exchange's stream up to its first token (with failover): its writer and the open
    upstream stream, or the status it ended with when it failed after keep-alives opened the
    response (the error then goes in the stream, as `told` says)."""
    writer = StreamWriter(
        send, base_headers(request.request_id) + SSE_HEADERS + extra + stream_headers(exchange)
    )
    try:
        opened = await exchange.open_committed(exchange.body_for, None, writer, ping)
    except GatewayError as err:
        if not writer.opened:
            raise
        status = fmt.error_status(err)
        await exchange.fail_stream(writer, told(err), status, err=err)
        return status
    committed_headers(writer, exchange)
    return writer, opened


def resolve_model(snap: CatalogSnapshot, name: str, fmt: ApiFormat) -> ModelInfo:
    model = snap.resolve(name)
    if model is None:
        err = unknown_model(name)
        if fmt.is_openai:
            err.message = f"The model `{name}` does not exist or you do not have access to it."
        raise err
    return model


def invalid_media(exc: InvalidMedia) -> GatewayError:
    return GatewayError(400, exc.message, param=exc.param)


_CAP_PERIODS = {"month": "monthly (UTC calendar month)", "day": "daily (UTC)", "total": "total"}

_DECISIONS: dict[type, str] = {
    limits.RateLimited: "rate_limited",
    limits.InsufficientFunds: "insufficient_funds",
    limits.CapacityExhausted: "capacity",
}


def _retry_later(
    status: int,
    message: str,
    exc: limits.RateLimited
    | limits.ConcurrencyLimited
    | limits.FairShareLimited
    | limits.CapacityExhausted,
    type_: str = "rate_limit_error",
) -> tuple[GatewayError, limits.RateInfo | None]:
    """A refusal the client may retry after the limiter's `retry_after` seconds."""
    headers = {"retry-after": str(exc.retry_after)}
    return GatewayError(status, message, type_=type_, headers=headers), exc.rate


def admission_error(exc: limits.AdmissionError) -> tuple[GatewayError, limits.RateInfo | None]:
    if isinstance(exc, limits.RateLimited):
        return _retry_later(429, "requests per minute limit of this key exceeded", exc)
    if isinstance(exc, limits.ConcurrencyLimited):
        who = "key" if exc.scope == "key" else "organization"
        return _retry_later(
            429,
            f"{who} concurrency limit of {exc.limit} requests in flight reached; "
            "retry when one of them ends",
            exc,
        )
    if isinstance(exc, limits.FairShareLimited):
        if exc.shared:
            message = (
                f"fair share limit reached: while other organizations are using this model's "
                f"deployments, one organization may hold at most {exc.cap} of their "
                f"{exc.max_concurrency} requests in flight; retry shortly"
            )
        else:
            message = (
                f"fair share limit reached: one organization may hold at most {exc.cap} of "
                f"this model's {exc.max_concurrency} requests in flight per deployment (the rest "
                "is kept free for other organizations); retry shortly"
            )
        return _retry_later(429, message, exc)
    if isinstance(exc, limits.InsufficientFunds):
        message = (
            f"this key's {_CAP_PERIODS.get(exc.period, 'monthly')} spend cap would be exceeded "
            "by this request"
            if exc.scope == "key_cap"
            else "the organization's balance is too low for this request; add credit"
        )
        # x-should-retry: false — both SDKs would otherwise retry; waiting will not add money.
        return (
            GatewayError(
                402,
                message,
                type_="billing_error",
                code="insufficient_quota",
                headers={"x-should-retry": "false"},
            ),
            exc.rate,
        )
    if isinstance(exc, limits.CapacityExhausted):
        return _retry_later(
            529,
            "every deployment of this model is at capacity; retry shortly",
            exc,
            "overloaded_error",
        )
    return (
        GatewayError(
            503,
            "spend limits cannot be checked right now (limits store unreachable); retry later",
            type_="api_error",
            # Brief by nature (the store or the database is coming back): the SDKs may retry.
            headers={"x-should-retry": "true", "retry-after": "1"},
        ),
        None,
    )


def input_estimate(
    raw_len: int, media: MediaTally | None = None, model: ModelInfo | None = None
) -> int:
    """An upper bound on input tokens: the text from the body size (a token is rarely under 3
    bytes), plus each image's and PDF page's worst case. Base64 media is billed by its pixels and
    pages, not its bytes, so its characters do not count as text as well."""
    if media is None or model is None:
        return raw_len // 3 + 1
    return (raw_len - media.payload_chars) // 3 + 1 + media.tokens(model.media)


class RequestScope:
    """What an API handler has taken so far: its exchange (hold, slot), the rate it saw, and
    what to give back when the request ends (image memory)."""

    __slots__ = ("at_end", "exchange", "rate")

    def __init__(self) -> None:
        self.exchange: Exchange | None = None
        self.rate: limits.RateInfo | None = None
        self.at_end: list[Callable[[], None]] = []

    def end(self) -> None:
        callbacks, self.at_end = self.at_end, []
        for callback in callbacks:
            callback()

    async def admit(
        self, exchange: Exchange, *, input_estimate: int, max_tokens: int, billable: bool = True
    ) -> None:
        self.exchange = exchange
        if billable and not usage_writer.accepting():
            # Neither the database nor the usage spool can take a record now (billing/spool.py):
            # refused before any upstream work, so nothing is served that could not be billed.
            REFUSED_UNRECORDABLE.inc()
            raise usage_unrecordable()
        try:
            await exchange.admit(
                input_estimate=input_estimate, max_tokens=max_tokens, billable=billable
            )
        except limits.AdmissionError as exc:
            LIMITER_DECISIONS.labels(_DECISIONS.get(type(exc), "unavailable")).inc()
            err, self.rate = admission_error(exc)
            raise err from None
        child(LIMITER_DECISIONS, "admitted").inc()
        exchange.admitted_ms = int((time.perf_counter() - exchange.t0) * 1000)
        self.rate = exchange.rate


async def guarded(
    request: ApiRequest,
    send: Send,
    fmt: ApiFormat,
    handle: Callable[[RequestScope], Awaitable[int]],
) -> int:
    """Run an API handler: a GatewayError becomes the error answer in the caller's format, and
    whatever happens, a hold or capacity slot the request took is settled (at the recorded cost,
    after the response has gone out) or released. Then the request's metrics, log line and
    request-log row (gateway/outcome.py), whichever way it ended."""
    scope = RequestScope()
    started = time.perf_counter()
    IN_FLIGHT.inc()
    try:
        status = await handle(scope)
    except GatewayError as err:
        if scope.exchange is not None:
            await scope.exchange.settle()
            scope.exchange.log(fmt.error_status(err), err)
        status = await fmt.send_error(send, request, err, scope.rate)
        outcome.finish(
            request, http_status=status, exchange=scope.exchange, error=err, started=started
        )
        return status
    except asyncio.CancelledError:
        # The server cancelled the request: the client went away (or the server is stopping).
        # A committed stream pays for what it produced, as with any disconnect.
        if scope.exchange is not None:
            await asyncio.shield(scope.exchange.end_cancelled())
        gone = GatewayError(499, "the client disconnected before the answer", type_="client_gone")
        outcome.finish(
            request, http_status=499, exchange=scope.exchange, error=gone, started=started
        )
        raise
    except BaseException as exc:
        # A bug, or the database down (the app answers 503): never leave a hold or a capacity
        # slot behind, and log the answer the app is about to give.
        if scope.exchange is not None:
            await asyncio.shield(scope.exchange.settle())
        from django.db import DatabaseError
        from psycopg import Error as PsycopgError

        if isinstance(exc, DatabaseError | PsycopgError):
            told = database_unavailable("this request")
        else:
            told = GatewayError(500, "internal error", type_="api_error")
        outcome.finish(
            request,
            http_status=fmt.error_status(told),
            exchange=scope.exchange,
            error=told,
            started=started,
        )
        raise
    finally:
        IN_FLIGHT.dec()
        scope.end()
    if scope.exchange is not None:
        await scope.exchange.settle()
    outcome.finish(request, http_status=status, exchange=scope.exchange, started=started)
    return status
