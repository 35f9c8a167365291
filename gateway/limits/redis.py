"""The Redis limiter: one Lua script per admission (one round trip), shared by every process.

Failure policy when Redis cannot be reached (connection refused, timeout):
- money fails CLOSED: an admission that holds money raises LimiterUnavailable (a 503);
- free requests (hold 0: count_tokens) fail OPEN on a per-process fallback limiter allowing
  `EZAT_FAILOPEN_RPM_FRACTION` of the key's RPM (conservative: N processes each allow a fraction),
  counted in `ezat_limiter_fail_open_total`;
- settle / release_slot are logged and counted, never raised: the hold or lease expires by itself.
A short circuit breaker (`breaker_seconds`) stops every request from paying a connect timeout
while Redis is down; the price is that recovery is noticed up to that long after Redis returns.

A timeout after the script ran on the server means the request may be counted or hold money in
Redis although the caller saw a failure: conservative, and the hold/slot expires with its TTL.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Literal

from core.redis_clients import tag
from gateway.limits import base, common, settlement
from gateway.limits.base import AdmitRequest, Admitted, Limiter, RateInfo, RequestEnd, SlotRequest
from gateway.limits.common import Heartbeat, Lease, LeaseBook, MoneySource, SeedRunner, SeedTicket
from gateway.limits.local import LocalLimiter
from gateway.limits.periods import month_ttl_seconds, period_id, period_ttl_seconds, retry_after
from gateway.limits.redis_conn import UNREACHABLE, CircuitOpen, Conn, pool_exhausted

logger = logging.getLogger("gateway.limits")

_ADMITTED, _RATE, _FUNDS, _CAPACITY, _NEED_SEED, _CONCURRENCY, _SHARE = 0, 1, 2, 3, 4, 5, 6
# Leases per HEARTBEAT call (each is 3 to 5 keys): bounds one script's run time.
_BEAT_BATCH = 200


class RedisLimiter(Limiter):
    def __init__(
        self,
        url: str,
        *,
        prefix: str = "ezat:",
        money: MoneySource | None = None,
        clock: Callable[[], float] | None = None,
        socket_timeout: float = 0.5,
        connect_timeout: float = 0.25,
        breaker_seconds: float = 1.0,
        lean_client: bool = True,
        heartbeat: bool | None = None,
    ) -> None:
        if money is None:
            from gateway.limits.seed import DbMoneySource

            money = DbMoneySource()
        self._url = url
        # Every key of the limiter carries one hash tag (`{ezat}:…`): a script names a key's, an
        # org's and several deployments' keys at once, and Redis Cluster runs a script only when
        # all of its keys share a slot. The price: the limiter lives on one primary of a cluster.
        self._p = tag(prefix)
        self._clock = clock  # None: Redis's clock (TIME) decides windows and expiries
        self._timeouts = (socket_timeout, connect_timeout)
        self._breaker_seconds = breaker_seconds
        self._lean = lean_client  # False: redis-py for every call (tests of that path)
        self._down_until = 0.0  # monotonic
        self._conn: Conn | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._seeder = SeedRunner(money, self._write_seed)
        # Per-process fallback for free requests while Redis is down (never used for money).
        self._fallback = LocalLimiter(money=money, clock=clock or time.time, heartbeat=False)
        # This process's live requests holding leases in Redis (slots, key/org concurrency).
        self._leases = LeaseBook()
        # Beats on its own only with Redis's clock: tests with a fake clock call heartbeat().
        self._beats = (clock is None) if heartbeat is None else heartbeat
        self._heartbeat = Heartbeat(self.heartbeat)

    # --- plumbing ---------------------------------------------------------------------------
    def _redis(self) -> Conn:
        if time.monotonic() < self._down_until:
            raise CircuitOpen("circuit open after a recent failure")
        loop = asyncio.get_running_loop()
        if self._conn is None or self._loop is not loop:
            self._conn = Conn(self._url, *self._timeouts, lean=self._lean)
            self._loop = loop
        return self._conn

    def _trip(self, op: str, exc: BaseException) -> None:
        if isinstance(exc, CircuitOpen):
            return  # already open: re-tripping would keep it open for as long as traffic flows
        if pool_exhausted(exc):
            # Redis is fine, this process is saturated: fail this request, not all of them.
            logger.warning("limits: redis pool exhausted during %s", op)
            return
        self._down_until = time.monotonic() + self._breaker_seconds
        logger.warning("limits: redis unreachable during %s: %s", op, exc)

    def _now_arg(self) -> str:
        return "" if self._clock is None else str(int(self._clock() * 1000))

    def _wall(self) -> float:
        return time.time() if self._clock is None else self._clock()

    def _org_keys(self, org_id: int) -> list[str]:
        base = f"{self._p}org:{org_id}"
        return [base, f"{base}:hexp", f"{base}:hold"]

    def _kmon_key(self, key_id: int, month: str) -> str:
        return f"{self._p}kmon:{key_id}:{month}"

    def _slot_key(self, deployment_id: int) -> str:
        return f"{self._p}slots:{deployment_id}"

    def _deployment_keys(self, deployment_id: int, org_id: int) -> list[str]:
        """slots, the org's slots there, :orgs, :ref (in the scripts' order)."""
        base = self._slot_key(deployment_id)
        return [base, f"{base}:o:{org_id}", f"{base}:orgs", f"{base}:ref"]

    def _conc_key(self, scope: str, ident: int) -> str:
        return f"{self._p}conc:{scope}:{ident}"

    def _lease_keys(
        self, rid: str, lease: Lease, deployment_id: int | None
    ) -> tuple[list[str], list[str]]:
        """A request's lease sets and the member of each (drop_leases / HEARTBEAT order)."""
        keys: list[str] = []
        members: list[str] = []
        if deployment_id is not None:
            slots, mine, orgs, _ = self._deployment_keys(deployment_id, lease.org_id)
            keys += [slots, mine, orgs]
            members += [rid, rid, str(lease.org_id)]
        if lease.key_conc:
            keys.append(self._conc_key("k", lease.key_id))
            members.append(rid)
        if lease.org_conc:
            keys.append(self._conc_key("o", lease.org_id))
            members.append(rid)
        return keys, members

    async def aclose(self) -> None:
        """Stop the heartbeat, finish reseeds, close the Redis client and the money source."""
        await self._heartbeat.stop()
        await self._seeder.aclose()
        if self._conn is not None:
            await self._conn.aclose()
            self._conn = None

    async def wait_background(self) -> None:
        await self._seeder.wait_idle()

    # --- admission --------------------------------------------------------------------------
    async def admit(self, req: AdmitRequest) -> Admitted:
        try:
            for attempt in range(2):
                res = await self._run_admit(req)
                if int(res[0]) != _NEED_SEED:
                    return self._outcome(req, res)
                if attempt == 0:
                    await self._seeder.seed(self._tickets(req, res, 4, "init"))
            raise base.LimiterUnavailable("money state could not be loaded")
        except UNREACHABLE as exc:
            self._trip("admit", exc)
            if req.hold_nano > 0:
                raise base.LimiterUnavailable(
                    "balance and spend limits cannot be checked right now"
                ) from exc
            common.FAIL_OPEN.inc()
            return await self._fallback.admit(
                replace(req, rpm_limit=common.failopen_rpm(req.rpm_limit))
            )

    async def _run_admit(self, req: AdmitRequest) -> list[Any]:
        conn = self._redis()
        wall = self._wall()
        month = period_id(req.cap_period, wall)  # the cap's period (a month before periods)
        org, hexp, hold = self._org_keys(req.org_id)
        keys = [f"{self._p}rpm:{req.key_id}", org, hexp, hold, self._kmon_key(req.key_id, month)]
        keys += [self._conc_key("k", req.key_id), self._conc_key("o", req.org_id)]
        for candidate in req.candidates:
            keys += self._deployment_keys(candidate[0], req.org_id)
        args: list[Any] = [
            req.request_id,
            req.key_id,
            req.rpm_limit,
            "" if req.spend_cap_nano is None else req.spend_cap_nano,
            req.hold_nano,
            int(common.hold_ttl_seconds() * 1000),
            int(common.reseed_seconds() * 1000),
            period_ttl_seconds(month, wall),
            self._now_arg(),
            "" if req.key_concurrency is None else req.key_concurrency,
            "" if req.org_concurrency is None else req.org_concurrency,
            req.org_id,
            int(common.slot_lease_seconds() * 1000),
            int(common.fair_share_active_seconds() * 1000),
        ]
        for candidate in req.candidates:
            args += [
                candidate[1],
                *common.share_caps(candidate[1], common.candidate_share(candidate)),
            ]
        res: list[Any] = await conn.run(conn.admit, keys, args)
        res.append(month)  # for the tickets
        return res

    def _tickets(
        self, req: AdmitRequest, res: list[Any], at: int, mode: Literal["init", "reseed"]
    ) -> list[SeedTicket]:
        """Tickets from a script reply: need-seed bits (init) or reseed flags (reseed)."""
        month = res[-1]
        if mode == "init":
            bits = int(res[at])
            org_t = (bits & 1, int(res[at + 1]), str(res[at + 2]))
            key_t = (bits & 2, int(res[at + 3]), str(res[at + 4]))
        else:
            org_t = (int(res[at]), int(res[at + 1]), str(res[at + 2]))
            key_t = (int(res[at + 3]), int(res[at + 4]), str(res[at + 5]))
        out = []
        if org_t[0]:
            out.append(SeedTicket("org", req.org_id, "", org_t[1], org_t[2], mode))
        if key_t[0]:
            out.append(SeedTicket("key", req.key_id, month, key_t[1], key_t[2], mode))
        return out

    def _outcome(self, req: AdmitRequest, res: list[Any]) -> Admitted:
        status, count, reset_ms, now_ms = (int(x) for x in res[:4])
        limit = req.rpm_limit
        reset_at = reset_ms / 1000
        if status == _RATE:
            raise base.RateLimited(
                RateInfo(limit, 0, reset_at), retry_after(now_ms / 1000, reset_at)
            )
        reseeds = self._tickets(req, res, 5, "reseed")  # claimed by this call, even if refused
        if reseeds:
            self._seeder.reseed_later(reseeds)
        rate_now = RateInfo(limit, max(0, limit - count), reset_at)
        if status == _FUNDS:
            if int(res[4]) == 1:
                raise base.InsufficientFunds("key_cap", rate_now, req.cap_period)
            raise base.InsufficientFunds("org_balance", rate_now)
        if status == _CAPACITY:
            raise base.CapacityExhausted(rate_now, 1)
        if status == _CONCURRENCY:
            if int(res[4]) == 1:
                raise base.ConcurrencyLimited("key", int(req.key_concurrency or 0), rate_now)
            raise base.ConcurrencyLimited("org", int(req.org_concurrency or 0), rate_now)
        if status == _SHARE:
            at = int(res[11])
            raise base.FairShareLimited(
                int(res[4]), int(req.candidates[at - 1][1]), bool(int(res[12])), rate_now
            )
        chosen = int(res[4])
        deployment = req.candidates[chosen - 1][0] if chosen else None
        key_conc, org_conc = req.key_concurrency is not None, req.org_concurrency is not None
        if deployment is not None or key_conc or org_conc:
            self._leases[req.request_id] = Lease(
                req.key_id, req.org_id, deployment, key_conc, org_conc
            )
            if self._beats:
                self._heartbeat.ensure()
        raw = res[11] if len(res) > 12 else b""  # res[-1] is the month appended by _run_admit
        balance = int(raw) if raw not in (b"", "", None) else None
        return Admitted(RateInfo(limit, max(0, limit - count), reset_at), deployment, balance)

    async def _write_seed(self, ticket: SeedTicket, value: int) -> bool:
        # scripts.SEED is settlement.seed (the correction's sign: "-" for an org's base)
        if ticket.scope == "org":
            key, fld, sign, ttl = self._org_keys(ticket.ident)[0], "base", "-", 0
        else:
            key, fld, sign = self._kmon_key(ticket.ident, ticket.month), "spent", ""
            ttl = period_ttl_seconds(ticket.month, self._wall())
        args = [fld, value, ticket.charged, ticket.gen, ticket.mode, sign, ttl, self._now_arg()]
        try:
            return bool(await self._redis().seed(keys=[key], args=args))
        except UNREACHABLE as exc:
            self._trip("seed", exc)
            raise base.LimiterUnavailable("money state cannot be stored right now") from exc

    # --- settlement -------------------------------------------------------------------------
    def _pop_lease_keys(
        self, request_id: str, key_id: int, org_id: int, deployment_id: int | None
    ) -> list[str]:
        """The request's lease sets in Redis (forgotten here: released by the caller's script)."""
        lease = self._leases.pop(request_id, None)
        if lease is None and deployment_id is not None:
            lease = Lease(key_id, org_id, deployment_id, False, False)
        if lease is None:
            return []
        where = deployment_id if deployment_id is not None else lease.deployment_id
        return self._lease_keys(request_id, lease, where)[0]

    async def _settle(self, end: RequestEnd) -> None:
        request_id, key_id, org_id, hold_nano, cost_nano, deployment_id = end
        if deployment_id is not None:
            await self._fallback.release_slot(request_id, deployment_id)  # if taken there
        lease_keys = self._pop_lease_keys(request_id, key_id, org_id, deployment_id)
        if not settlement.touches_money(hold_nano, cost_nano):
            if lease_keys:
                await self._release(request_id, org_id, lease_keys, "settle")
            return
        wall = self._wall()
        month, day, total = settlement.settle_periods(wall)
        # scripts.SETTLE is settlement.settle on Redis's storage. The leases go in the same
        # script: one round trip at the end of a request.
        keys = [
            *self._org_keys(org_id),
            self._kmon_key(key_id, month),
            self._kmon_key(key_id, day),
            self._kmon_key(key_id, total),
            *lease_keys,
        ]
        args = [
            request_id,
            max(0, cost_nano),
            int(settlement.SETTLED_MARKER_SECONDS * 1000),
            month_ttl_seconds(month, wall),
            self._now_arg(),
            org_id,
        ]
        try:
            conn = self._redis()
            await conn.run(conn.settle, keys, args)
        except UNREACHABLE as exc:
            # The hold expires with its TTL, the leases with theirs; the cost is in the usage
            # record, so the next seed or reseed after Redis returns counts it. Swallowed,
            # logged, counted.
            self._trip("settle", exc)
            common.ERRORS.labels("settle").inc()

    async def _hold_unflushed(self, end: RequestEnd) -> None:
        request_id, key_id, org_id, _, cost_nano, deployment_id = end
        lease_keys = self._pop_lease_keys(request_id, key_id, org_id, deployment_id)
        if cost_nano <= 0:
            if lease_keys:
                await self._release(request_id, org_id, lease_keys, "hold_unflushed")
            return
        args = [
            request_id,
            cost_nano,
            int(common.unflushed_hold_seconds() * 1000),
            self._now_arg(),
            org_id,
            key_id,
        ]
        try:
            conn = self._redis()
            await conn.run(conn.hold_unflushed, [*self._org_keys(org_id), *lease_keys], args)
        except UNREACHABLE as exc:
            # The worst-case hold stays until its TTL (conservative); the flusher's settle
            # charges the cost once the row is stored. Swallowed, logged, counted.
            self._trip("hold_unflushed", exc)
            common.ERRORS.labels("hold_unflushed").inc()

    async def _release(self, request_id: str, org_id: int, keys: list[str], op: str) -> None:
        try:
            conn = self._redis()
            await conn.run(conn.release, keys, [request_id, org_id, self._now_arg()])
        except UNREACHABLE as exc:
            self._trip(op, exc)
            common.ERRORS.labels(op).inc()  # the leases lapse by themselves (no more heartbeats)

    # --- capacity ---------------------------------------------------------------------------
    async def _acquire_slot(self, slot: SlotRequest) -> bool:
        request_id, deployment_id, max_concurrency, org_id, share = slot
        try:
            args = [
                request_id,
                max_concurrency,
                int(common.slot_lease_seconds() * 1000),
                self._now_arg(),
                org_id,
                *common.share_caps(max_concurrency, share),
                int(common.fair_share_active_seconds() * 1000),
            ]
            conn = self._redis()
            keys = self._deployment_keys(deployment_id, org_id)
            taken = bool(int(await conn.run(conn.acquire, keys, args)))
        except UNREACHABLE as exc:
            # Failover of an already admitted request: fail open on the per-process slots.
            self._trip("acquire_slot", exc)
            common.FAIL_OPEN.inc()
            return await self._fallback._acquire_slot(slot)  # the same call, on its storage
        if taken and self._leases.took_slot(request_id, org_id, deployment_id) and self._beats:
            self._heartbeat.ensure()
        return taken

    async def release_slot(self, request_id: str, deployment_id: int) -> None:
        await self._fallback.release_slot(request_id, deployment_id)  # in case it was taken there
        lease = self._leases.gave_back_slot(request_id, deployment_id)
        org_id = lease.org_id if lease is not None else 0
        slots, mine, orgs, _ = self._deployment_keys(deployment_id, org_id)
        keys = [slots, mine, orgs] if lease is not None else [slots]
        await self._release(request_id, org_id, keys, "release_slot")

    async def heartbeat(self) -> None:
        """Extend this process's leases: one HEARTBEAT call per batch of live requests."""
        mono = time.monotonic()
        self._leases.drop_expired(mono)
        items = list(self._leases.items())
        for start in range(0, len(items), _BEAT_BATCH):
            keys: list[str] = []
            args: list[Any] = [self._now_arg(), int(common.slot_lease_seconds() * 1000)]
            for rid, lease in items[start : start + _BEAT_BATCH]:
                lease_keys, members = self._lease_keys(rid, lease, lease.deployment_id)
                keys += lease_keys
                args += members
            if not keys:
                continue
            try:
                conn = self._redis()
                lost = int(await conn.run(conn.heartbeat, keys, args))
            except UNREACHABLE as exc:
                self._trip("heartbeat", exc)
                common.ERRORS.labels("heartbeat").inc()
                return
            if lost:
                # Leases that lapsed before this beat (the loop stalled longer than a lease):
                # those requests run uncounted until they end. Logged, never raised.
                logger.warning("limits: %d leases lapsed before their heartbeat", lost)
                common.ERRORS.labels("lease_lapsed").inc(lost)

    async def open_holds(self, org_id: int) -> int:
        """The org's `held` field: one HGET (expired holds are purged by the next admission,
        so this may count a hold of a crashed request until then: conservative)."""
        try:
            held = await self._redis().client.hget(self._org_keys(org_id)[0], "held")
        except UNREACHABLE as exc:
            self._trip("open_holds", exc)
            raise base.LimiterUnavailable("open holds are unavailable (Redis)") from exc
        return max(0, int(held or 0))

    async def in_flight(self, deployment_ids: list[int]) -> dict[int, int]:
        if not deployment_ids:
            return {}
        try:
            keys = [self._slot_key(d) for d in deployment_ids]
            counts = await self._redis().in_flight(keys=keys, args=[self._now_arg()])
        except UNREACHABLE as exc:
            self._trip("in_flight", exc)
            raise base.LimiterUnavailable("concurrency counts are unavailable (Redis)") from exc
        return {d: int(c) for d, c in zip(deployment_ids, counts, strict=True)}


__all__ = ["RedisLimiter"]
