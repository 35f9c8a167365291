"""The settle and seed arithmetic (gateway/limits/settlement.py), tested once.

Tables and hypothesis properties on the pure functions. The backends' agreement with them, on
one table of cases through both storages, is in test_limits_settlement_backends.py.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.limits.periods import TOTAL_PERIOD
from gateway.limits.settlement import (
    KEY_SIGN,
    ORG_SIGN,
    SETTLED_MARKER_SECONDS,
    Book,
    Hold,
    Tally,
    charge,
    money_refusal,
    seed,
    settle,
    settle_periods,
    touches_money,
)
from tests.gateway.limits.conftest import T0

NOW = T0 + 10


def book(**kw: object) -> Book:
    fields: dict[str, object] = {
        "entry": Hold(1_000, 1, NOW + 900),
        "org": Tally(10_000, 0),
        "held": 1_000,
        "key_held": 1_000,
        "month": Tally(500, 0),
        "day": None,
        "total": None,
    }
    fields.update(kw)
    return Book(**fields)  # type: ignore[arg-type]


def settled(**kw: object) -> Book:
    """What `book()` becomes after its settle: the marker, no holds; `kw` the moved states."""
    marked = Hold(0, 0, NOW + SETTLED_MARKER_SECONDS, settled=True)
    return book(**{"entry": marked, "held": 0, "key_held": 0, **kw})


# --- settle: a table --------------------------------------------------------------------------
SETTLE_CASES = [
    # (what, book before, cost, the book after; None = a no-op)
    (
        "the hold is released and the cost charged to org and month",
        book(),
        400,
        settled(
            org=Tally(9_600, 400),
            month=Tally(900, 400),
        ),
    ),
    (
        "a second settle is a no-op",
        book(entry=Hold(0, 0, NOW + 1, settled=True)),
        400,
        None,
    ),
    (
        "a hold that expired first: the cost is still charged, nothing released",
        book(entry=None, held=300, key_held=300),
        250,
        settled(
            org=Tally(9_750, 250),
            held=300,
            key_held=300,
            month=Tally(750, 250),
        ),
    ),
    (
        "unseeded states count `charged` only (a seed in flight subtracts it)",
        book(org=Tally(None, 7), month=Tally(None, 0)),
        100,
        settled(
            org=Tally(None, 107),
            month=Tally(None, 100),
        ),
    ),
    (
        "the day's and the total's states are charged where they exist",
        book(day=Tally(50, 50), total=Tally(None, 3)),
        10,
        settled(
            org=Tally(9_990, 10),
            month=Tally(510, 10),
            day=Tally(60, 60),
            total=Tally(None, 13),
        ),
    ),
    (
        "a cost of 0 releases the hold and leaves the marker, charges nothing",
        book(),
        0,
        settled(),
    ),
    (
        "a negative cost is clamped at 0: no refund through the limiter",
        book(),
        -5,
        settled(),
    ),
    (
        "beyond a double's integers, exact (money is integer nano-USD)",
        book(org=Tally(10**16 + 7, 0), month=Tally(2**53, 0)),
        1,
        settled(
            org=Tally(10**16 + 6, 1),
            month=Tally(2**53 + 1, 1),
        ),
    ),
]


@pytest.mark.parametrize(("what", "before", "cost", "after"), SETTLE_CASES)
def test_settle_table(what: str, before: Book, cost: int, after: Book | None) -> None:
    assert settle(before, cost, NOW) == after, what


def test_free_requests_touch_no_money() -> None:
    assert not touches_money(0, 0)
    assert touches_money(1, 0)  # a hold to release
    assert touches_money(0, 1)  # a hold that expired, a cost to charge
    assert not touches_money(-1, -1)


def test_settle_periods_name_the_month_day_and_total_of_now() -> None:
    assert settle_periods(T0) == ("202503", "20250310", TOTAL_PERIOD)
    last = T0 + 21 * 86400 + 11 * 3600 + 59 * 60 + 59  # 2025-03-31 23:59:59 UTC
    assert settle_periods(last) == ("202503", "20250331", TOTAL_PERIOD)
    assert settle_periods(last + 1) == ("202504", "20250401", TOTAL_PERIOD)


# --- seed: a table ----------------------------------------------------------------------------
SEED_CASES = [
    # (what, state, db value, ticket's charged, mode, sign, state after; None = not applied)
    ("init of an unseeded org: the database's value", Tally(None, 0), 900, 0, "init", -1, (900, 0)),
    (
        "a settle after the ticket is subtracted from the org's base again",
        Tally(None, 70),
        900,
        50,
        "init",
        ORG_SIGN,
        (880, 20),
    ),
    ("... and added to a key's spend", Tally(None, 70), 900, 50, "init", KEY_SIGN, (920, 20)),
    ("a reseed with nothing settled meanwhile", Tally(400, 30), 380, 30, "reseed", -1, (380, 0)),
    ("an init finds the state seeded first", Tally(400, 0), 380, 0, "init", -1, None),
    ("a reseed finds the state gone", Tally(None, 0), 380, 0, "reseed", -1, None),
    (
        "charged below the ticket (state recreated): no negative correction",
        Tally(None, 5),
        100,
        40,
        "init",
        KEY_SIGN,
        (100, 0),
    ),
]


@pytest.mark.parametrize(("what", "state", "db", "c0", "mode", "sign", "after"), SEED_CASES)
def test_seed_table(
    what: str,
    state: Tally,
    db: int,
    c0: int,
    mode: str,
    sign: int,
    after: tuple[int, int] | None,
) -> None:
    expected = None if after is None else Tally(*after)
    assert seed(state, db, c0, mode, sign) == expected, what  # type: ignore[arg-type]


# --- admission's money check: a table ---------------------------------------------------------
REFUSAL_CASES = [
    # (base, held, spent, key_held, hold, cap, refusal)
    (1_000, 0, None, 0, 1_000, None, None),
    (1_000, 1, None, 0, 1_000, None, "org_balance"),
    (1_000, 0, 0, 0, 10, 10, None),  # exactly the cap
    (1_000, 0, 5, 0, 6, 10, "key_cap"),
    (1_000, 0, 0, 5, 6, 10, "key_cap"),  # the key's own live holds count
    (0, 0, 0, 0, 1, 0, "key_cap"),  # the key's cap is reported before the org's balance
    (-5, 0, None, 0, 1, None, "org_balance"),  # overspent by a late settle
]


@pytest.mark.parametrize(("base", "held", "spent", "key_held", "hold", "cap", "why"), REFUSAL_CASES)
def test_money_refusal_table(
    base: int, held: int, spent: int | None, key_held: int, hold: int, cap: int | None, why: str
) -> None:
    assert money_refusal(base, held, spent, key_held, hold, cap) == why


# --- properties -------------------------------------------------------------------------------
money = st.integers(min_value=0, max_value=10**15)
costs = st.integers(min_value=-(10**6), max_value=10**15)
tallies = st.builds(Tally, st.one_of(st.none(), money), money)
entries = st.one_of(
    st.none(),
    st.builds(Hold, money, st.integers(1, 3), st.floats(0, 2e9)),
    st.builds(Hold, st.just(0), st.just(0), st.floats(0, 2e9), st.just(True)),
)
books = st.builds(
    Book,
    entries,
    tallies,
    money,
    money,
    tallies,
    st.one_of(st.none(), tallies),
    st.one_of(st.none(), tallies),
)


@given(books, costs, costs, st.floats(0, 1e9))
@settings(max_examples=300, deadline=None)
def test_settling_twice_is_settling_once(
    before: Book, first: int, second: int, later: float
) -> None:
    once = settle(before, first, NOW)
    if once is None:  # it was settled before this test: it stays as it was
        assert before.entry is not None and before.entry.settled
        return
    assert settle(once, second, NOW + later) is None


@given(books, costs)
@settings(max_examples=300, deadline=None)
def test_a_settle_moves_every_state_by_the_cost(before: Book, cost: int) -> None:
    after = settle(before, cost, NOW)
    if after is None:
        return
    charged = max(0, cost)
    assert after.org.charged - before.org.charged == charged
    assert after.month.charged - before.month.charged == charged
    if before.org.value is not None:
        assert before.org.value - after.org.value == charged  # type: ignore[operator]
    for was, now in ((before.month, after.month), (before.day, after.day)):
        if was is not None and was.value is not None:
            assert now is not None and now.value == was.value + charged  # spend never falls
    released = before.entry.amount if before.entry is not None else 0
    assert before.held - after.held == released == before.key_held - after.key_held
    assert (before.day is None) == (after.day is None)  # a settle never creates a day's state
    assert (before.total is None) == (after.total is None)


ops = st.lists(
    st.tuples(st.sampled_from(["admit", "settle"]), st.integers(0, 5), money, costs),
    max_size=40,
)


@given(ops, money)
@settings(max_examples=300, deadline=None)
def test_over_many_requests_charged_is_the_sum_of_first_settles(
    sequence: list[tuple[str, int, int, int]], start: int
) -> None:
    """Requests admitted and settled in any order, settles repeated: each request is charged
    once, holds never go negative, and the spend only grows."""
    entries: dict[int, Hold] = {}
    state = book(entry=None, org=Tally(start, 0), held=0, key_held=0, month=Tally(0, 0))
    charged_once: dict[int, int] = {}
    for op, rid, amount, cost in sequence:
        if op == "admit":
            if rid in entries:
                continue  # a request id is admitted once
            entries[rid] = Hold(amount, 1, NOW + 900)
            state = state._replace(held=state.held + amount, key_held=state.key_held + amount)
            continue
        after = settle(state._replace(entry=entries.get(rid)), cost, NOW)
        if after is None:
            continue
        assert rid not in charged_once
        charged_once[rid] = max(0, cost)
        assert after.entry is not None
        entries[rid] = after.entry
        assert after.month.value is not None and state.month.value is not None
        assert after.month.value >= state.month.value
        state = after
        live = sum(h.amount for h in entries.values() if not h.settled)
        assert state.held == live == state.key_held >= 0
    total = sum(charged_once.values())
    assert state.org == Tally(start - total, total)
    assert state.month == Tally(total, total)


@given(
    st.integers(0, 10**12),
    st.lists(st.integers(0, 10**9), max_size=8),
    st.data(),
)
@settings(max_examples=300, deadline=None)
def test_a_seed_is_never_optimistic(truth: int, later: list[int], data: st.DataObject) -> None:
    """An org's truth is `truth` at the ticket; costs settle after it, each written to the DB
    before it settles. Whichever of them the DB read saw, the seeded base is never above what
    is really left, and is exact when the read saw none of them."""
    seen = data.draw(st.lists(st.booleans(), min_size=len(later), max_size=len(later)))
    in_db = sum(c for c, was_seen in zip(later, seen, strict=True) if was_seen)
    db = truth - in_db
    state = Tally(None, 0)
    ticket = state.charged
    for cost in later:
        state = charge(state, cost, ORG_SIGN)
    after = seed(state, db, ticket, "init", ORG_SIGN)
    assert after is not None and after.value is not None
    really_left = truth - sum(later)
    assert after.value <= really_left
    if not any(seen):
        assert after.value == really_left
    # spend is the mirror image: never below what was really spent
    spent = seed(state, in_db, ticket, "init", KEY_SIGN)
    assert spent is not None and spent.value is not None and spent.value >= sum(later)
