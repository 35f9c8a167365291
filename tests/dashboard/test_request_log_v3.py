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
