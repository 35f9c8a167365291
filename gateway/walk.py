"""Walking a request's chain: admission over the models of the chain, then attempts over each
model's deployments with failover, and on to the next model when one cannot answer at all.

`Exchange` (gateway/exchange.py) is a `ChainWalk`: this part decides which deployment of which
model gets the request; the exchange performs each attempt, records and settles. One model and
no chain is the special case of a chain of one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from django.conf import settings

from accounts.keycache import KeyInfo
from catalog.snapshot import ModelInfo, Route
from gateway import limits, metrics
from gateway.chain import Candidate
from gateway.errors import GatewayError
from gateway.prefix_digest import digest
from gateway.request_limits import max_request_bytes, too_large_message
from gateway.routing import failover_order, health, route_order
from gateway.routing_policies import in_flight
from gateway.signed_kinds import kinds as signed_kinds
from gateway.signed_kinds import spans_kinds

logger = logging.getLogger(__name__)

# Efforts that may think for minutes before the first token: they get the longer start deadline.
HIGH_EFFORTS = frozenset({"high", "xhigh", "max"})

# The caller's own errors: never a reason to try another model (the same request would fail
# there too, or the caller must fix something first).
CALLER_ERRORS = frozenset({400, 401, 402, 403, 413})


class AttemptFailed(Exception):
    """`retryable`: another deployment may succeed. `healthy`: the deployment is not to blame
    (a body too large for its platform), so it does not count toward a cooldown. `cooldown_s`:
    the deployment cools down at once for this long, whatever its failure count (a provider
    account out of quota will not answer again for a while)."""

    def __init__(
        self,
        error: GatewayError,
        outcome: str,
        *,
        retryable: bool,
        healthy: bool = False,
        cooldown_s: float | None = None,
    ) -> None:
        super().__init__(error.message)
        self.error = error
        self.outcome = outcome
        self.retryable = retryable
        self.healthy = healthy
        self.cooldown_s = cooldown_s


def check_body_size(route: Route, body: bytes) -> None:
    """Refuse before sending what the deployment's platform would refuse (413) anyway."""
    kind = route.deployment.kind
    limit = max_request_bytes(kind)
    if len(body) > limit:
        error = GatewayError(413, too_large_message(len(body), kind, limit))
        raise AttemptFailed(error, "too_large", retryable=True, healthy=True)


class ChainWalk:
    """Admission and attempts over the chain's models; the state lives on the exchange."""

    key: KeyInfo
    limits_id: str
    session: str
    prefix: str | None
    pin_kind: bool
    signatures: list[str]
    pinned_kind: str | None
    high_effort: bool
    deadline_s: float
    candidates: list[Candidate]
    candidate: Candidate
    model: ModelInfo
    model_name: str
    requested_id: str
    fallbacks_barred: str | None
    attempts: list[dict[str, Any]]
    rate: limits.RateInfo | None
    hold_nano: int
    route: Route | None
    _plan: list[tuple[Candidate, list[Route]]]
    _slot: int | None
    _uses_slots: bool
    _busy: int | None
    _prefix_checked: set[str]

    # --- admission ------------------------------------------------------------------------------
    @property
    def has_fallbacks(self) -> bool:
        """Whether another model than the first may answer (the answer names the model)."""
        return len(self.candidates) > 1

    async def _route_plan(self) -> list[tuple[Candidate, list[Route]]]:
        """Each candidate with its deployments in routing order. With a chain, a model whose
        deployments are all cooling down goes after the others (cooldowns stay a preference:
        it is still tried last); a model no deployment serves is skipped."""
        plan: list[tuple[Candidate, list[Route]]] = []
        cooling: list[tuple[Candidate, list[Route]]] = []
        if self.has_fallbacks:
            health.refresh([r.deployment.id for c in self.candidates for r in c.model.routes])
        for position, candidate in enumerate(self.candidates):
            model = candidate.model
            order, chosen = await route_order(model.routes, model.id, self.session, self.prefix)
            if chosen:
                self._prefix_checked.add(model.id)
            if self.pin_kind and order and position == 0:
                # Signed thinking blocks are only valid on the platform that signed them.
                order = await self._pinned_order(model, order)
            if not order:
                self.attempts.append({"model": candidate.model.id, "outcome": "no_deployment"})
                continue
            if self.has_fallbacks and all(health.is_cooling(r.deployment.id) for r in order):
                cooling.append((candidate, order))
            else:
                plan.append((candidate, order))
        return plan + cooling

    async def _pinned_order(self, model: ModelInfo, order: list[Route]) -> list[Route]:
        """The deployments of the platform that signed the conversation's thinking: the one the
        signed-kinds store names, else the kind of the conversation's own deployment."""
        kind = None
        if self.signatures and spans_kinds(model):
            kind = await signed_kinds.lookup(self.key.org_id, self.signatures)
        kind = kind or order[0].deployment.kind
        self.pinned_kind = kind
        pinned = [r for r in order if r.deployment.kind == kind]
        if not pinned:
            raise GatewayError(
                503,
                f"this conversation carries thinking blocks signed on {kind}, and no {kind} "
                f"deployment serves {model.id}: signed thinking is valid only on the platform "
                "that produced it, so it is not sent elsewhere",
                type_="overloaded_error",
                headers={"retry-after": "1"},
            )
        return pinned

    async def admit(self, *, input_estimate: int, max_tokens: int, billable: bool = True) -> None:
        for candidate in self.candidates:
            candidate.estimate = candidate.estimate or input_estimate
            candidate.max_tokens = candidate.max_tokens or max_tokens
        plan = await self._route_plan()
        if not plan:
            raise GatewayError(
                503, f"no deployment serves {self.model.id}", type_="overloaded_error"
            )
        self._plan = plan
        if billable:
            # The dearest model of the chain, at the tier of its worst case (the prompt is at
            # most the estimate): whichever model answers, the cost stays within the hold, so a
            # fallback can never spend past a cap or a balance.
            self.hold_nano = max(
                c.model.pricing.worst_case_nano(
                    min(c.estimate, c.model.context_window), c.max_tokens
                )
                for c, _ in plan
            )
        candidates: tuple[tuple[int, int, float], ...] = ()
        if billable:
            seen: dict[int, tuple[int, int, float]] = {}
            for _, order in plan:
                for r in order:
                    d = r.deployment
                    seen.setdefault(d.id, (d.id, d.max_concurrency, d.fair_share))
            candidates = tuple(seen.values())
        admitted = await limits.get_limiter().admit(
            limits.AdmitRequest(
                request_id=self.limits_id,
                key_id=self.key.id,
                org_id=self.key.org_id,
                rpm_limit=self.key.rpm_limit,
                spend_cap_nano=self.key.spend_cap_nano,
                cap_period=self.key.spend_cap_period,
                hold_nano=self.hold_nano,
                candidates=candidates,
                # Counted for inference only (requests that take a slot), like slots.
                key_concurrency=self.key.key_concurrency if billable else None,
                org_concurrency=self.key.org_concurrency if billable else None,
            )
        )
        self.rate = admitted.rate
        self.balance_nano = admitted.balance_nano
        self._slot = admitted.deployment_id
        self._uses_slots = self._slot is not None

    # --- attempts -----------------------------------------------------------------------------
    async def run(self, attempt: Callable[[Route], Awaitable[Any]]) -> Any:
        """Try the chain's models in order, each over its deployments in order, until one
        succeeds before its first token. Another model is tried only when this one could not
        answer at all (every deployment full, or failed with a retryable error), never after
        the caller's own error."""
        plan = self._plan
        start = 0
        if self._slot is not None:
            # The model whose deployment took the slot at admission: those before it had no
            # room then (at capacity is one of the reasons to fall back).
            start = next(
                i
                for i, (_, order) in enumerate(plan)
                if any(r.deployment.id == self._slot for r in order)
            )
            for candidate, _ in plan[:start]:
                self.attempts.append({"model": candidate.model.id, "outcome": "full"})
        last: GatewayError | None = None
        tried = 0  # deployments tried so far, whatever the model
        for candidate, order in plan[start:]:
            if not self._switch_to(candidate):
                continue
            if candidate is not self.candidates[0]:
                metrics.MODEL_FALLBACKS.labels(self.requested_id, candidate.model.id).inc()
            result, error, tried = await self._run_model(attempt, order, tried)
            if error is None:
                return result
            last = error
            if error.status in CALLER_ERRORS:
                raise error  # the same request would fail on any model
        if last is None:
            raise GatewayError(
                529,
                "every deployment of this model is at capacity; retry shortly",
                type_="overloaded_error",
                headers={"retry-after": "1"},
            )
        if self.pinned_kind is not None and spans_kinds(self.model):
            raise GatewayError(
                503,
                f"{self.model.id} cannot answer on {self.pinned_kind} right now ({last.message});"
                f" this conversation carries thinking blocks signed on {self.pinned_kind}, which "
                "no other platform accepts",
                type_="overloaded_error",
                headers={"retry-after": "1"},
            )
        if self.fallbacks_barred is not None:
            raise GatewayError(
                503,
                f"{self.model.id} cannot answer right now ({last.message}); "
                f"{self.fallbacks_barred}",
                type_="overloaded_error",
                headers={"retry-after": "1"},
            )
        raise last

    def _switch_to(self, candidate: Candidate) -> bool:
        """Make `candidate` the current model, its request prepared; False (and skipped) when
        its request cannot be built (it refuses something the request needs)."""
        try:
            prepared = candidate.prepare()
        except GatewayError as exc:
            if candidate is self.candidates[0] or exc.status >= 500:
                raise
            self.attempts.append(
                {"model": candidate.model.id, "outcome": "skipped", "reason": exc.message}
            )
            return False
        self.candidate = candidate
        self.model = candidate.model
        self.model_name = candidate.name
        high = self.high_effort if prepared.effort is None else prepared.effort in HIGH_EFFORTS
        self.deadline_s = (
            settings.EZAT_ATTEMPT_START_DEADLINE_HIGH_EFFORT
            if high
            else settings.EZAT_ATTEMPT_START_DEADLINE
        )
        return True

    async def _run_model(
        self, attempt: Callable[[Route], Awaitable[Any]], order: list[Route], tried: int
    ) -> tuple[Any, GatewayError | None, int]:
        """One model's deployments: (result, None, tried) on success, (None, the last error,
        tried) when none answered. A non-retryable failure is raised: the caller's error."""
        limiter = limits.get_limiter()
        last: GatewayError | None = None
        if self._slot is not None:
            if any(r.deployment.id == self._slot for r in order):
                # The slot taken at admission first, then the others in routing order.
                order = [r for r in order if r.deployment.id == self._slot] + [
                    r for r in order if r.deployment.id != self._slot
                ]
            else:  # held for a model that was skipped: this model takes its own
                await self._release_slot()
        position = -1
        while position + 1 < len(order):
            position += 1
            route = order[position]
            dep = route.deployment
            if self._uses_slots and self._slot != dep.id:
                taken = await limiter.acquire_slot(
                    self.limits_id,
                    dep.id,
                    dep.max_concurrency,
                    org_id=self.key.org_id,
                    share=dep.fair_share,
                )
                if not taken:
                    self.attempts.append(
                        {"model": self.model.id, "deployment": dep.name, "outcome": "full"}
                    )
                    continue
                self._slot = dep.id
            if tried:
                metrics.FAILOVERS.inc()
            tried += 1
            started = time.perf_counter()
            sent_at = time.time()
            in_flight.begin(dep.id)
            self._busy = dep.id
            try:
                result = await attempt(route)
            except AttemptFailed as failed:
                self._end_busy()
                self._log_attempt(
                    route, failed.outcome, started, failed.error.status, failed.error.reason
                )
                await self._release_slot()
                if failed.cooldown_s is not None:
                    health.cool_down(dep.id, failed.cooldown_s)
                elif failed.retryable and not failed.healthy:
                    health.failure(dep.id)
                last = failed.error
                if not failed.retryable:
                    raise failed.error from None
                if position == 0 and self.model.id not in self._prefix_checked:
                    # The conversation's own deployment just failed: displaced, as if cooling.
                    self._prefix_checked.add(self.model.id)
                    order = order[:1] + await failover_order(
                        order[1:], self.model.id, self.session, self.prefix
                    )
                continue
            self._log_attempt(route, "ok", started, 200)
            health.success(dep.id, since=sent_at)
            digest.record(self.model.id, self.session, self.prefix, dep.id)
            self.route = route
            return result, None, tried
        if last is None:
            last = GatewayError(
                529,
                f"every deployment of {self.model.id} is at capacity; retry shortly",
                type_="overloaded_error",
                headers={"retry-after": "1"},
            )
        return None, last, tried

    def body_for(self, route: Route) -> bytes:
        """The current model's upstream body for `route`."""
        return self.candidate.prepare().body_for(route)

    @property
    def effort(self) -> str | None:
        """The reasoning effort applied on the current (once answered: answering) model."""
        prepared = self.candidate.prepared
        return prepared.effort if prepared is not None else None

    def _log_attempt(
        self, route: Route, outcome: str, started: float, status: int | None, reason: str = ""
    ) -> None:
        ms = round((time.perf_counter() - started) * 1000, 1)
        attempt: dict[str, Any] = {
            "model": self.model.id,
            "deployment": route.deployment.name,
            "outcome": outcome,
            "status": status,
            "ttfb_ms": ms,
        }
        if reason:
            # The operator's why (the exception's class and message: "PlatformAuthError: no AWS
            # credentials found in the standard chain"), kept out of the caller's error text.
            attempt["reason"] = reason
            logger.warning(
                "deployment %s: attempt failed (%s): %s", route.deployment.name, outcome, reason
            )
        self.attempts.append(attempt)
        metrics.child(metrics.UPSTREAM_ATTEMPTS, route.deployment.name, outcome).inc()

    def _end_busy(self) -> None:
        if self._busy is not None:
            busy, self._busy = self._busy, None
            in_flight.end(busy)

    async def _release_slot(self) -> None:
        if self._slot is not None:
            slot, self._slot = self._slot, None
            await limits.get_limiter().release_slot(self.limits_id, slot)
