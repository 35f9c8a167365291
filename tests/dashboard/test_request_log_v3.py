"""Issue 34 items 1 and 4 on the server side: the request log leads with what a customer reads
(time, model, status, tokens, cost) on the log and the overview alike, and both pages carry
what the live feed needs (the websocket path, the counts it keeps up to date)."""

from __future__ import annotations

import re

from django.urls import reverse

from tests.dashboard.conftest import World

FIRST = ["col-time", "col-model", "col-status", "col-tokens", "col-cost"]


def _html(response) -> str:  # type: ignore[no-untyped-def]
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def _columns(html: str, tag: str) -> list[str]:
    return re.findall(rf'<{tag} class="(?:num )?(?:mono )?(?:nowrap )?(col-[a-z]+)', html)


def test_columns_lead_with_what_customers_read(world: World) -> None:
    client = world.client(world.a.owner)
    for url in (reverse("dashboard:requests"), reverse("dashboard:home")):
        html = _html(client.get(url))
        table = html[html.index('id="request-log"') :]
        head = table[: table.index("</thead>")]
        assert _columns(head, "th")[:5] == FIRST, url
        row = table[table.index("<tbody>") : table.index("</tr>", table.index("<tbody>"))]
        assert _columns(row, "td")[:5] == FIRST, url
        # The time links to the request's page; the id is beside it, not a column of its own.
        assert f'href="/dashboard/requests/{world.a.request_id}"' in row


def test_overview_and_log_are_live_with_counts(world: World) -> None:
    client = world.client(world.a.owner)
    home = _html(client.get(reverse("dashboard:home")))
    assert f'data-ws-path="/ws/requests/?org={world.a.org.pk}"' in home
    assert 'data-max-rows="10"' in home and "ezat/live.js" in home
    assert re.search(r'data-testid="requests-24h" data-live-count="\d+"', home)
    log = _html(client.get(reverse("dashboard:requests")))
    assert 'data-live-count="2" data-unit="request">2 requests</span>' in log


def _ids(html: str) -> list[str]:
    return re.findall(r'<tr data-request-id="([^"]+)"', html)


def test_date_range_sorting_and_filters_stay_in_the_url(world: World) -> None:
    """Item 8: a date range, sorting by time, cost and latency, filters by key, model and
    status; all in the URL (the sort links and pages keep the other filters)."""
    from datetime import timedelta

    from django.utils import timezone

    from tests.dashboard.conftest import make_usage

    org, key = world.a.org, world.a.key
    now = timezone.now()
    make_usage(org, key, "req_acme_cheap_slow", cost_nano=1_000, latency_ms=9_000)
    make_usage(org, key, "req_acme_dear_fast", cost_nano=90_000_000, latency_ms=50)
    make_usage(org, key, "req_acme_old", created_at=now - timedelta(days=10))
    client = world.client(world.a.owner)
    url = reverse("dashboard:requests")
    by_cost = _ids(_html(client.get(url, {"sort": "-cost", "key": key.pk, "status": "ok"})))
    assert by_cost[0] == "req_acme_dear_fast" and by_cost[-1] == "req_acme_cheap_slow", by_cost
    by_latency = _ids(_html(client.get(url, {"sort": "-latency"})))
    assert by_latency[0] == "req_acme_cheap_slow" and by_latency[-1] == "req_acme_dear_fast"
    oldest = _ids(_html(client.get(url, {"sort": "time"})))
    assert oldest[0] == "req_acme_old"
    # The range: UTC days, both ends included.
    day = (now - timedelta(days=10)).date()
    ranged = _html(client.get(url, {"since": day.isoformat(), "until": day.isoformat()}))
    assert _ids(ranged) == ["req_acme_old"]
    assert f"since={day.isoformat()}&amp;until={day.isoformat()}" in ranged  # the CSV link too
    recent = _ids(_html(client.get(url, {"since": (now - timedelta(days=1)).date().isoformat()})))
    assert "req_acme_old" not in recent and "req_acme_dear_fast" in recent
    # Sort links keep the filters and flip the sorted column; aria-sort says which it is.
    html = _html(client.get(url, {"sort": "-cost", "status": "ok"}))
    th = re.search(r'<th class="num col-cost" aria-sort="descending"><a href="\?([^"]+)"', html)
    assert th is not None and set(th.group(1).split("&amp;")) == {"status=ok", "sort=cost"}
    assert 'id="live-status"' not in html  # sorted by cost: live rows would land anywhere
    bad = _html(client.get(url, {"since": "2026-02-02", "until": "2026-02-01"}))
    assert "The end date is before the start date." in bad
