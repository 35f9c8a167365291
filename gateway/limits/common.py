"""Pieces shared by the in-process and the Redis limiter: settings, metrics, leases, seeding
(the calendar is periods.py, the money arithmetic settlement.py).

Seeding protocol (identical in both implementations, see `SeedRunner`)
----------------------------------------------------------------------
Money state (org base, key spend in its cap's period) lives in memory or Redis and is loaded from
the DB when missing. Every state keeps `charged` (Σ costs settled since its last (re)seed) and
`gen` (a token rotated by every seed write). A seed takes a *ticket* (the current `charged` = c0
and `gen`) atomically with the admission that discovered the need, THEN reads the DB, then writes
`value = db ∓ (charged_now − c0)` only if `gen` is unchanged. Why this is never optimistic: the
gateway writes the usage record before it settles, so a settle counted before the ticket has its
record committed before the DB read started (included in `db`); a settle after the ticket is
subtracted from `db` again, whether or not the read saw its record. The latter is the small
conservative window: a record inserted before a reseed's DB read but settled after it is counted
twice (the key/org looks poorer than it is) until the next reseed. It never overspends.

Credit notifications bump the base immediately and also mark the state stale, so the next
admission re-reads the DB in the background and heals the one race a notification cannot see
(a reseed whose DB read lands between the grant's commit and its on_commit callback).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol

from django.conf import settings
from django.db import DatabaseError
from prometheus_client import Counter

from gateway.limits.base import LimiterUnavailable
from gateway.limits.periods import period_bounds

logger = logging.getLogger("gateway.limits")

FAIL_OPEN = Counter(
    "ezat_limiter_fail_open_total",
    "Free requests (count_tokens) admitted by the per-process fallback because Redis was down.",
)
ERRORS = Counter(
    "ezat_limiter_errors_total",
    "Limiter operations that failed and were swallowed (the lease/hold expires or a reseed heals).",
    ["op"],
)
SEEDS = Counter(
    "ezat_limiter_seeds_total", "Money state loaded from the database.", ["scope", "mode"]
)


# --- settings (read at call time: the test `settings` fixture and live overrides apply) ----------
def hold_ttl_seconds() -> float:
    return float(getattr(settings, "EZAT_HOLD_TTL_SECONDS", 900))


def unflushed_hold_seconds() -> float:
    """How long a hold shrunk to a request's cost waits for its row to reach the database
    (Limiter.hold_unflushed): long enough to outlast a database outage, so unflushed spend never
    drops out of the balance before the flusher settles it."""
    return float(getattr(settings, "EZAT_USAGE_UNFLUSHED_HOLD_SECONDS", 86400))


def slot_lease_seconds() -> float:
    """How long a slot or concurrency lease lives without a heartbeat (a crashed process's
    leases stop counting this long after its last beat)."""
    return float(getattr(settings, "EZAT_SLOT_LEASE_SECONDS", 20))


def heartbeat_seconds() -> float:
    return float(getattr(settings, "EZAT_SLOT_HEARTBEAT_SECONDS", 5))


def fair_share_active_seconds() -> float:
    """How long an org refused a slot on a deployment still counts as active (waiting) there."""
    return float(getattr(settings, "EZAT_FAIR_SHARE_ACTIVE_SECONDS", 15))


def fair_share_headroom() -> float:
    return float(getattr(settings, "EZAT_FAIR_SHARE_HEADROOM", 0.1))


def share_caps(max_concurrency: int, share: float) -> tuple[int, int]:
    """(cap while other orgs are active, cap while the org is alone) on one deployment.

    The share rule: while two or more orgs are active on a deployment, none takes more than
    `share` of its max_concurrency (at least one slot). An org alone may take more, but not the
    last `EZAT_FAIR_SHARE_HEADROOM` of it: a newcomer must find a free slot even while one org
    holds many long streams, and its arrival then caps the first org at its share. The headroom
    never pushes the lone cap below the shared one. share >= 1 turns the rule off (no headroom).
    """
    if share >= 1:
        return max_concurrency, max_concurrency
    shared = max(1, math.floor(max_concurrency * share))
    headroom = min(math.ceil(max_concurrency * fair_share_headroom()), max_concurrency - shared)
    return shared, max_concurrency - max(0, headroom)


def candidate_share(candidate: tuple[int, ...] | tuple[int, int, float]) -> float:
    return float(candidate[2]) if len(candidate) > 2 else 1.0


def reseed_seconds() -> float:
    return float(getattr(settings, "EZAT_MONEY_RESEED_SECONDS", 30))


def failopen_rpm(rpm_limit: int) -> int:
    fraction = float(getattr(settings, "EZAT_FAILOPEN_RPM_FRACTION", 0.5))
    return max(1, math.floor(rpm_limit * fraction))


# --- leases (slots, key and org concurrency) with a heartbeat --------------------------------
@dataclass(slots=True)
class Lease:
    """What one live request of this process holds besides money, for heartbeats and release."""

    key_id: int
    org_id: int
    deployment_id: int | None
    key_conc: bool  # counted against the key's concurrency limit
    org_conc: bool
    # When it was taken (monotonic): a lease is beaten for at most EZAT_HOLD_TTL_SECONDS, so a
    # request that was never settled (a bug) cannot hold a slot forever.
    born: float = field(default_factory=time.monotonic)

    def expired(self, now_mono: float) -> bool:
        return now_mono - self.born > hold_ttl_seconds()


class LeaseBook(dict[str, Lease]):
    """This process's live requests holding leases (request id -> Lease), as both limiters keep
    them: a slot taken or given back on failover, a lease that lived too long to beat for."""

    def took_slot(self, request_id: str, org_id: int, deployment_id: int) -> bool:
        """Note a slot taken on `deployment_id`; True when the request had no lease here yet."""
        lease = self.get(request_id)
        if lease is None:
            self[request_id] = Lease(0, org_id, deployment_id, False, False)
            return True
        lease.deployment_id = deployment_id
        return False

    def gave_back_slot(self, request_id: str, deployment_id: int) -> Lease | None:
        """Note the slot on `deployment_id` given back; the request's lease, None when it has
        none here. A lease left with nothing to beat for is forgotten."""
        lease = self.get(request_id)
        if lease is not None and lease.deployment_id == deployment_id:
            lease.deployment_id = None
            if not (lease.key_conc or lease.org_conc):
                del self[request_id]
        return lease

    def drop_expired(self, now_mono: float) -> None:
        """Forget leases older than the hold TTL: never settled, no more beats, they lapse."""
        for rid in [r for r, lease in self.items() if lease.expired(now_mono)]:
            del self[rid]


class Heartbeat:
    """Runs `beat` every EZAT_SLOT_HEARTBEAT_SECONDS on the loop that has leases.

    Started by the first lease; a failed beat is logged and counted, never raised: the next
    beat retries, and leases outlive a missed beat (lease = 4 beats by default).
    """

    def __init__(self, beat: Callable[[], Awaitable[None]]) -> None:
        self._beat = beat
        self._task: asyncio.Task[None] | None = None

    def ensure(self) -> None:
        task = self._task
        loop = asyncio.get_running_loop()
        if task is not None and not task.done() and task.get_loop() is loop:
            return
        self._task = loop.create_task(self._run(), name="ezat-limits-heartbeat")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(heartbeat_seconds())
            try:
                await self._beat()
            except (LimiterUnavailable, OSError) as exc:
                ERRORS.labels("heartbeat").inc()
                logger.warning("limits: lease heartbeat failed: %s", exc)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is None or task.done():
            return
        if task.get_loop() is not asyncio.get_running_loop():
            task.cancel()  # another loop's (tests): nothing to await here
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


# --- seeding -------------------------------------------------------------------------------------
class MoneySource(Protocol):
    """Where money state comes from when it is missing or stale (the DB: seed.DbMoneySource)."""

    async def org_available(self, org_id: int) -> int: ...

    async def key_month_spent(self, key_id: int, start: datetime, end: datetime) -> int: ...

    def close(self) -> None:
        """Release resources (DB connections); blocking; the source stays usable."""
        ...


@dataclass(frozen=True, slots=True)
class SeedTicket:
    scope: Literal["org", "key"]
    ident: int  # org id or key id
    month: str  # the key's cap period id (period_id: "YYYYMM", "YYYYMMDD", "total"), "" for an org
    charged: int  # c0: the state's `charged` when the ticket was taken (before the DB read)
    gen: str  # the state's generation; the write applies only if unchanged
    mode: Literal["init", "reseed"]

    @property
    def target(self) -> tuple[str, int, str]:
        return (self.scope, self.ident, self.month)


SeedWriter = Callable[[SeedTicket, int], Awaitable[bool]]


class SeedRunner:
    """Loads tickets from the DB and hands the values to the limiter's writer.

    Initial seeds are awaited by the admission that needs them (single-flight per target within
    the process, so a burst on a cold org makes one query). Reseeds run in the background, at
    most one per target at a time; the admission that claimed the reseed is not delayed.
    """

    def __init__(self, money: MoneySource, write: SeedWriter) -> None:
        self._money = money
        self._write = write
        # target -> task; init and reseed kept apart so an initial seed never waits on a
        # reseed ticket that may be stale (e.g. Redis restarted under it).
        self._init: dict[tuple[str, int, str], asyncio.Task[bool]] = {}
        self._reseeding: dict[tuple[str, int, str], asyncio.Task[bool]] = {}
        self._background: set[asyncio.Task[bool]] = set()

    async def _load_and_write(self, ticket: SeedTicket) -> bool:
        if ticket.scope == "org":
            value = await self._money.org_available(ticket.ident)
        else:
            start, end = period_bounds(ticket.month)
            value = await self._money.key_month_spent(ticket.ident, start, end)
        written = await self._write(ticket, value)
        if written:
            SEEDS.labels(ticket.scope, ticket.mode).inc()
        return written

    async def seed(self, tickets: Iterable[SeedTicket]) -> None:
        """Initial seeds. A DB failure fails the admission closed (money cannot be checked)."""
        tasks = []
        for ticket in tickets:
            task = self._init.get(ticket.target)
            if task is None:
                task = asyncio.create_task(self._load_and_write(ticket))
                self._track(self._init, ticket, task)
            tasks.append(task)
        try:
            # shield: a cancelled (disconnected) request must not cancel the seed others await
            await asyncio.shield(asyncio.gather(*tasks))
        except DatabaseError as exc:
            logger.warning("limits: seeding money state from the database failed: %s", exc)
            raise LimiterUnavailable("balance and spend cannot be checked right now") from exc

    def reseed_later(self, tickets: Iterable[SeedTicket]) -> None:
        for ticket in tickets:
            if ticket.target in self._reseeding or ticket.target in self._init:
                continue
            task = asyncio.create_task(self._reseed(ticket))
            self._track(self._reseeding, ticket, task)
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    @staticmethod
    def _track(
        table: dict[tuple[str, int, str], asyncio.Task[bool]],
        ticket: SeedTicket,
        task: asyncio.Task[bool],
    ) -> None:
        table[ticket.target] = task

        def forget(done: asyncio.Task[bool], key: tuple[str, int, str] = ticket.target) -> None:
            if table.get(key) is done:
                del table[key]

        task.add_done_callback(forget)

    async def _reseed(self, ticket: SeedTicket) -> bool:
        # Swallowed on purpose: the state keeps working with its previous numbers and the next
        # interval claims another reseed. Logged and counted.
        try:
            return await self._load_and_write(ticket)
        except (DatabaseError, LimiterUnavailable) as exc:
            ERRORS.labels("reseed").inc()
            logger.warning("limits: background reseed of %s failed: %s", ticket.target, exc)
            return False

    async def wait_idle(self) -> None:
        """Wait for background reseeds (tests, graceful shutdown)."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    async def aclose(self) -> None:
        await self.wait_idle()
        await asyncio.to_thread(self._money.close)
