"""One attempt on one deployment: a JSON call, or a stream read up to its first token, and the
failure each ends in when it cannot answer.

Apart from gateway/exchange.py because it is the part that talks to the upstream client and
decides what is retryable; the exchange around it walks the chain, records and settles. An
attempt knows only Anthropic's upstream wire format (the providers translate the rest).
`Attempts` is a base of `Exchange`: it reads the exchange's start deadline, tenant, upstream
path and start time, and sets its time to first token.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from django.conf import settings

from catalog.snapshot import Route
from gateway import connect_errors
from gateway.errors import QUOTA_EXHAUSTED, GatewayError
from gateway.protocols.anthropic.sse import CONTENT_EVENTS, SSEEvent
from gateway.providers import StreamDecoder, json_reply, local_reply, stream_decoder, upstream_error
from gateway.upstream import CONNECT_ERRORS, UnusableDeployment, UpstreamResponse, client
from gateway.walk import AttemptFailed, check_body_size

logger = logging.getLogger("gateway.exchange")

KeepAlive = Callable[[], Awaitable[None]]

# An error event before the first token, by its type: overloaded as the API's 529, a throttle
# (Bedrock's throttlingException, say) as a 429; anything else a 500. All are retried elsewhere.
EVENT_STATUS = {"overloaded_error": 529, "rate_limit_error": 429}

# Events split per step while looking for the first token: message_start, content_block_start,
# a ping, the first delta. The rest of the read is split after the first token has gone out.
FIRST_EVENTS = 4

# What ends an attempt before any answer: the start deadline, a deployment that cannot be
# called, the connection. Each is retried on another deployment (attempt_failed).
UNANSWERED = (TimeoutError, UnusableDeployment, *CONNECT_ERRORS)


@dataclass(slots=True)
class OpenStream:
    """An upstream stream that produced its first content event (the commit point)."""

    response: UpstreamResponse
    parser: StreamDecoder
    buffered: list[tuple[SSEEvent, dict[str, Any]]]
    route: Route
    # Events of the committing read after the first token, not parsed yet: the first token goes
    # out before the rest of a large first read is processed. The parser holds the part of that
    # read it has not split yet (`take_rest`).
    rest: list[SSEEvent] = field(default_factory=list)

    def take_rest(self) -> list[SSEEvent]:
        """The committing read's events after the first token, split now, once."""
        rest, self.rest = self.rest, []
        return [*rest, *self.parser.feed(b"")]


class Attempts:
    """The attempts of an `Exchange`, which sets these attributes."""

    deadline_s: float
    tenant: tuple[int, str]
    upstream_path: str
    t0: float
    ttft_ms: int | None

    # --- one attempt, JSON --------------------------------------------------------------------
    async def post_json(
        self, route: Route, path: str, body: bytes, beta: str | None
    ) -> tuple[int, bytes]:
        check_body_size(route, body)
        local = local_reply(route.deployment.kind, path, body)
        if local is not None:
            return 200, local
        response: UpstreamResponse | None = None
        try:
            async with asyncio.timeout(self.deadline_s):
                response = await client.post(
                    route.deployment, path, body, beta, route=route, tenant=self.tenant
                )
                payload = await response.read()
        except UNANSWERED as exc:
            raise attempt_failed(exc, self.deadline_s) from None
        finally:
            if response is not None:
                response.close()  # a no-op once read; drops a half-read connection
        kind = route.deployment.kind
        if response.status != 200:
            raise _upstream_failure(kind, response.status, response.headers, payload)
        return response.status, json_reply(kind, path, payload, response.state)

    # --- one attempt, stream ------------------------------------------------------------------
    async def open_stream(
        self, route: Route, body: bytes, beta: str | None, keepalive: KeepAlive
    ) -> OpenStream:
        """Read until the first content event; anything earlier that fails is retryable."""
        check_body_size(route, body)
        deadline = time.monotonic() + self.deadline_s
        next_keepalive = (
            self.t0 - time.perf_counter() + time.monotonic() + settings.EZAT_STREAM_OPEN_AFTER
        )
        try:
            response, next_keepalive = await self._post_keeping_alive(
                route, body, beta, deadline, next_keepalive, keepalive
            )
            if response.status != 200:
                async with asyncio.timeout(max(deadline - time.monotonic(), 0.0)):
                    payload = await response.read()
                raise _upstream_failure(
                    route.deployment.kind, response.status, response.headers, payload
                )
        except UNANSWERED as exc:
            raise attempt_failed(exc, self.deadline_s) from None
        parser = stream_decoder(route.deployment.kind, response.state)
        buffered: list[tuple[SSEEvent, dict[str, Any]]] = []
        response.awaiting_first_token(True)
        try:
            while True:
                now = time.monotonic()
                if now >= deadline:
                    raise AttemptFailed(_timeout_error(self.deadline_s), "timeout", retryable=True)
                if now >= next_keepalive:
                    await keepalive()
                    next_keepalive = now + settings.EZAT_PING_INTERVAL
                wait = min(deadline, next_keepalive) - now
                try:
                    async with asyncio.timeout(wait):
                        chunk = await response.readany()
                except TimeoutError:
                    continue
                if not chunk:
                    raise AttemptFailed(
                        GatewayError(
                            502,
                            "the provider closed the stream before its first token",
                            type_="api_error",
                        ),
                        "dropped",
                        retryable=True,
                    )
                committed = False
                events = parser.feed(chunk, FIRST_EVENTS)
                while events:
                    for position, event in enumerate(events):
                        data = event.json()
                        if event.name == "error" and not committed:
                            error = data.get("error") or {}
                            raise AttemptFailed(
                                GatewayError(
                                    EVENT_STATUS.get(str(error.get("type")), 500),
                                    str(error.get("message") or "upstream error"),
                                    type_=error.get("type"),
                                ),
                                "error_event",
                                retryable=True,
                            )
                        buffered.append((event, data))
                        if not committed and event.name in CONTENT_EVENTS:
                            committed = True
                            self.ttft_ms = int((time.perf_counter() - self.t0) * 1000)
                        if committed and event.name == "content_block_delta":
                            # The first token: what follows in this read is parsed by the pump.
                            rest = events[position + 1 :]
                            return OpenStream(response, parser, buffered, route, rest)
                    events = parser.feed(b"", FIRST_EVENTS)
                if committed:
                    return OpenStream(response, parser, buffered, route)
        except AttemptFailed:
            response.close()
            raise
        except (*CONNECT_ERRORS, orjson.JSONDecodeError) as exc:
            response.close()
            raise AttemptFailed(_connect_error(exc), "dropped", retryable=True) from None
        finally:
            response.awaiting_first_token(False)

    async def _post_keeping_alive(
        self,
        route: Route,
        body: bytes,
        beta: str | None,
        deadline: float,
        next_keepalive: float,
        keepalive: KeepAlive,
    ) -> tuple[UpstreamResponse, float]:
        """POST, with keep-alives while not even the headers have arrived: a slow upstream must
        not leave the client silent until the start deadline (proxies drop silent requests)."""
        post = asyncio.ensure_future(
            client.post(
                route.deployment,
                self.upstream_path,
                body,
                beta,
                route=route,
                tenant=self.tenant,
            )
        )
        try:
            while not post.done():
                now = time.monotonic()
                if now >= deadline:
                    raise TimeoutError
                if now >= next_keepalive:
                    await keepalive()
                    next_keepalive = now + settings.EZAT_PING_INTERVAL
                await asyncio.wait((post,), timeout=min(deadline, next_keepalive) - now)
        except BaseException:
            post.cancel()
            if post.done() and not post.cancelled() and post.exception() is None:
                post.result().close()  # answered just as we gave up: free the connection
            raise
        return post.result(), next_keepalive


def attempt_failed(exc: BaseException, deadline_s: float) -> AttemptFailed:
    """The end of an attempt that got no answer (one of UNANSWERED): retryable elsewhere."""
    if isinstance(exc, TimeoutError):
        return AttemptFailed(_timeout_error(deadline_s), "timeout", retryable=True)
    if isinstance(exc, UnusableDeployment):
        return _unusable(exc)
    return AttemptFailed(_connect_error(exc), "connect_error", retryable=True)


def _timeout_error(seconds: float) -> GatewayError:
    return GatewayError(
        504, f"the provider did not start answering within {seconds:g} s", type_="timeout_error"
    )


def _upstream_failure(
    kind: str, status: int, headers: dict[str, str], payload: bytes
) -> AttemptFailed:
    if status in (401, 403):
        # The provider refused the gateway's own credential (a rotated or revoked key, a key
        # without access): the deployment is at fault, not the customer's request. Another
        # deployment may answer; passing the upstream's "invalid x-api-key" through would tell
        # the customer their own key is wrong.
        return AttemptFailed(
            GatewayError(
                502,
                f"the provider refused this deployment's credentials (HTTP {status})",
                type_="api_error",
            ),
            f"http_{status}",
            retryable=True,
        )
    error = upstream_error(kind, status, headers, payload)
    if error.code == QUOTA_EXHAUSTED:
        # The deployment's provider account is out of quota: not the caller's pace, and not
        # over in seconds. Another deployment (another account) may answer; this one rests.
        return AttemptFailed(
            error,
            f"http_{status}",
            retryable=True,
            cooldown_s=settings.EZAT_QUOTA_COOLDOWN_SECONDS,
        )
    return AttemptFailed(error, f"http_{status}", retryable=error.retryable_upstream)


def _unusable(exc: UnusableDeployment) -> AttemptFailed:
    logger.error("deployment cannot be called: %s", exc)
    return AttemptFailed(
        GatewayError(502, f"a deployment is misconfigured ({exc})", type_="api_error"),
        "bad_deployment",
        retryable=True,
    )


def _connect_error(exc: BaseException) -> GatewayError:
    # Words for the caller; the class and message for the operator (gateway/connect_errors.py).
    return GatewayError(
        502,
        connect_errors.customer_message(exc),
        type_="api_error",
        reason=connect_errors.operator_reason(exc),
    )
