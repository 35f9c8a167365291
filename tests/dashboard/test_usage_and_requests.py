"""Usage report numbers, the SVG chart, the request log's filters and pagination, balance."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

from django.urls import reverse
from django.utils import timezone

from billing import dashboard_selectors as sel
from core.templatetags.dashboard import format_usd
from tests.dashboard.conftest import World, make_usage


def _html(response) -> str:  # type: ignore[no-untyped-def]
    return response.content.decode()


def test_cache_savings_use_the_prices_kept_on_each_record(world: World) -> None:
    org, key = world.a.org, world.a.key
    # A record billed under old prices: input 5, cache read 0.5 → saves 4.5 USD per M tokens.
    make_usage(
        org,
        key,
        "req_acme_oldprice",
        cache_read_tokens=2_000_000,
        prices={
            "input": "5",
            "output": "25",
            "cacheRead": "0.5",
            "cacheWrite5m": "6.25",
            "cacheWrite1h": "10",
        },
    )
    report = sel.usage_report(org, sel.Period.last_days(30), "model")
    # Fixture: 1M cached tokens at (3 − 0.3) = 2.7 USD; here 2M × 4.5 = 9 USD.
    assert report.cache_savings_nano == 2_700_000_000 + 9_000_000_000
    assert report.cache_read_tokens == 3_000_000
    assert report.total_requests == 3
    assert report.total_cost == 3 * 6_000_000


def test_usage_report_days_and_splits(world: World) -> None:
    org, key = world.a.org, world.a.key
    make_usage(org, None, "req_acme_deleted_key", model_id="anthropic/claude-opus-5-5")
    make_usage(
        org, key, "req_acme_old", created_at=timezone.now() - timedelta(days=40), cost_nano=1
    )
    period = sel.Period.last_days(7)
    by_model = sel.usage_report(org, period, "model")
    assert len(by_model.days) == 7
    labels = {s.label for s in by_model.series}
    assert labels == {"anthropic/claude-sonnet-5-5", "anthropic/claude-opus-5-5"}
    sonnet = next(s for s in by_model.series if s.label.endswith("sonnet-5-5"))
    assert sonnet.cost[-1] == 6_000_000 and sonnet.cost[-3] == 6_000_000  # today, 2 days ago
    assert sonnet.tokens[-1] == 1200
    by_key = sel.usage_report(org, period, "key")
    assert {s.label for s in by_key.series} == {
        f"acme-prod-key ({key.prefix}…)",
        "(deleted key)",
    }
    # The 40-day-old record is outside 7 days but inside 90.
    assert sel.usage_report(org, sel.Period.last_days(90)).total_requests == 4


def test_usage_page_renders_chart_and_savings(world: World) -> None:
    client = world.client(world.member_a)
    html = _html(client.get(reverse("dashboard:usage") + "?days=7&split=key"))
    # Cost and tokens, each drawn wide and narrow (issue 34).
    assert html.count("<svg") == 4 and "<rect" in html
    assert "acme-prod-key" in html
    assert format_usd(2_700_000_000) in html  # $2.70 saved by caching
    custom = client.get(reverse("dashboard:usage") + "?start=2020-01-01&end=2020-01-10")
    assert "No usage in this period" in _html(custom)
    bad = client.get(reverse("dashboard:usage") + "?start=2020-02-01&end=2020-01-01")
    assert bad.status_code == 200 and "end date is before" in _html(bad)


def test_many_series_fold_into_other(world: World) -> None:
    for i in range(10):
        make_usage(world.a.org, None, f"req_acme_m{i}", model_id=f"vendor/model-{i}", cost_nano=i)
    report = sel.usage_report(world.a.org, sel.Period.last_days(7))
    assert len(report.series) == sel.MAX_SERIES + 1
    assert report.series[-1].label == sel.OTHER
    assert report.total_requests == 12


def test_request_log_exact_id_search_and_filters(world: World) -> None:
    org, key = world.a.org, world.a.key
    make_usage(org, key, "req_acme_disconnected", status="client_disconnected", output_exact=False)
    make_usage(org, key, "req_acme_opus", model_id="anthropic/claude-opus-5-5", model_name="opus")
    client = world.client(world.member_a)
    url = reverse("dashboard:requests")

    def ids(query: str) -> set[str]:
        html = _html(client.get(url + query))
        body = html.split('id="request-log"', 1)[1].split("</table>", 1)[0]
        return {
            r
            for r in ("req_acme_0001", "req_acme_0002", "req_acme_disconnected", "req_acme_opus")
            if f">{r}<" in body
        }

    assert ids("") == {"req_acme_0001", "req_acme_0002", "req_acme_disconnected", "req_acme_opus"}
    assert ids("?request_id=req_acme_0002") == {"req_acme_0002"}
    assert ids("?request_id=+req_acme_0002+") == {"req_acme_0002"}
    # A prefix of 8+ characters finds the requests it starts; a shorter one only a full id.
    assert ids("?request_id=req_acme_000") == {"req_acme_0001", "req_acme_0002"}
    assert ids("?request_id=req_acm") == set()
    assert ids("?status=client_disconnected") == {"req_acme_disconnected"}
    assert ids("?model=OPUS") == {"req_acme_opus"}
    assert ids("?model=anthropic/claude-opus-5-5") == {"req_acme_opus"}
    assert ids(f"?key={key.pk}&status=ok") == {"req_acme_0001", "req_acme_0002", "req_acme_opus"}
    html = _html(client.get(url + "?status=client_disconnected"))
    assert "estimated" in html


def test_request_log_paginates(world: World) -> None:
    for i in range(60):
        make_usage(world.a.org, world.a.key, f"req_acme_page_{i:03d}")
    client = world.client(world.a.owner)
    first = _html(client.get(reverse("dashboard:requests")))
    assert "Page 1 of 2" in first and "62 requests" in first
    assert "req_acme_page_059" in first and "req_acme_page_000" not in first
    second = _html(client.get(reverse("dashboard:requests") + "?page=2"))
    assert "req_acme_page_000" in second and "req_acme_page_059" not in second
    assert "data-ws-path" not in second  # live rows only on the first page


def test_balance_page_shows_ledger_and_month_spend(world: World) -> None:
    from billing.services import grant_credit

    grant_credit(org=world.a.org, amount_nano=1_500_000_000, memo="acme-top-up")
    client = world.client(world.member_a)
    html = _html(client.get(reverse("dashboard:balance")))
    assert "$51.50" in html  # 50 + 1.5
    assert "acme-top-up" in html and "acme-credit-memo" in html
    assert "+$1.50" in html
    spend = sel.month_to_date_spend_nano(world.a.org)
    assert spend in (6_000_000, 12_000_000)  # the 2-day-old record may be last month
    assert format_usd(spend) in html


def test_usd_format() -> None:
    assert format_usd(0) == "$0.00"
    assert format_usd(1_234_500_000_000) == "$1,234.50"
    assert format_usd(123_000) == "$0.0001230"  # under $1: 4 significant digits
    assert format_usd(-6_000_000) == "−$0.006000"
    assert format_usd(5_000_000_000, sign=True) == "+$5.00"
    assert format_usd(None) == "—"


def test_cache_hit_rate_per_model_is_exact_and_per_org(world: World) -> None:
    """Hit rate = cache reads ÷ (reads + 5m and 1h writes), per model, only the org's own."""
    a, b = world.a, world.b
    # Acme, sonnet: the fixture's 1,000,000 reads, plus 1,000,000 reads and 600,000 + 400,000
    # writes here: 2,000,000 ÷ 3,000,000 = 66.7 %.
    make_usage(a.org, a.key, "req_acme_c1", cache_read_tokens=1_000_000,
               cache_write_5m_tokens=600_000, cache_write_1h_tokens=400_000)  # fmt: skip
    # Acme, opus: 1 read of 8 cacheable = 12.5 %; haiku: no breakpoints at all.
    make_usage(a.org, a.key, "req_acme_c2", model_id="anthropic/claude-opus-5-5",
               cache_read_tokens=1, cache_write_5m_tokens=7)  # fmt: skip
    make_usage(a.org, a.key, "req_acme_c3", model_id="anthropic/claude-haiku-4-5")
    # Globex, opus: 3 of 4 = 75.0 % -- must not show up on Acme's page, nor Acme's on Globex's.
    make_usage(b.org, b.key, "req_globex_c1", model_id="anthropic/claude-opus-5-5",
               cache_read_tokens=3, cache_write_1h_tokens=1)  # fmt: skip
    # Outside a 7-day period: counted for 90 days only.
    make_usage(a.org, a.key, "req_acme_old_c", cache_write_5m_tokens=1_000_000,
               created_at=timezone.now() - timedelta(days=40))  # fmt: skip

    rates = sel.cache_hit_rates(a.org, sel.Period.last_days(7))
    assert [(r.model_id, r.cache_read_tokens, r.cache_write_tokens) for r in rates] == [
        ("anthropic/claude-sonnet-5-5", 2_000_000, 1_000_000),
        ("anthropic/claude-opus-5-5", 1, 7),
        ("anthropic/claude-haiku-4-5", 0, 0),
    ]
    assert [r.rate for r in rates] == [Decimal(2) / 3, Decimal("0.125"), None]
    longer = sel.cache_hit_rates(a.org, sel.Period.last_days(90))
    assert longer[0].rate == Decimal("0.5")  # 2M of 4M with the old record's writes
    globex = sel.cache_hit_rates(b.org, sel.Period.last_days(7))
    assert [(r.model_id, r.rate) for r in globex] == [
        ("anthropic/claude-sonnet-5-5", Decimal(1)),  # the fixture's reads-only record
        ("anthropic/claude-opus-5-5", Decimal("0.75")),
    ]

    acme_html = _html(world.client(a.owner).get(reverse("dashboard:usage") + "?days=7"))
    table = acme_html.split('id="cache-hit-rates"', 1)[1].split("</table>", 1)[0]
    cells = re.findall(r'data-testid="cache-hit-rate">([^<]*)<', table)
    assert cells == ["66.7 %", "12.5 %", "—"]
    assert "75.0 %" not in table
    globex_html = _html(world.client(b.owner).get(reverse("dashboard:usage") + "?days=7"))
    globex_table = globex_html.split('id="cache-hit-rates"', 1)[1].split("</table>", 1)[0]
    assert re.findall(r'data-testid="cache-hit-rate">([^<]*)<', globex_table) == [
        "100.0 %",
        "75.0 %",
    ]
    assert "66.7 %" not in globex_table and "12.5 %" not in globex_table
