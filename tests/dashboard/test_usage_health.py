"""Issue 16 item 7: the usage page's last 24 h by the hour, spend today, error rate and TTFT
p50/p95 per model and per key, and its key × model filter. Selectors on real rows of the test
database (PostgreSQL in production shape), percentiles checked exactly on a known dataset."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.db import connection
from django.urls import reverse
from django.utils import timezone

from accounts import services
from accounts.models import ApiKey, Organization
from billing import dashboard_selectors as sel
from billing import usage_health_selectors as health
from billing.models import RequestLog
from tests.dashboard.conftest import World, make_usage

X = "anthropic/claude-sonnet-5-5"
Y = "anthropic/claude-haiku-5"
_ids = iter(range(1_000_000))


def log_row(
    org: Organization,
    key: ApiKey | None,
    *,
    model_id: str = X,
    status: str = "ok",
    http_status: int = 200,
    ttft_ms: int | None = None,
    count: int = 1,
    created_at: Any = None,
) -> RequestLog:
    now = created_at or timezone.now()
    return RequestLog.objects.create(
        request_id=f"req_health_{next(_ids)}",
        org=org,
        api_key=key,
        api="messages",
        model_name=model_id or "nope",
        model_id=model_id,
        requested_model=model_id,
        status=status,
        http_status=http_status,
        error_type="" if status != "error" else "rate_limit_error",
        error_message="" if status != "error" else "too many",
        ttft_ms=ttft_ms,
        latency_ms=(ttft_ms or 0) + 5,
        count=count,
        started_at=now,
        created_at=now,
    )


def known_dataset(world: World) -> tuple[Organization, ApiKey, ApiKey]:
    """A fresh org: model X on key 1 with TTFTs 100..2000 ms (20 answers), 3 refusals and a
    burst of 6 collapsed into one row; model Y on key 2 with TTFTs 50, 70, 90 and a client that
    disconnected after its first token at 300 ms; 5 refusals of an unknown model on key 1; one
    row of X older than 30 days, and org B's rows, which count for nothing here."""
    org = services.create_org(name="Health Co")
    one = services.create_api_key(org=org, name="health-one", rpm_limit=60).key
    two = services.create_api_key(org=org, name="health-two", rpm_limit=60).key
    for ttft in range(100, 2001, 100):
        log_row(org, one, ttft_ms=ttft)
    for _ in range(3):
        log_row(org, one, status="error", http_status=429)
    log_row(org, one, status="error", http_status=429, count=6)
    for ttft in (50, 70, 90):
        log_row(org, two, model_id=Y, ttft_ms=ttft)
    log_row(org, two, model_id=Y, status="client_disconnected", http_status=499, ttft_ms=300)
    log_row(org, one, model_id="", status="error", http_status=404, count=5)
    log_row(org, one, ttft_ms=1, created_at=timezone.now() - timedelta(days=40))
    log_row(world.b.org, world.b.key, ttft_ms=5)
    return org, one, two


def _table(rows: list[health.Health]) -> dict[str, tuple[int, int, int | None, int | None]]:
    return {h.label: (h.requests, h.errors, h.ttft_p50_ms, h.ttft_p95_ms) for h in rows}


def test_error_rate_and_ttft_percentiles_per_model_and_key_are_exact(world: World) -> None:
    org, _, _ = known_dataset(world)
    period = sel.Period.last_days(30)
    by_model = health.health(org, period, "model")
    # nearest rank: p50 of 20 values is the 10th (1000), p95 the 19th (1900); of 50, 70, 90,
    # 300: the 2nd (70) and the 4th (300). Errors count collapsed rows by their count.
    assert _table(by_model) == {
        X: (20 + 3 + 6, 3 + 6, 1000, 1900),
        health.NO_MODEL: (5, 5, None, None),
        Y: (4, 0, 70, 300),
    }
    assert [h.label for h in by_model] == [X, health.NO_MODEL, Y]  # most requests first
    x = by_model[0]
    assert x.error_rate == Decimal(9) / Decimal(29)
    assert by_model[2].error_rate == 0
    by_key = health.health(org, period, "key")
    labels = sel.key_labels(org)
    one, two = (ApiKey.objects.get(org=org, name=n) for n in ("health-one", "health-two"))
    assert _table(by_key) == {
        labels[one.pk]: (29 + 5, 14, 1000, 1900),
        labels[two.pk]: (4, 0, 70, 300),
    }


def test_percentiles_in_python_match_postgresql(world: World) -> None:
    """The embedded default (SQLite) ranks in Python: the same numbers as percentile_disc."""
    org, _, _ = known_dataset(world)
    period = sel.Period.last_days(30)
    rows = health._rows(org, period, sel.NO_FILTERS).values("model_id")
    in_python = health._percentiles_in_python(rows, "model_id")
    assert in_python == {X: (1000, 1900), Y: (70, 300)}
    if connection.vendor == "postgresql":
        on_db = {h.label: (h.ttft_p50_ms, h.ttft_p95_ms) for h in health.health(org, period)}
        assert {k: on_db[k] for k in in_python} == in_python
    assert health.nearest_rank([], Decimal("0.5")) is None
    assert health.nearest_rank([7], Decimal("0.95")) == 7
    assert health.nearest_rank([1, 2], Decimal("0.5")) == 1  # not interpolated


def test_key_by_model_filter(world: World) -> None:
    org, one, two = known_dataset(world)
    period = sel.Period.last_days(30)
    only = sel.UsageFilters(key_id=one.pk, model=X)
    assert _table(health.health(org, period, "model", only)) == {X: (29, 9, 1000, 1900)}
    assert _table(health.health(org, period, "model", sel.UsageFilters(key_id=two.pk))) == {
        Y: (4, 0, 70, 300)
    }
    assert health.health(org, period, "model", sel.UsageFilters(key_id=two.pk, model=X)) == []
    # the usage report and the cache table take the same filter
    make_usage(org, one, "req_health_usage_x")
    make_usage(org, two, "req_health_usage_y", model_id=Y)
    report = sel.usage_report(org, period, "model", sel.UsageFilters(key_id=two.pk))
    assert [s.label for s in report.series] == [Y] and report.total_requests == 1
    rates = sel.cache_hit_rates(org, period, sel.UsageFilters(model=X))
    assert [r.model_id for r in rates] == [X]


def test_model_filter_takes_an_alias(world: World) -> None:
    """The filter names a model as people do ("Sonnet", an alias): it matches the canonical id."""
    from catalog.models import ModelAlias
    from catalog.services import load_catalog

    load_catalog()
    alias = ModelAlias.objects.filter(model_id=X).values_list("alias", flat=True).first()
    assert alias is not None and alias != X
    org, one, _ = known_dataset(world)
    by_alias = sel.UsageFilters.of(one.pk, f" {alias.upper()} ")
    assert by_alias == sel.UsageFilters(key_id=one.pk, model=X)
    period = sel.Period.last_days(30)
    assert _table(health.health(org, period, "model", by_alias)) == {X: (29, 9, 1000, 1900)}


def test_last_24_hours_by_the_hour(world: World) -> None:
    org, key = world.a.org, world.a.key
    now = timezone.now()
    make_usage(org, key, "req_acme_3h", created_at=now - timedelta(hours=3), cost_nano=111)
    make_usage(org, key, "req_acme_30h", created_at=now - timedelta(hours=30), cost_nano=222)
    period = sel.Period.last_hours(24, now)
    assert period.hourly and len(period.buckets) == 24
    assert period.end - period.start == timedelta(hours=24)
    assert period.start <= now - timedelta(hours=23) and now < period.end
    report = sel.usage_report(org, period, "model")
    (series,) = report.series
    # the fixture's record of now is in the last bucket, the one of 3 h ago 3 buckets before
    assert series.cost[23] == 6_000_000 and series.cost[20] == 111
    assert sum(series.cost) == 6_000_000 + 111  # 30 h ago and 2 days ago: outside
    assert report.total_requests == 2


def test_spend_today(world: World) -> None:
    org, key = world.a.org, world.a.key
    start = sel.today_start()
    make_usage(org, key, "req_acme_yesterday", created_at=start - timedelta(seconds=1))
    make_usage(org, key, "req_acme_today", created_at=start + timedelta(seconds=1), cost_nano=7)
    spent = sel.spend_since(org, start)
    # today: the fixture's record of now (6,000,000) and the one just after midnight
    assert spent == 6_000_000 + 7
    assert sel.spend_since(world.b.org, start) == 6_000_000  # org B's own record only


def test_usage_page_renders_hours_spend_today_and_health(world: World) -> None:
    org, one, _ = known_dataset(world)
    services.add_member(org=org, user=world.a.owner, role="owner")
    client = world.client(world.a.owner)
    url = reverse("dashboard:usage")
    response = client.get(url + f"?org={org.pk}&hours=24&split=model&key={one.pk}&model={X}")
    assert response.status_code == 200
    html = response.content.decode()
    assert "Cost per hour" in html and "by the hour" in html
    assert re.search(r'data-testid="spend-today">\$0\.00<', html)
    at = html.index('id="health-by-model"')
    table = html[at : html.index("</table>", at)]
    assert X in table and Y not in table  # key × model filter
    assert "31.0 %" in table  # 9 of 29
    assert "1,000 ms" in table and "1,900 ms" in table
    assert 'id="health-by-key"' in html and "health-one" in html
    # the period links keep the filter
    assert f"key={one.pk}" in html and "days=7" in html
    # a foreign key id is a form error, never another org's data or a 500
    foreign = client.get(url + f"?key={world.b.key.pk}")
    assert foreign.status_code == 200 and world.b.key.prefix not in foreign.content.decode()
