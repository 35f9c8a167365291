"""Read helpers: usage totals per org and window, month-to-date spend, balances, formatting."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from accounts.services import create_api_key
from billing.reconcile import reconcile_all
from billing.selectors import (
    month_start,
    month_to_date_spend,
    org_balance_nano,
    unreconciled_cost_nano,
    usage_summary,
    usd_string,
)
from tests.billing.factories import make_org, make_usage, set_created_at

pytestmark = pytest.mark.django_db

NOV_30 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def test_usage_summary_sums_every_field_for_one_org_only() -> None:
    org = make_org()
    other = make_org()
    make_usage(
        org,
        cost_nano=100,
        input_tokens=10,
        output_tokens=20,
        cache_read_tokens=30,
        cache_write_5m_tokens=40,
        cache_write_1h_tokens=50,
        reasoning_tokens=6,
    )
    make_usage(org, cost_nano=1, input_tokens=1, output_tokens=2, cache_write_1h_tokens=3)
    make_usage(other, cost_nano=999_999, input_tokens=10**6)

    assert usage_summary(org) == {
        "requests": 2,
        "input_tokens": 11,
        "output_tokens": 22,
        "cache_read_tokens": 30,
        "cache_write_tokens": 93,
        "reasoning_tokens": 6,
        "cost_nano": 101,
    }


def test_usage_summary_of_an_org_without_usage_is_zeros() -> None:
    summary = usage_summary(make_org())
    assert summary["requests"] == 0
    assert set(summary.values()) == {0}


def test_usage_summary_window_is_since_inclusive_until_exclusive() -> None:
    org = make_org()
    for day, cost in ((1, 1), (2, 10), (3, 100)):
        set_created_at(make_usage(org, cost_nano=cost), datetime(2026, 11, day, tzinfo=UTC))

    def cost(since: datetime | None, until: datetime | None) -> int:
        return usage_summary(org, since=since, until=until)["cost_nano"]

    nov = lambda day: datetime(2026, 11, day, tzinfo=UTC)  # noqa: E731
    assert cost(nov(2), None) == 110
    assert cost(None, nov(2)) == 1
    assert cost(nov(2), nov(3)) == 10
    assert cost(nov(1), nov(4)) == 111


def test_usage_counts_unreconciled_and_reconciled_records_alike() -> None:
    org = make_org()
    make_usage(org, cost_nano=5)
    reconcile_all()
    make_usage(org, cost_nano=7)
    assert usage_summary(org)["cost_nano"] == 12
    assert unreconciled_cost_nano(org) == 7


def test_month_to_date_spend_per_org_and_per_key() -> None:
    org = make_org()
    key_a = create_api_key(org=org, name="a").key
    key_b = create_api_key(org=org, name="b").key
    last_month = make_usage(org, cost_nano=1_000, api_key=key_a)
    set_created_at(last_month, datetime(2026, 10, 31, 23, 59, 59, tzinfo=UTC))
    first_second = make_usage(org, cost_nano=20, api_key=key_a)
    set_created_at(first_second, datetime(2026, 11, 1, tzinfo=UTC))
    set_created_at(make_usage(org, cost_nano=300, api_key=key_b), NOV_30)
    set_created_at(make_usage(org, cost_nano=4_000), NOV_30)  # a key since deleted

    assert month_to_date_spend(org, now=NOV_30) == 4_320
    assert month_to_date_spend(key_a, now=NOV_30) == 20
    assert month_to_date_spend(key_b, now=NOV_30) == 300
    with pytest.raises(TypeError):
        month_to_date_spend("org", now=NOV_30)  # type: ignore[arg-type]


def test_month_start_is_utc() -> None:
    from zoneinfo import ZoneInfo

    # 00:30 on Dec 1 in Berlin is still November in UTC.
    berlin = datetime(2026, 12, 1, 0, 30, tzinfo=ZoneInfo("Europe/Berlin"))
    assert month_start(berlin) == datetime(2026, 11, 1, tzinfo=UTC)


def test_org_balance_reads_the_committed_value_not_the_instance() -> None:
    org = make_org(credit_nano=2_000)
    make_usage(org, cost_nano=500)
    reconcile_all()
    assert org.balance_nano == 2_000  # stale instance
    assert org_balance_nano(org) == 1_500


@pytest.mark.parametrize(
    ("nano", "text"),
    [
        (15_500_000_000, "15.5"),
        (0, "0"),
        (1, "0.000000001"),
        (-500_000_000, "-0.5"),
        (10_000_000_000, "10"),
        (123_456_789_012_345_678, "123456789.012345678"),
    ],
)
def test_usd_string_is_the_shortest_exact_plain_decimal(nano: int, text: str) -> None:
    assert usd_string(nano) == text
