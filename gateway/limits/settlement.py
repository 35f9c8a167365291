"""The limiters' money arithmetic, once: how a hold becomes spend, and how a seed corrects a state.

Pure: values in, values out (no Django, no I/O, no clock: `now` is passed, epoch seconds). The
in-process limiter (local.py) keeps its state in memory and applies these functions to it; the
Redis limiter runs the same arithmetic inside its Lua scripts (scripts.SETTLE, scripts.SEED,
scripts.ADMIT's money checks), which cannot call Python.
`tests/gateway/limits/test_limits_settlement.py`
checks this module with a table and hypothesis properties, then runs one table of cases through
both backends and asserts that each storage ends where this module says: the two cannot drift.

The rules, in words:
- A settle releases the request's live hold (if it still has one: a hold can expire first),
  charges `cost` (clamped at 0) to the org's base and to the key's spend in the current month,
  and in its current day and its total where those states exist (a key capped per day or in
  total has them), and leaves a marker so a second settle of the same request is a no-op.
- A free request (no hold and no cost: count_tokens) touches no money state at all.
- Every state counts `charged`, Σ costs settled since its last seed write, also before it is
  seeded: a seed takes a ticket (`charged` = c0), reads the database, then writes
  `value = db ∓ (charged_now − c0)` (common.py explains why this is never optimistic).
- A request is admitted with money when neither its key's cap (spend + the key's live holds +
  this hold) nor its org's balance (base − the org's live holds) would be exceeded; the key's
  cap is checked first.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from gateway.limits.periods import TOTAL_PERIOD, day_id

# A settled request leaves a marker this long so a second settle is a no-op. After it lapses a
# repeated settle would charge again: only the live counters (conservative), never the DB.
SETTLED_MARKER_SECONDS = 300.0

# Which way a cost moves a state's value: an org's base (money available) goes down, a key's
# spend goes up. The Redis SEED script takes the same sign as "-" / "".
ORG_SIGN = -1
KEY_SIGN = 1

# The states are NamedTuples, not frozen dataclasses: a settle builds about ten of them on every
# request's way out, and a frozen dataclass's __init__ (object.__setattr__ per field) cost the
# embedded gateway 3.5 % of its instructions per request (bench.icount); a tuple is as immutable.


class Tally(NamedTuple):
    """One money state: an org's base (available before holds) or a key's spend in one period."""

    value: int | None = None  # None: not seeded yet (the database is read before it is used)
    charged: int = 0  # Σ costs settled since the last seed write (the seeding correction)


class Hold(NamedTuple):
    """A request's entry in its org's holds: a live hold, or the marker a settle leaves."""

    amount: int  # nano-USD held (0 for a marker)
    key_id: int  # the key it is held for (0 for a marker: nothing is released from it)
    expires: float  # epoch seconds: a live hold then stops counting, a marker is forgotten
    settled: bool = False


class Book(NamedTuple):
    """What one settle reads and writes: the request's entry, its org's and its key's states."""

    entry: Hold | None  # None: never held here, or the hold expired and was purged
    org: Tally
    held: int  # Σ live holds of the org
    key_held: int  # Σ live holds of the key the request was admitted under
    month: Tally  # the key's spend in the month of the settle (created by a charge if missing)
    day: Tally | None  # in the day of the settle: only where the state exists
    total: Tally | None  # in total: only where the state exists


def touches_money(hold_nano: int, cost_nano: int) -> bool:
    """False for a free request (nothing held, nothing to charge): its settle only releases
    leases."""
    return hold_nano > 0 or cost_nano > 0


def settle_periods(now: float) -> tuple[str, str, str]:
    """The key's period ids a settle at `now` charges: (month, day, total). The month's state is
    charged always, the day's and the total's where they exist."""
    day = day_id(now)  # "YYYYMMDD": its month is its first six characters (one clock read)
    return day[:6], day, TOTAL_PERIOD


def marker(now: float) -> Hold:
    return Hold(0, 0, now + SETTLED_MARKER_SECONDS, settled=True)


def charge(tally: Tally, cost_nano: int, sign: int) -> Tally:
    """`tally` after a settled cost. `charged` moves even when the state is not seeded yet: a
    seed whose database read is in flight subtracts it again."""
    if cost_nano <= 0:
        return tally
    value = None if tally.value is None else tally.value + sign * cost_nano
    return Tally(value, tally.charged + cost_nano)


def settle(book: Book, cost_nano: int, now: float) -> Book | None:
    """The book after the request settles at `now` with `cost_nano`; None when it has settled
    already (its marker is live): a second settle changes nothing."""
    entry = book.entry
    if entry is not None and entry.settled:
        return None
    released = entry.amount if entry is not None else 0
    cost = max(0, cost_nano)
    return Book(
        entry=marker(now),
        org=charge(book.org, cost, ORG_SIGN),
        held=book.held - released,
        key_held=book.key_held - released,
        month=charge(book.month, cost, KEY_SIGN),
        day=None if book.day is None else charge(book.day, cost, KEY_SIGN),
        total=None if book.total is None else charge(book.total, cost, KEY_SIGN),
    )


def seed(
    tally: Tally, db_value: int, ticket_charged: int, mode: Literal["init", "reseed"], sign: int
) -> Tally | None:
    """`tally` after a seed write of `db_value` read under a ticket taken when `charged` was
    `ticket_charged`; None when the write does not apply (an init finds the state seeded
    already, a reseed finds it gone). The caller also checks the ticket's generation."""
    if (mode == "init") != (tally.value is None):
        return None
    delta = max(0, tally.charged - ticket_charged)
    return Tally(db_value + sign * delta, delta)


def money_refusal(
    base: int, held: int, spent: int | None, key_held: int, hold_nano: int, cap_nano: int | None
) -> Literal["key_cap", "org_balance"] | None:
    """Why a request holding `hold_nano` must be refused, or None when the money is there.
    `base` is the org's seeded base; `spent` the key's seeded spend (None: the key has no cap)."""
    if cap_nano is not None and spent is not None and spent + key_held + hold_nano > cap_nano:
        return "key_cap"
    if hold_nano > base - held:
        return "org_balance"
    return None
