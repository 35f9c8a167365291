"""The in-process limiter: the embedded default (one process, SQLite); Redis's fail-open fallback.

Every check-and-commit runs under one `threading.Lock` with no await inside, so it is atomic for
the event loop and also for `notify_credit`, which arrives from whatever thread committed a
credit grant. The lock is uncontended on the hot path (one loop thread), so it costs ~100 ns.

The semantics mirror the Redis Lua script exactly (same seeding protocol, same refusal order,
same hold and slot expiry); `tests/gateway/limits/test_limits_contract.py` runs one suite on both.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.limits import base, common
from gateway.limits.base import AdmitRequest, Admitted, Limiter, RateInfo, RequestEnd, SlotRequest
from gateway.limits.common import Heartbeat, Lease, LeaseBook, MoneySource, SeedRunner, SeedTicket
from gateway.limits.periods import TOTAL_PERIOD, day_id, minute_window, month_id, retry_after
from gateway.limits.settlement import (
    KEY_SIGN,
    ORG_SIGN,
    Book,
    Hold,
    Tally,
    money_refusal,
    seed,
    settle,
    settle_periods,
    touches_money,
)

_ROOM, _FULL, _SHARE = 0, 1, 2

# Purging expired holds is amortised: at most this many per admission, like the Lua script.
_PURGE_BATCH = 256


@dataclass(slots=True)
class _OrgState:
    base: int | None = None  # available money before holds; None = not seeded yet
    charged: int = 0  # Σ settled cost since the last seed write (seeding arithmetic)
    gen: int = 0
    seeded_at: float = 0.0
    held: int = 0
    key_held: dict[int, int] = field(default_factory=dict)
    holds: dict[str, Hold] = field(default_factory=dict)
    expiry: list[tuple[float, str]] = field(default_factory=list)  # heap, lazily deleted


@dataclass(slots=True)
class _KeyMonth:
    spent: int | None = None
    charged: int = 0
    gen: int = 0
    seeded_at: float = 0.0

    def tally(self) -> Tally:
        return Tally(self.spent, self.charged)

    def store(self, tally: Tally) -> None:
        self.spent, self.charged = tally.value, tally.charged


class LocalLimiter(Limiter):
    def __init__(
        self,
        *,
        money: MoneySource | None = None,
        clock: Callable[[], float] = time.time,
        heartbeat: bool | None = None,
    ) -> None:
        if money is None:
            from gateway.limits.seed import DbMoneySource

            money = DbMoneySource()
        self._clock = clock
        self._lock = threading.Lock()
        self._rpm: dict[int, tuple[int, int]] = {}  # key id -> (minute, count)
        self._rpm_minute = -1
        self._orgs: dict[int, _OrgState] = {}
        # (key id, period id) -> the key's spend in that cap period (common.period_id)
        self._months: dict[tuple[int, str], _KeyMonth] = {}
        self._current_month = ""
        self._current_day = ""
        # deployment -> request id -> (lease end, org); insertion order = expiry order
        self._slots: dict[int, dict[str, tuple[float, int]]] = {}
        self._org_slots: dict[int, dict[int, int]] = {}  # deployment -> org -> live slots
        self._refused: dict[int, dict[int, float]] = {}  # deployment -> org -> active until
        # ("k", key id) | ("o", org id) -> request id -> lease end (insertion = expiry order)
        self._conc: dict[tuple[str, int], dict[str, float]] = {}
        self._leases = LeaseBook()  # this process's live requests, for the heartbeat
        self._seeder = SeedRunner(money, self._write_seed)
        # Beats on its own only with the real clock: tests with a fake clock call heartbeat().
        self._beats = (clock is time.time) if heartbeat is None else heartbeat
        self._heartbeat = Heartbeat(self.heartbeat)

    # --- admission --------------------------------------------------------------------------
    async def admit(self, req: AdmitRequest) -> Admitted:
        for attempt in range(2):
            outcome = self._try_admit(req)
            if isinstance(outcome, Admitted):
                return outcome
            if attempt == 0:
                await self._seeder.seed(outcome)
        raise base.LimiterUnavailable("money state could not be loaded")

    def _try_admit(self, req: AdmitRequest) -> Admitted | list[SeedTicket]:
        reseeds: list[SeedTicket] = []
        try:
            with self._lock:
                return self._decide(req, self._clock(), reseeds)
        finally:
            if reseeds:  # claimed by this call, even if it was refused
                self._seeder.reseed_later(reseeds)

    def _decide(
        self, req: AdmitRequest, now: float, reseeds: list[SeedTicket]
    ) -> Admitted | list[SeedTicket]:
        """Check everything, then commit everything; the caller holds the lock."""
        minute, reset_at = minute_window(now)
        limit = req.rpm_limit
        self._prune(minute, now)
        window = self._rpm.get(req.key_id)
        count = window[1] if window is not None and window[0] == minute else 0
        if count >= limit:
            raise base.RateLimited(RateInfo(limit, 0, reset_at), retry_after(now, reset_at))
        rate_now = RateInfo(limit, max(0, limit - count), reset_at)

        org: _OrgState | None = None
        if req.hold_nano > 0:
            org = self._orgs.setdefault(req.org_id, _OrgState())
            self._purge_holds(org, now)
            km: _KeyMonth | None = None
            month = self._period(req.cap_period)
            need: list[SeedTicket] = []
            if org.base is None:
                need.append(SeedTicket("org", req.org_id, "", org.charged, str(org.gen), "init"))
            if req.spend_cap_nano is not None:
                km = self._months.setdefault((req.key_id, month), _KeyMonth())
                if km.spent is None:
                    need.append(
                        SeedTicket("key", req.key_id, month, km.charged, str(km.gen), "init")
                    )
            if need or org.base is None:
                return need
            # Claimed whatever the outcome: an org refused for lack of money must still learn
            # of credit granted elsewhere. seeded_at is bookkeeping, not consumed by the request.
            reseed_after = common.reseed_seconds()
            if now - org.seeded_at >= reseed_after:
                org.seeded_at = now  # no second reseed until the next interval
                reseeds.append(
                    SeedTicket("org", req.org_id, "", org.charged, str(org.gen), "reseed")
                )
            if km is not None and now - km.seeded_at >= reseed_after:
                km.seeded_at = now
                reseeds.append(
                    SeedTicket("key", req.key_id, month, km.charged, str(km.gen), "reseed")
                )
            scope = money_refusal(
                org.base,
                org.held,
                None if km is None else km.spent,
                org.key_held.get(req.key_id, 0),
                req.hold_nano,
                req.spend_cap_nano,
            )
            if scope == "key_cap":
                raise base.InsufficientFunds(scope, rate_now, req.cap_period)
            if scope is not None:
                raise base.InsufficientFunds(scope, rate_now)

        lease_end = now + common.slot_lease_seconds()
        conc: list[tuple[str, int]] = []
        for scope, ident, most in (
            ("k", req.key_id, req.key_concurrency),
            ("o", req.org_id, req.org_concurrency),
        ):
            if most is not None:
                if len(self._live_conc((scope, ident), now)) >= most:
                    raise base.ConcurrencyLimited("key" if scope == "k" else "org", most, rate_now)
                conc.append((scope, ident))

        chosen: int | None = None
        share_refusal: tuple[int, int, bool] | None = None  # (cap, max, shared) of the first
        for candidate in req.candidates:
            deployment_id, max_concurrency = candidate[0], candidate[1]
            verdict, cap, shared = self._verdict(
                deployment_id, max_concurrency, common.candidate_share(candidate), req.org_id, now
            )
            if verdict == _ROOM:
                chosen = deployment_id
                break
            if verdict == _SHARE and share_refusal is None:
                share_refusal = (cap, max_concurrency, shared)
        if req.candidates and chosen is None:
            until = now + common.fair_share_active_seconds()
            for candidate in req.candidates:
                self._refused.setdefault(candidate[0], {})[req.org_id] = until
            if share_refusal is not None:
                raise base.FairShareLimited(*share_refusal, rate_now)
            raise base.CapacityExhausted(rate_now, 1)

        # Everything passed: commit rate, hold, slot and concurrency together.
        self._rpm[req.key_id] = (minute, count + 1)
        if org is not None:
            self._add_hold(
                org, req.request_id, req.key_id, req.hold_nano, now + common.hold_ttl_seconds()
            )
        if chosen is not None:
            self._take_slot(chosen, req.request_id, req.org_id, lease_end)
        for target in conc:
            self._conc.setdefault(target, {})[req.request_id] = lease_end
        if chosen is not None or conc:
            self._leases[req.request_id] = Lease(
                req.key_id, req.org_id, chosen, ("k", req.key_id) in conc, ("o", req.org_id) in conc
            )
            if self._beats:
                self._heartbeat.ensure()
        balance = org.base if org is not None else None
        return Admitted(RateInfo(limit, max(0, limit - count - 1), reset_at), chosen, balance)

    # --- holds ------------------------------------------------------------------------------
    @staticmethod
    def _release(org: _OrgState, hold: Hold) -> None:
        org.held -= hold.amount
        left = org.key_held.get(hold.key_id, 0) - hold.amount
        if left > 0:
            org.key_held[hold.key_id] = left
        else:
            org.key_held.pop(hold.key_id, None)

    def _add_hold(self, org: _OrgState, rid: str, key_id: int, amount: int, expires: float) -> None:
        previous = org.holds.get(rid)
        if previous is not None and not previous.settled:  # a re-admitted id replaces its hold
            self._release(org, previous)
        org.holds[rid] = Hold(amount, key_id, expires)
        org.held += amount
        org.key_held[key_id] = org.key_held.get(key_id, 0) + amount
        heapq.heappush(org.expiry, (expires, rid))

    def _purge_holds(self, org: _OrgState, now: float) -> None:
        heap = org.expiry
        for _ in range(_PURGE_BATCH):
            if not heap or heap[0][0] > now:
                return
            expires, rid = heapq.heappop(heap)
            hold = org.holds.get(rid)
            if hold is None or hold.expires != expires:  # superseded entry (lazy deletion)
                continue
            del org.holds[rid]
            if not hold.settled:
                self._release(org, hold)

    async def _settle(self, end: RequestEnd) -> None:
        request_id, key_id, org_id, hold_nano, cost_nano, deployment_id = end
        self._release_leases(request_id, deployment_id)
        if not touches_money(hold_nano, cost_nano):
            return
        now = self._clock()
        month, day, total = settle_periods(now)
        with self._lock:
            org = self._orgs.setdefault(org_id, _OrgState())
            # The month's state is created by a charge; the day's and the total's exist only for
            # keys capped that way (or a seed in flight for one): charged when present.
            km, kd, kt = (self._months.get((key_id, p)) for p in (month, day, total))
            entry = org.holds.get(request_id)
            held_for = key_id if entry is None or entry.settled else entry.key_id
            book = Book(
                entry,
                Tally(org.base, org.charged),
                org.held,
                org.key_held.get(held_for, 0),
                Tally() if km is None else km.tally(),
                None if kd is None else kd.tally(),
                None if kt is None else kt.tally(),
            )
            after = settle(book, cost_nano, now)
            if after is None:
                return  # settled already: idempotent
            assert after.entry is not None
            org.holds[request_id] = after.entry
            heapq.heappush(org.expiry, (after.entry.expires, request_id))
            org.base, org.charged, org.held = after.org.value, after.org.charged, after.held
            if after.key_held > 0:
                org.key_held[held_for] = after.key_held
            else:
                org.key_held.pop(held_for, None)
            if after.month != book.month:
                self._months.setdefault((key_id, month), _KeyMonth()).store(after.month)
            for state, tally in ((kd, after.day), (kt, after.total)):
                if state is not None and tally is not None:
                    state.store(tally)

    async def _hold_unflushed(self, end: RequestEnd) -> None:
        request_id, key_id, org_id, _, cost_nano, deployment_id = end
        self._release_leases(request_id, deployment_id)
        if cost_nano <= 0:
            return
        expires = self._clock() + common.unflushed_hold_seconds()
        with self._lock:
            org = self._orgs.setdefault(org_id, _OrgState())
            hold = org.holds.get(request_id)
            if hold is not None and hold.settled:
                return  # the flusher settled it first
            self._add_hold(org, request_id, key_id, cost_nano, expires)

    # --- seeding ----------------------------------------------------------------------------
    async def _write_seed(self, ticket: SeedTicket, value: int) -> bool:
        now = self._clock()
        with self._lock:
            state: _OrgState | _KeyMonth | None
            if ticket.scope == "org":
                state = self._orgs.get(ticket.ident)
                current = None if state is None else state.base
            else:
                state = self._months.get((ticket.ident, ticket.month))
                current = None if state is None else state.spent
            if state is None or str(state.gen) != ticket.gen:
                return False
            sign = ORG_SIGN if isinstance(state, _OrgState) else KEY_SIGN
            after = seed(Tally(current, state.charged), value, ticket.charged, ticket.mode, sign)
            if after is None:
                return False  # init: someone seeded first; reseed: state vanished
            if isinstance(state, _OrgState):
                state.base = after.value
            else:
                state.spent = after.value
            state.charged = after.charged
            state.gen += 1
            state.seeded_at = now
            return True

    def notify_credit(self, org_id: int, amount_nano: int) -> None:
        """New credit is spendable at once; the next admission also rereads the DB (common.py)."""
        with self._lock:
            org = self._orgs.get(org_id)
            if org is not None and org.base is not None:
                org.base += amount_nano
                org.seeded_at = float("-inf")

    async def wait_background(self) -> None:
        await self._seeder.wait_idle()

    async def aclose(self) -> None:
        """Stop the heartbeat, finish reseeds, close the money source's DB connections."""
        await self._heartbeat.stop()
        await self._seeder.aclose()

    # --- capacity and concurrency leases ---------------------------------------------------
    def _live_slots(self, deployment_id: int, now: float) -> dict[str, tuple[float, int]]:
        slots = self._slots.get(deployment_id)
        if slots is None:
            return {}
        # Leases are inserted in expiry order (constant lease; a refresh re-inserts), so expired
        # ones are at the front: the scan stops at the first live lease instead of walking all.
        expired = []
        for rid, (until, _) in slots.items():
            if until > now:
                break
            expired.append(rid)
        for rid in expired:
            self._drop_slot(deployment_id, rid)
        return slots

    def _live_conc(self, target: tuple[str, int], now: float) -> dict[str, float]:
        leases = self._conc.get(target)
        if leases is None:
            return {}
        expired = []
        for rid, until in leases.items():
            if until > now:
                break
            expired.append(rid)
        for rid in expired:
            del leases[rid]
        if not leases:
            del self._conc[target]
        return leases

    def _take_slot(self, deployment_id: int, rid: str, org_id: int, until: float) -> None:
        slots = self._slots.setdefault(deployment_id, {})
        if rid in slots:
            self._drop_slot(deployment_id, rid)  # a refresh: re-inserted last, keeping the order
            slots = self._slots.setdefault(deployment_id, {})
        slots[rid] = (until, org_id)
        counts = self._org_slots.setdefault(deployment_id, {})
        counts[org_id] = counts.get(org_id, 0) + 1

    def _drop_slot(self, deployment_id: int, rid: str) -> None:
        slots = self._slots.get(deployment_id)
        if slots is None or rid not in slots:
            return
        _, org_id = slots.pop(rid)
        counts = self._org_slots.get(deployment_id, {})
        left = counts.get(org_id, 0) - 1
        if left > 0:
            counts[org_id] = left
        else:
            counts.pop(org_id, None)

    def _verdict(
        self, deployment_id: int, max_concurrency: int, share: float, org_id: int, now: float
    ) -> tuple[int, int, bool]:
        """(_ROOM | _FULL | _SHARE, the org's cap here, whether other orgs are active here).

        "Active" on a deployment (the share rule's word): an org is active there while it holds
        a live slot on it, or for EZAT_FAIR_SHARE_ACTIVE_SECONDS after it was refused one (it
        is waiting). The asking org counts itself, so "two or more active" = another org is.
        """
        if len(self._live_slots(deployment_id, now)) >= max_concurrency:
            return _FULL, max_concurrency, False
        shared_cap, lone_cap = common.share_caps(max_concurrency, share)
        if lone_cap >= max_concurrency:
            return _ROOM, max_concurrency, False
        counts = self._org_slots.get(deployment_id, {})
        refused = self._refused.get(deployment_id)
        if refused:
            for other in [o for o, until in refused.items() if until <= now]:
                del refused[other]
        others = any(o != org_id for o in counts) or any(o != org_id for o in refused or ())
        cap = shared_cap if others else lone_cap
        if counts.get(org_id, 0) >= cap:
            return _SHARE, cap, others
        return _ROOM, cap, others

    async def _acquire_slot(self, slot: SlotRequest) -> bool:
        request_id, deployment_id, max_concurrency, org_id, share = slot
        now = self._clock()
        with self._lock:
            slots = self._live_slots(deployment_id, now)
            if request_id not in slots:
                verdict, _, _ = self._verdict(deployment_id, max_concurrency, share, org_id, now)
                if verdict != _ROOM:
                    until = now + common.fair_share_active_seconds()
                    self._refused.setdefault(deployment_id, {})[org_id] = until
                    return False
            self._take_slot(deployment_id, request_id, org_id, now + common.slot_lease_seconds())
            self._leases.took_slot(request_id, org_id, deployment_id)
            return True

    async def release_slot(self, request_id: str, deployment_id: int) -> None:
        with self._lock:
            self._drop_slot(deployment_id, request_id)
            self._leases.gave_back_slot(request_id, deployment_id)

    def _release_leases(self, request_id: str, deployment_id: int | None) -> None:
        with self._lock:
            lease = self._leases.pop(request_id, None)
            if deployment_id is not None:
                self._drop_slot(deployment_id, request_id)
            if lease is None:
                return
            if lease.deployment_id is not None:
                self._drop_slot(lease.deployment_id, request_id)
            for target, counted in (
                (("k", lease.key_id), lease.key_conc),
                (("o", lease.org_id), lease.org_conc),
            ):
                leases = self._conc.get(target)
                if counted and leases is not None:
                    leases.pop(request_id, None)
                    if not leases:
                        del self._conc[target]

    async def heartbeat(self) -> None:
        """Extend every live lease of this process (in-process state dies with the process, so
        this matters for the contract only: both implementations expire unbeaten leases)."""
        now = self._clock()
        until = now + common.slot_lease_seconds()
        mono = time.monotonic()
        with self._lock:
            self._leases.drop_expired(mono)
            for rid, lease in self._leases.items():
                d = lease.deployment_id
                if d is not None and rid in self._live_slots(d, now):
                    self._take_slot(d, rid, lease.org_id, until)
                for target, counted in (
                    (("k", lease.key_id), lease.key_conc),
                    (("o", lease.org_id), lease.org_conc),
                ):
                    leases = self._conc.get(target) if counted else None
                    if leases is not None and leases.get(rid, now) > now:
                        del leases[rid]
                        leases[rid] = until

    async def in_flight(self, deployment_ids: list[int]) -> dict[int, int]:
        now = self._clock()
        with self._lock:
            return {d: len(self._live_slots(d, now)) for d in deployment_ids}

    async def open_holds(self, org_id: int) -> int:
        return self.open_holds_now(org_id)

    def open_holds_now(self, org_id: int) -> int:
        """Sync (dashboard pages in the embedded single process; any thread: under the lock)."""
        now = self._clock()
        with self._lock:
            org = self._orgs.get(org_id)
            if org is None:
                return 0
            self._purge_holds(org, now)
            return max(0, org.held)

    # --- bounds -----------------------------------------------------------------------------
    def _prune(self, minute: int, now: float) -> None:
        """Drop finished minute windows and past periods' spend, once per minute/day change."""
        if minute != self._rpm_minute:
            self._rpm_minute = minute
            self._rpm = {k: w for k, w in self._rpm.items() if w[0] == minute}
            month, day = month_id(now), day_id(now)
            if month != self._current_month or day != self._current_day:
                self._current_month, self._current_day = month, day
                keep = (month, day, TOTAL_PERIOD)
                self._months = {k: m for k, m in self._months.items() if k[1] in keep}

    def _period(self, period: str) -> str:
        """The current id of a cap period (kept current by _prune, like the minute)."""
        if period == "day":
            return self._current_day
        if period == TOTAL_PERIOD:
            return TOTAL_PERIOD
        return self._current_month
