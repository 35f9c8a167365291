"""Issue 19 on the dashboard: money that reads right, durations, relative times, key creation
that a reload cannot repeat, members removed only after a confirmation, the API docs in the nav.
"""

from __future__ import annotations

import re
from datetime import timedelta

from django.urls import reverse
from django.utils import timezone

from accounts.models import ApiKey, Membership
from billing.reconcile import reconcile_all
from tests.dashboard.conftest import World, make_usage

USD = 1_000_000_000


def _html(response) -> str:  # type: ignore[no-untyped-def]
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def _testid(html: str, name: str) -> str:
    match = re.search(rf'data-testid="{name}">([^<]+)<', html)
    assert match, f"no {name} on the page"
    return match.group(1)


# --- Available balance --------------------------------------------------------------------------


def test_overview_shows_available_balance_beside_the_ledger(world: World) -> None:
    """Acme: $50 credit and two unreconciled $0.006 records (fixture). Available subtracts the
    usage the ledger has not caught up with; reconciling moves it from one column to the other."""
    client = world.client(world.a.owner)
    html = _html(client.get(reverse("dashboard:home")))
    assert _testid(html, "balance") == "$50.00"  # the ledger
    assert _testid(html, "available-balance") == "$49.99"  # 50 − 0.012, half up to cents
    assert "$0.01200 not yet reconciled" in html  # under $1: 4 significant digits

    reconcile_all()
    html = _html(client.get(reverse("dashboard:home")))
    assert _testid(html, "balance") == "$49.99"
    assert _testid(html, "available-balance") == "$49.99"
    assert "not yet reconciled" not in html

    # New usage: the ledger does not move, the available balance does at once.
    make_usage(world.a.org, world.a.key, "req_acme_big", cost_nano=2 * USD + 500_000_000)
    html = _html(client.get(reverse("dashboard:home")))
    assert _testid(html, "balance") == "$49.99"
    assert _testid(html, "available-balance") == "$47.49"  # 49.988 − 2.5 = 47.488
    # Another org's usage never counts against this one.
    make_usage(world.b.org, world.b.key, "req_globex_big", cost_nano=30 * USD)
    html = _html(client.get(reverse("dashboard:home")))
    assert _testid(html, "available-balance") == "$47.49"
    # The balance page shows both too.
    html = _html(client.get(reverse("dashboard:balance")))
    assert _testid(html, "available-balance") == "$47.49"
    assert _testid(html, "balance") == "$49.99"


# --- Formats on the pages -----------------------------------------------------------------------


def test_request_rows_use_one_cost_precision_and_seconds(world: World) -> None:
    org, key = world.a.org, world.a.key
    make_usage(org, key, "req_acme_slow", cost_nano=26_100_000, latency_ms=11_509)
    make_usage(org, key, "req_acme_free", cost_nano=0, latency_ms=850)
    make_usage(org, key, "req_acme_odd", cost_nano=23_369_000, latency_ms=999)
    html = _html(world.client(world.a.owner).get(reverse("dashboard:requests")))
    costs = re.findall(r'<td class="num mono col-cost">(\$[0-9.,]+)</td>', html)
    assert {"$0.026100", "$0.000000", "$0.023369", "$0.006000"} <= set(costs)
    assert {len(c.partition(".")[2]) for c in costs} == {6}  # one precision in the column
    assert ">11.5 s<" in html and ">11509 ms<" not in html  # the exact ms stay in the tooltip
    assert "850 ms" in html and "999 ms" in html
    assert "e-" not in "".join(costs).lower()


def test_usage_totals_read_like_every_other_total(world: World) -> None:
    org, key = world.a.org, world.a.key
    make_usage(org, key, "req_acme_opus", model_id="anthropic/claude-opus-5-5",
               model_name="opus", cost_nano=12 * USD)  # fmt: skip
    html = _html(world.client(world.a.owner).get(reverse("dashboard:usage")))
    table = html[html.index('id="usage-breakdown"') :]
    table = table[: table.index("</table>")]
    cells = re.findall(r'<t[dh] class="num">(\$[0-9.,]+)</t[dh]>', table)
    # Issue 34: an amount reads by its own rule, not its neighbours' ($12 beside $0.012 once
    # read "$12.00000"): the same $12.01 as the total on the card above the table.
    assert {"$12.00", "$0.01200", "$12.01"} <= set(cells), cells
    assert "$12.00000" not in cells
    assert _testid(html, "usage-cost") == "$12.01"
    # The chart's tooltips are totals too (a day of sonnet: $0.006, 4 significant digits).
    tooltips = re.findall(r": (\$[0-9.,]+)</title>", html)
    assert "$0.006000" in tooltips and "$12.00" in tooltips, tooltips


def test_last_used_reads_just_now(world: World) -> None:
    key = world.a.key
    ApiKey.objects.filter(pk=key.pk).update(last_used_at=timezone.now())
    html = _html(world.client(world.a.owner).get(reverse("dashboard:keys")))
    assert "just now" in html and "0 minutes ago" not in html
    ApiKey.objects.filter(pk=key.pk).update(last_used_at=timezone.now() - timedelta(hours=3))
    html = _html(world.client(world.a.owner).get(reverse("dashboard:keys")))
    assert "3 hours ago" in html


def test_live_row_carries_the_same_display_text() -> None:
    import inspect

    from billing import live

    params = inspect.signature(live.build_row).parameters
    args = {
        name: (0 if p.annotation in ("int", "int | None") else "")
        for name, p in params.items()
        if p.default is inspect.Parameter.empty
    }
    args.update(created_at=timezone.now(), cost_nano=7_380_000, latency_ms=11_509,
                output_exact=True)  # fmt: skip
    row = live.build_row(**args)
    assert row["cost"] == "$0.007380" and row["latency"] == "11.5 s"
    assert row["cost_usd"] == "0.007380"  # the plain number stays for scripts


# --- Keys: Post/Redirect/Get ----------------------------------------------------------------------


def test_key_creation_redirects_and_a_reload_mints_nothing(world: World) -> None:
    client = world.client(world.a.owner)
    before = ApiKey.objects.filter(org=world.a.org).count()
    response = client.post(reverse("dashboard:key-create"), {"name": "prg-key"})
    assert response.status_code == 302
    key = ApiKey.objects.get(org=world.a.org, name="prg-key")
    assert response["Location"] == reverse("dashboard:key-created", args=[key.pk])
    shown = client.get(response["Location"])
    html = _html(shown)
    assert "no-store" in shown["Cache-Control"]
    assert re.search(r'id="new-key-secret" value="ezat_sk_', html)
    # Reload: no secret, no new key, a clear message on the keys page.
    again = client.get(response["Location"])
    assert again.status_code == 302 and again["Location"] == reverse("dashboard:keys")
    assert ApiKey.objects.filter(org=world.a.org).count() == before + 1
    keys_html = _html(client.get(again["Location"]))
    assert "shown once and cannot be shown again" in keys_html
    assert 'id="new-key-secret"' not in keys_html


def test_key_created_page_is_owner_only_and_per_org(world: World) -> None:
    client = world.client(world.a.owner)
    response = client.post(reverse("dashboard:key-create"), {"name": "prg-key-2"})
    url = response["Location"]
    assert world.client(world.member_a).get(url).status_code == 403
    assert world.client(world.b.owner).get(url).status_code == 404
    assert "ezat_sk_" in _html(client.get(url))  # the others did not consume it


# --- Members: Remove asks first ---------------------------------------------------------------


def test_remove_member_needs_a_confirmation(world: World) -> None:
    client = world.client(world.a.owner)
    bob = Membership.objects.get(org=world.a.org, user=world.member_a)
    url = reverse("dashboard:member-remove", args=[bob.pk])
    members_html = _html(client.get(reverse("dashboard:members")))
    assert f'href="{url}"' in members_html  # the button leads to the confirmation page
    page = _html(client.get(url))
    assert "Remove bob?" in page and 'name="confirm" value="yes"' in page
    assert Membership.objects.filter(pk=bob.pk).exists()
    # A POST without the confirmation field asks again and removes nothing.
    assert "Remove bob?" in _html(client.post(url))
    assert Membership.objects.filter(pk=bob.pk).exists()
    assert client.post(url, {"confirm": "yes"}).status_code == 302
    assert not Membership.objects.filter(pk=bob.pk).exists()


def test_remove_confirmation_is_owner_only(world: World) -> None:
    alice = Membership.objects.get(org=world.a.org, user=world.a.owner)
    url = reverse("dashboard:member-remove", args=[alice.pk])
    assert world.client(world.member_a).get(url).status_code == 403
    assert world.client(world.b.owner).get(url).status_code == 404


# --- Nav ------------------------------------------------------------------------------------------


def test_api_docs_are_linked_from_the_nav(world: World) -> None:
    client = world.client(world.member_a)
    html = _html(client.get(reverse("dashboard:home")))
    match = re.search(r'<a href="([^"]+)" data-testid="api-docs-nav">API docs</a>', html)
    assert match and match.group(1) == reverse("api-docs")
    assert client.get(match.group(1)).status_code == 200
