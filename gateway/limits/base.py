"""The admission interface: one atomic step per request for rate, money and capacity.

Two implementations sit behind it: Redis (a Lua script: one round trip, shared by every gateway
process) when REDIS_URL is set, and an in-process one for the embedded default. Both keep money
as integer nano-USD and hold a request's worst-case cost from admission until it settles, so
concurrent requests cannot overspend a spend cap or a balance.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RateInfo:
    limit: int
    remaining: int
    reset_at: float  # epoch seconds when the current window ends


@dataclass(frozen=True, slots=True)
class AdmitRequest:
    request_id: str
    key_id: int
    org_id: int
    rpm_limit: int
    spend_cap_nano: int | None  # per `cap_period`; None = no cap
    hold_nano: int  # worst-case cost; 0 for free requests (count_tokens): rate limit only
    # (deployment_id, max_concurrency[, share]) in preference order; a slot is taken on the first
    # with room. `share` is the deployment's fair share (1.0 or absent = no share rule), see
    # common.share_caps.
    candidates: tuple[tuple[int, int] | tuple[int, int, float], ...]
    # Requests in flight allowed to the key and to its org (None = no limit). Counted only for
    # requests that take a deployment slot (inference); count_tokens is governed by RPM alone.
    key_concurrency: int | None = None
    org_concurrency: int | None = None
    # What the spend cap counts: "month" (UTC calendar month), "day" (UTC day) or "total".
    cap_period: str = "month"


@dataclass(frozen=True, slots=True)
class Admitted:
    rate: RateInfo
    deployment_id: int | None  # the deployment whose slot was taken (None if no candidates)
    # The org's balance as the limiter held it when it admitted (credit minus what was charged,
    # before this request's hold and cost); None when no money was checked (free requests, a
    # fail-open admission). Read inside the admission step: no extra round trip.
    balance_nano: int | None = None


class AdmissionError(Exception):
    """Base of every refusal; nothing is counted or held when admission is refused."""


class RateLimited(AdmissionError):
    def __init__(self, rate: RateInfo, retry_after: int) -> None:
        super().__init__("requests per minute exceeded")
        self.rate = rate
        self.retry_after = retry_after


class InsufficientFunds(AdmissionError):
    """`scope` is "key_cap" (the key's spend cap in its `period`) or "org_balance"."""

    def __init__(self, scope: str, rate: RateInfo, period: str = "month") -> None:
        super().__init__(scope)
        self.scope = scope
        self.rate = rate
        self.period = period


class CapacityExhausted(AdmissionError):
    def __init__(self, rate: RateInfo, retry_after: int = 1) -> None:
        super().__init__("every deployment is at capacity")
        self.rate = rate
        self.retry_after = retry_after


class ConcurrencyLimited(AdmissionError):
    """The key's or the org's own limit of requests in flight (`scope` "key" | "org")."""

    def __init__(self, scope: str, limit: int, rate: RateInfo, retry_after: int = 1) -> None:
        super().__init__(f"{scope} concurrency limit of {limit} reached")
        self.scope = scope
        self.limit = limit
        self.rate = rate
        self.retry_after = retry_after


class FairShareLimited(AdmissionError):
    """The deployments have room, but not for this org: it holds its share of each.

    `cap` and `max_concurrency` are those of the first candidate (the preferred deployment);
    `shared` says whether other orgs were active there (else the cap is the lone-org cap that
    keeps headroom for newcomers).
    """

    def __init__(
        self, cap: int, max_concurrency: int, shared: bool, rate: RateInfo, retry_after: int = 1
    ) -> None:
        super().__init__("fair share of deployment capacity in use")
        self.cap = cap
        self.max_concurrency = max_concurrency
        self.shared = shared
        self.rate = rate
        self.retry_after = retry_after


class LimiterUnavailable(AdmissionError):
    """Money cannot be checked (Redis down): money checks fail closed."""


# A request's end as `Limiter.settle` and `Limiter.hold_unflushed` hand it to a backend's storage
# (`_settle`, `_hold_unflushed`), their keywords gathered once: (request_id, key_id, org_id,
# hold_nano, cost_nano, deployment_id); hold_nano is 0 from hold_unflushed (not needed there).
# A plain tuple, not a NamedTuple: it is built on every request's way out, and a NamedTuple's
# Python-level __new__ costs more than the whole hand-over (bench.icount).
RequestEnd = tuple[str, int, int, int, int, int | None]

# `Limiter.acquire_slot`'s arguments as it hands them to a backend (`_acquire_slot`):
# (request_id, deployment_id, max_concurrency, org_id, share).
SlotRequest = tuple[str, int, int, int, float]


class Limiter:
    """The interface both limiters implement (local.py, redis.py). The calls both answer alike
    in shape (the two ends of a request, a failover's slot) are written here once and hand their
    arguments to the backend's storage as one tuple. They return the backend's coroutine rather
    than await it: callers await them as before, without a second coroutine per call."""

    async def admit(self, req: AdmitRequest) -> Admitted:
        raise NotImplementedError

    def acquire_slot(
        self,
        request_id: str,
        deployment_id: int,
        max_concurrency: int,
        *,
        org_id: int = 0,
        share: float = 1.0,
    ) -> Awaitable[bool]:
        """Take a slot on another deployment (failover). False when it is full for everyone or
        the org holds its fair share of it."""
        return self._acquire_slot((request_id, deployment_id, max_concurrency, org_id, share))

    async def _acquire_slot(self, slot: SlotRequest) -> bool:
        """`acquire_slot` on this backend's storage."""
        raise NotImplementedError

    async def release_slot(self, request_id: str, deployment_id: int) -> None:
        raise NotImplementedError

    async def heartbeat(self) -> None:
        """Extend the leases of this process's live requests (slots, key and org concurrency).

        Runs every `EZAT_SLOT_HEARTBEAT_SECONDS` in a background task of each limiter; a
        process that dies stops beating and its leases lapse `EZAT_SLOT_LEASE_SECONDS` later.
        """
        raise NotImplementedError

    def settle(
        self,
        request_id: str,
        *,
        key_id: int,
        org_id: int,
        hold_nano: int,
        cost_nano: int,
        deployment_id: int | None = None,
    ) -> Awaitable[None]:
        """Release the request's hold and charge `cost_nano` (0 = nothing) to key and org.

        The key's spend is charged to its current month, and to its current day and its total
        when those are loaded (a key capped per day or in total), whatever period the key had at
        admission: settling needs no knowledge of the key's cap.

        With `deployment_id`, the request's capacity slot there is released in the same step
        (one round trip instead of two at the end of every request).
        """
        return self._settle((request_id, key_id, org_id, hold_nano, cost_nano, deployment_id))

    def hold_unflushed(
        self,
        request_id: str,
        *,
        key_id: int,
        org_id: int,
        cost_nano: int,
        deployment_id: int | None = None,
    ) -> Awaitable[None]:
        """The end of a request whose usage row is durable in the local log but not yet in the
        database (EZAT_USAGE_COMMIT=group, billing/usage_log.py): its leases are released (as
        by settle) and its hold shrinks to `cost_nano`, living EZAT_USAGE_UNFLUSHED_HOLD_SECONDS,
        instead of being charged. The flusher settles it (`settle`) once the row is in the
        database, so `charged` only ever counts rows the database has (the seeding rule of
        common.py) while the balance, the caps and the dashboards count the unflushed spend as
        the open hold it is. A no-op for money once the request is settled (the flusher may be
        first)."""
        return self._hold_unflushed((request_id, key_id, org_id, 0, cost_nano, deployment_id))

    async def _settle(self, end: RequestEnd) -> None:
        """`settle` on this backend's storage."""
        raise NotImplementedError

    async def _hold_unflushed(self, end: RequestEnd) -> None:
        """`hold_unflushed` on this backend's storage."""
        raise NotImplementedError

    async def in_flight(self, deployment_ids: list[int]) -> dict[int, int]:
        """Current concurrent requests per deployment (for the operator console)."""
        raise NotImplementedError

    async def open_holds(self, org_id: int) -> int:
        """Σ nano-USD held right now by the org's requests in flight (dashboard pages: one
        small read, never on the request path). 0 when the org has no state here."""
        raise NotImplementedError
