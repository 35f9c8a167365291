"""One request's life on the gateway, shared by both APIs: admission, attempts over deployments
with failover before the first token, the usage record and the settlement of its hold.

A request may have a chain of models (gateway/chain.py): each model's deployments are tried
in turn, and when none of them can answer before the first token, the next model of the chain
is, with its own upstream body. The hold covers the dearest model of the chain. Admission and the
walk over the chain are in gateway/walk.py, each attempt on a deployment (a JSON call, a stream up
to its first token) in gateway/attempt.py; this module reads a committed stream on, records and
settles.

Protocol-specific code (validation, translation, framing) stays in the handlers; this module
knows only Anthropic's upstream wire format.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
from django.conf import settings
from django.utils import timezone

from billing import usage_log
from billing.recorder import UsageData
from catalog.pricing import TokenCounts
from catalog.snapshot import Route
from core import money
from gateway import limits, metrics
from gateway.attempt import Attempts, OpenStream
from gateway.chain import Candidate
from gateway.checkpoints import checkpoints
from gateway.context import RequestContext
from gateway.errors import GatewayError
from gateway.first_tokens import gate
from gateway.http import StreamWriter
from gateway.protocols.anthropic.sse import SSEEvent
from gateway.providers import COUNT_PATH, MESSAGES_PATH
from gateway.signed_kinds import kinds as signed_kinds
from gateway.signed_kinds import signatures_in_reply, spans_kinds
from gateway.upstream import CONNECT_ERRORS
from gateway.usage import UsageTracker
from gateway.walk import HIGH_EFFORTS, AttemptFailed, ChainWalk, check_body_size

logger = logging.getLogger("gateway.exchange")

__all__ = [
    "HIGH_EFFORTS",
    "STREAM_FAILED",
    "STREAM_FAILURES",
    "AttemptFailed",
    "ClientGone",
    "Exchange",
    "OpenStream",
    "UsageTracker",
    "check_body_size",
]


class _DrainStopped(Exception):
    """The upstream reported an error while draining a disconnected stream."""


class ClientGone(Exception):
    """The client disconnected mid-stream (it still pays for what was produced)."""


# The usage record's status of a stream that failed after its commit point (billing.models).
STREAM_FAILED = "stream_failed"

# What can end a stream after its commit point (nothing is retried then).
STREAM_FAILURES = (AttemptFailed, *CONNECT_ERRORS, orjson.JSONDecodeError)


class Exchange(Attempts, ChainWalk):
    def __init__(self, ctx: RequestContext) -> None:
        self.api = ctx.api
        self.request_id = ctx.request_id
        # Holds, slots and settle markers are keyed by this, not by the request id: a caller may
        # reuse its own x-request-id, and concurrent requests sharing one would replace each
        # other's holds and spend past a cap.
        self.limits_id = f"{ctx.request_id}~{uuid.uuid4().hex}"
        self.key = ctx.key
        # The models that may answer, in order (one without a chain). `model` and `model_name`
        # are the current one's, and once answered, the answering one's.
        self.candidates = ctx.candidates
        self.candidate = self.candidates[0]
        self.model = self.candidate.model
        self.model_name = self.candidate.name
        self.requested_id = ctx.requested_id or self.model.id
        self.sent_name = ctx.model_name  # the model as the caller named it (usage records)
        self.fallbacks_barred = ctx.fallbacks_barred
        self.stream = ctx.stream
        self.session = ctx.session
        # What the provider is asked for: a Messages call (the internal dialect), or a relayed
        # call in the provider's own API (gateway/handlers/chat_relay.py sets it).
        self.upstream_path = MESSAGES_PATH
        # The org and session, for providers that key a prompt cache by them (OpenAI's
        # prompt_cache_key, derived in gateway/providers/openai/provider.py only when sent).
        self.tenant = (ctx.key.org_id, ctx.session)
        self.prefix = ctx.prefix
        # Signed thinking pins the conversation to the platform that signed it: its signatures
        # (newest first) and, once looked up, that deployment kind (gateway/walk.py).
        self.pin_kind = ctx.signatures is not None
        self.signatures = ctx.signatures or []
        self.pinned_kind: str | None = None
        self.high_effort = ctx.high_effort
        self.deadline_s = (
            settings.EZAT_ATTEMPT_START_DEADLINE_HIGH_EFFORT
            if ctx.high_effort
            else settings.EZAT_ATTEMPT_START_DEADLINE
        )
        self.started_at = timezone.now()
        self.t0 = time.perf_counter()
        self.ttft_ms: int | None = None
        # Models of the chain passed over before any call (disabled, unfit), then each attempt.
        self.attempts: list[dict[str, Any]] = [
            {"model": model_id, "outcome": "skipped", "reason": why}
            for model_id, why in ctx.skipped
        ]
        self.rate: limits.RateInfo | None = None
        self.hold_nano = 0
        # The org's balance at admission (limits.Admitted.balance_nano); None when unchecked.
        self.balance_nano: int | None = None
        self._plan: list[tuple[Candidate, list[Route]]] = []
        self._slot: int | None = None
        self._uses_slots = False
        self._busy: int | None = None  # the deployment this request counts as in flight on
        # Models whose deployments the prefix digest already ordered (displaced at admission).
        self._prefix_checked: set[str] = set()
        self._settled = False
        self._recorded_cost = 0
        self._unflushed = False  # recorded in the group-commit log, not yet in the database
        self.route: Route | None = None
        # What the request log and the request's log line report (gateway/outcome.py).
        self.http_status: int | None = None  # set by log(): the status the request ended with
        self.error: GatewayError | None = None  # the error as the client saw it, if any
        self.finish_reason = ""
        self.tokens: TokenCounts | None = None  # as recorded (billed)
        self.admitted_ms: int | None = None
        self.output_exact = True
        self._tracker: UsageTracker | None = None  # a committed stream's usage so far

    # --- the two shapes of a Messages call, over deployments with failover ------------------
    async def call(self, body_for: Callable[[Route], bytes], beta: str | None) -> dict[str, Any]:
        """A non-streaming Messages call: the first deployment that answers, its reply parsed."""

        async def attempt(route: Route) -> bytes:
            _, payload = await self.post_json(route, self.upstream_path, body_for(route), beta)
            return payload

        payload = await self.run(attempt)
        self.ttft_ms = int((time.perf_counter() - self.t0) * 1000)
        try:
            reply = orjson.loads(payload)
        except orjson.JSONDecodeError:
            reply = None
        if not isinstance(reply, dict):
            raise GatewayError(502, "the provider answered with an invalid body", type_="api_error")
        stop = reply.get("stop_reason")
        self.finish_reason = stop if isinstance(stop, str) else ""
        if self.route is not None and spans_kinds(self.model):
            content = reply.get("content")
            if isinstance(content, list):
                signed_kinds.remember(
                    self.key.org_id, signatures_in_reply(content), self.route.deployment.kind
                )
        return reply

    async def count_tokens(self, body: dict[str, Any]) -> bytes:
        """A token count of `body` (a Messages body; its model is set per deployment) from the
        first deployment that answers. No anthropic-beta is passed on (docs/api.md)."""

        async def attempt(route: Route) -> bytes:
            body["model"] = route.upstream_model_id
            _, payload = await self.post_json(route, COUNT_PATH, orjson.dumps(body), None)
            return payload

        payload: bytes = await self.run(attempt)
        return payload

    async def open_committed(
        self,
        body_for: Callable[[Route], bytes],
        beta: str | None,
        writer: StreamWriter,
        ping: bytes,
    ) -> OpenStream:
        """A streaming Messages call up to its commit point (the first content event).

        While waiting, `ping` keep-alives open the response after EZAT_STREAM_OPEN_AFTER and
        keep proxies from timing it out; a ping is not data, so a switch stays invisible.
        """

        async def keepalive() -> None:
            await writer.write(ping)

        async def attempt(route: Route) -> OpenStream:
            return await self.open_stream(route, body_for(route), beta, keepalive)

        opened: OpenStream = await self.run(attempt)
        return opened

    async def event_batches(
        self, opened: OpenStream, writer: StreamWriter, ping: bytes, disconnected: asyncio.Event
    ) -> AsyncIterator[list[tuple[SSEEvent, dict[str, Any]]]]:
        """After the commit point: the upstream's events, one batch per read, each parsed once.

        Sends `ping` after EZAT_PING_INTERVAL of upstream silence (proxies drop silent streams),
        raises ClientGone when the client has left and AttemptFailed when the upstream closes
        before `message_stop`. The consumer ends the stream by returning.
        """
        pending = opened.buffered
        rest_due = True
        response = opened.response
        response.watch_idle(settings.EZAT_PING_INTERVAL)
        # Signatures are remembered with the kind that signed them only where the model's
        # deployments span kinds (otherwise there is no platform to choose).
        track = spans_kinds(self.model)
        metrics.OPEN_STREAMS.inc()
        try:
            while True:
                if pending:
                    if track:
                        self._remember_signatures(opened.route, pending)
                    yield pending
                if gate.ready:
                    # Other streams' first tokens are waiting: they go out before this bulk.
                    await gate.wait_turn()
                if rest_due:
                    rest_due = False
                    pending = [(e, e.json()) for e in opened.take_rest()]
                    if pending:
                        continue
                if disconnected.is_set():
                    raise ClientGone
                try:
                    chunk = await response.readany()
                except TimeoutError:  # silence for a ping interval
                    await writer.write(ping)
                    pending = []
                    continue
                if not chunk:
                    raise AttemptFailed(
                        GatewayError(502, "the provider closed the stream early"),
                        "dropped",
                        retryable=False,
                    )
                pending = [(e, e.json()) for e in opened.parser.feed(chunk)]
        finally:
            metrics.OPEN_STREAMS.dec()

    def _remember_signatures(
        self, route: Route, batch: list[tuple[SSEEvent, dict[str, Any]]]
    ) -> None:
        for event, data in batch:
            if event.name == "content_block_delta":
                delta = data.get("delta")
                if isinstance(delta, dict) and delta.get("type") == "signature_delta":
                    signature = delta.get("signature")
                    if isinstance(signature, str) and signature:
                        signed_kinds.remember(self.key.org_id, [signature], route.deployment.kind)

    async def drain_after_disconnect(self, opened: OpenStream, tracker: UsageTracker) -> int:
        """The client left mid-stream: it pays for what was produced. Read on (bounded) for the
        exact usage in `message_delta`; if that fails, bill an estimate and say so."""
        tracker.exact = False
        opened.response.stop_watching()  # the drain has its own deadline; no pings now
        try:
            async with asyncio.timeout(settings.EZAT_DISCONNECT_DRAIN_SECONDS):
                events = opened.take_rest()  # what the first read held and was not sent yet
                while True:
                    for event in events:
                        if event.name == "error":
                            raise _DrainStopped
                        tracker.absorb(event.name, event.json())
                    if tracker.exact:
                        break
                    chunk = await opened.response.readany()
                    if not chunk:
                        break
                    events = opened.parser.feed(chunk)
        except (TimeoutError, _DrainStopped, *CONNECT_ERRORS, orjson.JSONDecodeError):
            logger.info("disconnect drain incomplete; output estimated")
        finally:
            opened.response.close()
        await self.record(tracker, status="client_disconnected")
        self.log(499)
        return 499

    @property
    def slot(self) -> int | None:
        """The capacity slot (deployment id) this request holds, if any (checkpoints)."""
        return self._slot

    def checkpoint(self, tracker: UsageTracker) -> None:
        """The stream is committed: its output is checkpointed (off the event path, at most once
        a second) until it is recorded or settled, so a crash of this process cannot make it
        free (gateway/checkpoints.py, gateway/durability.py)."""
        self._tracker = tracker
        checkpoints.open(self, tracker)

    async def end_cancelled(self) -> None:
        """The server cancelled the request (a disconnect under servers that cancel, or a
        shutdown): a committed stream that was not recorded yet is billed for what it produced,
        as a disconnect is; then the hold is settled. Before the commit point nothing is billed."""
        tracker = self._tracker
        if tracker is not None and not self._settled and self.tokens is None:
            try:
                await self.record(tracker, status="client_disconnected")
            except Exception:  # noqa: BLE001 - counted and logged by record(); settled there
                logger.warning("a cancelled stream's usage was not recorded")
        await self.settle()

    # --- the end ----------------------------------------------------------------------------------
    async def record(self, tracker: UsageTracker, *, status: str = "ok") -> int:
        """Write the usage record (awaited before the final event); settle() charges it."""
        tokens = tracker.tokens(self.model)
        data = UsageData(
            request_id=self.request_id,
            org_id=self.key.org_id,
            key_id=self.key.id,
            api=self.api,
            stream=self.stream,
            model_id=self.model.id,
            model_name=self.sent_name,
            requested_model=self.requested_id,
            deployment=self.route.deployment.name if self.route else "",
            tokens=tokens,
            pricing=self.model.pricing,  # the version admitted with, whatever loads later
            started_at=self.started_at,
            output_exact=tracker.exact,
            status=status,
            attempts=self.attempts,
            latency_ms=int((time.perf_counter() - self.t0) * 1000),
            ttft_ms=self.ttft_ms,
        )
        try:
            cost, self._unflushed = await usage_log.record(data, self.limits_id)
        except Exception:
            # Never bill what was not recorded: the hold is released, the failure is counted
            # and logged with everything needed to re-create the record by hand.
            metrics.USAGE_RECORD_FAILURES.inc()
            logger.exception("usage record failed", extra={"usage": repr(data)})
            await self.settle()
            raise
        # Charged by settle(), called once the answer went out: the round trip to the limiter is
        # off the caller's latency. Safe for limits: until then the hold (a worst case, never
        # below the cost) still counts against the cap and the balance.
        self._recorded_cost = cost
        checkpoints.close(self)  # recorded (in the database or the spool): nothing to recover
        self.tokens = tokens
        self.output_exact = tracker.exact
        self.finish_reason = tracker.stop_reason or self.finish_reason
        metrics.observe_usage(self.model.id, tokens, cost)
        return cost

    @property
    def cost_usd(self) -> bytes:
        """The recorded cost as billed: exact USD, 9 decimals (x-ezat-cost-usd)."""
        return money.usd_from_nano(self._recorded_cost, 9).encode()

    @property
    def balance_usd(self) -> bytes | None:
        """The org's balance after this request's settlement (x-ezat-balance-usd), estimated
        from the balance the limiter admitted it against minus the cost recorded: settlement
        itself runs once the answer went out. Requests of the org settling meanwhile are not
        in it. None when admission checked no money (free requests)."""
        if self.balance_nano is None:
            return None
        return money.usd_from_nano(self.balance_nano - self._recorded_cost, 9).encode()

    def cost_comment(self) -> bytes:
        """The cost (and the balance after it) as SSE comments, sent just before a stream's
        final event: SDKs skip comment lines (SSE spec: a line starting with ':'), curl users
        can read them."""
        line = b": x-ezat-cost-usd: " + self.cost_usd + b"\n"
        balance = self.balance_usd
        if balance is not None:
            line += b": x-ezat-balance-usd: " + balance + b"\n"
        return line + b"\n"

    @property
    def recorded_cost(self) -> int:
        """The cost recorded (billed) for this request; 0 when nothing was recorded."""
        return self._recorded_cost

    async def fail_stream(
        self,
        writer: StreamWriter,
        error: bytes,
        status: int,
        *,
        client_gone: bool = False,
        err: GatewayError | None = None,
        tracker: UsageTracker | None = None,
    ) -> None:
        """After the response opened, a failure is told in-stream (unless nobody listens any
        more) and the stream ends. `err`: the error told (request log).

        Before the commit point (`tracker` None) nothing was delivered and nothing is billed:
        the failover was invisible. After it (`tracker` given: the stream's usage so far), the
        usage produced so far is billed, before the client sees the error, with the status
        `stream_failed` (billing.UsageRecord.Status): the input (and cache) tokens of
        `message_start` and the output of the last `message_delta`, or, when none came,
        estimated from the output delivered (UsageTracker.tokens, the same estimate as a
        disconnect's and a checkpoint's; `output_exact` false)."""
        if tracker is not None and not self._settled and self.tokens is None:
            try:
                await self.record(tracker, status=STREAM_FAILED)
            except Exception:  # noqa: BLE001 - counted and logged by record(); the error still goes out
                logger.warning("a failed stream's partial usage was not recorded")
            else:
                error = self.cost_comment() + error
        await self.settle()
        if not client_gone:
            await writer.write(error)
            await writer.close()
        self.log(499 if client_gone else status, err)

    @staticmethod
    def stream_failure(exc: BaseException) -> GatewayError:
        """The error to report for one of STREAM_FAILURES."""
        if isinstance(exc, AttemptFailed):
            return exc.error
        return GatewayError(502, "the provider stream failed", type_="api_error")

    async def settle(self) -> None:
        """The end of the request, however it ended: the hold is settled at the recorded cost
        (nothing if no usage was recorded) and the slot freed. Once; later calls do nothing."""
        if self._settled:
            return
        self._settled = True
        checkpoints.close(self)
        self._end_busy()
        cost = self._recorded_cost
        # Always through the limiter's settle, even with no money involved: it also releases
        # the request's key and org concurrency leases (and nothing at all when none were taken).
        slot, self._slot = self._slot, None
        if self._unflushed and cost > 0:
            # The row is in the local log: the hold shrinks to the cost until the flusher
            # stores the row and settles it (billing/usage_log.py).
            await limits.get_limiter().hold_unflushed(
                self.limits_id,
                key_id=self.key.id,
                org_id=self.key.org_id,
                cost_nano=cost,
                deployment_id=slot,
            )
            return
        await limits.get_limiter().settle(
            self.limits_id,
            key_id=self.key.id,
            org_id=self.key.org_id,
            hold_nano=self.hold_nano,
            cost_nano=cost,
            deployment_id=slot,
        )

    def log(self, status: int, error: GatewayError | None = None) -> None:
        """Note how the request ended; its metrics, log line and request-log row are written
        once, when the handler returns (gateway/outcome.py)."""
        self.http_status = status
        if error is not None:
            self.error = error
