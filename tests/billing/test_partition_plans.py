"""Issue 18: the dashboards' and the reconciler's queries on partitioned tables (PostgreSQL).

The queries are the selectors' own (captured while they run), explained by PostgreSQL over five
months of usage and request log for 30 orgs, old months reconciled as in production:
- the dashboards' time-windowed queries read only the partitions of their window (pruning);
- the reconciler reads every partition, but only through the partial `usage_unreconciled`
  index, which is empty on reconciled months: those return no row.
docs/scaling.md shows the same plans.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from accounts.models import Organization
from billing import dashboard_selectors as ds
from billing import partitions, reconcile
from billing.models import LedgerEntry
from billing.request_log_selectors import request_logs
from tests.billing.factories import make_org
from tests.billing.partition_helpers import LOG_COLUMNS, USAGE_COLUMNS, require_postgres

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("restore_partitions"),
]

MONTHS_BACK = 5
ORGS = 30
ROWS_PER_ORG = 400  # spread over the last five months
HOT_ROWS_PER_ORG = 1000  # this month


def _fill(orgs: list[Organization], entry: LedgerEntry) -> None:
    """Per org: a row every 9 hours over five months, and this month a row a minute (clamped
    to the month's start, so this month's partition is the biggest, as in production). Every
    record but the newest of each org is reconciled (it points at one ledger entry), as the
    reconciler keeps them in production."""
    month_start = partitions.month_floor(timezone.now())
    series = (
        ("old", "now() - g * interval '9 hours'", 1, ROWS_PER_ORG),
        ("hot", "greatest(%s, now() - g * interval '1 minute')", 0, HOT_ROWS_PER_ORG - 1),
    )
    with connection.cursor() as cursor:
        for org in orgs:
            for tag, at, first, last in series:
                at_params = [month_start] if "%s" in at else []
                cursor.execute(
                    f"INSERT INTO billing_usagerecord ({USAGE_COLUMNS}, ledger_entry_id) "
                    f"SELECT 'pl-{tag}-' || %s || '-' || g, %s, 'messages', false, 'm', 'm', "
                    f"'m', 'd', 10, 5, 0, 0, 0, 0, 7, '{{}}', true, 'ok', '[]', 1, {at}, {at}, "
                    f"CASE WHEN g > 0 THEN %s END FROM generate_series(%s, %s) g",
                    [org.pk, org.pk, *at_params, *at_params, entry.pk, first, last],
                )
                cursor.execute(
                    f"INSERT INTO billing_requestlog ({LOG_COLUMNS}) "
                    f"SELECT 'pl-{tag}-' || %s || '-' || g, %s, 'messages', false, 'm', 'm', "
                    f"'m', 'd', 'ok', 200, '', '', '', 10, 5, 0, 0, 0, 0, 7, true, 0, '[]', 1, "
                    f"1, {at}, {at} FROM generate_series(%s, %s) g",
                    [org.pk, org.pk, *at_params, *at_params, first, last],
                )
        cursor.execute("ANALYZE billing_usagerecord")
        cursor.execute("ANALYZE billing_requestlog")


@pytest.fixture
def history() -> Organization:
    require_postgres()
    now = timezone.now()
    partitions.ensure_partitions(since=now - timedelta(days=31 * MONTHS_BACK))
    orgs = [make_org() for _ in range(ORGS)]
    entry = LedgerEntry.objects.create(
        org=orgs[0], kind=LedgerEntry.Kind.USAGE, amount_nano=0, reference="plans"
    )
    _fill(orgs, entry)
    return orgs[7]


def _plans(run: Callable[[], Any], *, analyze: bool = False) -> list[dict[str, Any]]:
    """The JSON plans of every billing query `run` sends."""
    with CaptureQueriesContext(connection) as captured:
        run()
    plans = []
    options = "ANALYZE, FORMAT JSON" if analyze else "FORMAT JSON"
    for query in captured.captured_queries:
        sql = query["sql"]
        if "billing_" not in sql or sql.startswith(("SAVEPOINT", "RELEASE")):
            continue
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN ({options}) {sql}")
            raw = cursor.fetchone()[0]
        plan = raw if isinstance(raw, list) else json.loads(raw)
        plans.append(plan[0]["Plan"])
    assert plans, "the selector sent no billing query"
    return plans


def _scans(node: dict[str, Any]) -> list[dict[str, Any]]:
    found = [node] if "Relation Name" in node else []
    for child in node.get("Plans", []):
        found += _scans(child)
    return found


def _touched(plans: list[dict[str, Any]], table: str) -> set[str]:
    return {
        s["Relation Name"]
        for p in plans
        for s in _scans(p)
        if s["Relation Name"].startswith(f"{table}_")
    }


def _months_from(table: str, first: Any) -> set[str]:
    """Partitions of `table` whose month ends after `first`, and the default one."""
    return {p.name for p in partitions.partitions(table) if p.end is None or p.end > first}


def _month_to_date_dashboards_read_only_this_months_partitions(history: Organization) -> None:
    usage = partitions.USAGE_TABLE
    start = ds.month_start()
    hot = _months_from(usage, start)
    old = {p.name for p in partitions.partitions(usage)} - hot
    assert len(old) >= MONTHS_BACK  # the history is there to be skipped
    for selector in (ds.month_to_date_spend_nano, ds.key_month_spend):
        touched = _touched(_plans(lambda s=selector: s(history)), usage)
        assert touched and touched <= hot, (selector.__name__, sorted(touched & old))


def _usage_report_reads_only_the_partitions_of_its_period(history: Organization) -> None:
    usage = partitions.USAGE_TABLE
    for period in (ds.Period.last_days(7), ds.Period.last_hours(24), ds.Period.last_days(30)):
        touched = _touched(_plans(lambda p=period: ds.usage_report(history, p)), usage)
        wanted = {
            p.name
            for p in partitions.partitions(usage)
            if p.start is not None and p.start < period.end and p.end > period.start
        }
        # A closed window skips the default partition too: its range is fully covered.
        assert touched == wanted, (period, sorted(touched), sorted(wanted))


def _request_log_window_reads_only_its_partitions(history: Organization) -> None:
    log = partitions.REQUEST_LOG_TABLE
    since = timezone.now() - timedelta(days=3)
    hot = _months_from(log, since)
    touched = _touched(_plans(lambda: list(request_logs(history, since=since)[:50])), log)
    assert touched and touched <= hot, sorted(touched - hot)


def _reconciliation_reads_old_partitions_only_through_the_empty_partial_index(
    history: Organization,
) -> None:
    usage = partitions.USAGE_TABLE
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename LIKE %s "
            "AND (indexdef LIKE %s OR indexdef LIKE %s)",
            [f"{usage}_%", "%WHERE (ledger_entry_id IS NULL)", "%(ledger_entry_id)"],
        )
        # The partial `usage_unreconciled` index, or the one on ledger_entry_id (IS NULL is an
        # index condition for a btree): either way only unreconciled entries are read.
        unreconciled = {row[0] for row in cursor.fetchall()}

    def lock() -> None:
        with transaction.atomic():
            reconcile._lock_unreconciled(500)

    (plan,) = _plans(lock, analyze=True)
    scans = _scans(plan)
    month_start = partitions.month_floor(timezone.now())
    this_month = partitions.partition_name(usage, month_start)
    reconciled = {p.name for p in partitions.partitions(usage) if p.end and p.end <= month_start}
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT DISTINCT tableoid::regclass::text FROM {usage}")
        holding = {row[0] for row in cursor.fetchall()}
    assert reconciled & holding and this_month in holding  # old months and this one have rows
    assert {s["Relation Name"] for s in scans} >= holding
    for scan in scans:
        name = scan["Relation Name"]
        if name not in holding:
            continue  # an empty partition: the planner may as well read its zero pages
        assert scan["Node Type"] in ("Index Scan", "Index Only Scan"), (name, scan["Node Type"])
        assert scan["Index Name"] in unreconciled, scan
        if name in reconciled:
            assert scan["Actual Rows"] == 0, scan  # reconciled months give nothing
        else:
            assert scan["Actual Rows"] == ORGS  # this month: each org's newest record only


def test_plans_over_five_months_read_only_hot_partitions_or_empty_index_ranges(
    history: Organization,
) -> None:
    """One history (30 orgs × five months) for every check: filling it is the slow part."""
    _month_to_date_dashboards_read_only_this_months_partitions(history)
    _usage_report_reads_only_the_partitions_of_its_period(history)
    _request_log_window_reads_only_its_partitions(history)
    _reconciliation_reads_old_partitions_only_through_the_empty_partial_index(history)
