"""The Fallbacks page: owners set a model's chain (or start from the catalog's suggestion, which
is filled in, never applied unasked), members only read, and one org's chains never show on or
change through another org's pages."""

from __future__ import annotations

import pytest
from django.urls import reverse

from accounts.models import FallbackPolicy
from accounts.services import set_fallbacks
from catalog.services import load_catalog
from tests.dashboard.conftest import World

OPUS = "anthropic/claude-opus-5-5"
OPUS_5 = "anthropic/claude-opus-5"
SONNET = "anthropic/claude-sonnet-5-5"
HAIKU_45 = "anthropic/claude-haiku-4-5"


@pytest.fixture(autouse=True)
def catalog(world: World) -> None:
    load_catalog()


def edit_url(model: str) -> str:
    return reverse("dashboard:fallback-edit", args=[model])


def row(html: str, model: str) -> str:
    return html.split(f'data-model="{model}"', 1)[1].split("</tr>", 1)[0]


def test_the_page_lists_chains_and_suggestions_off_by_default(world: World) -> None:
    html = world.client(world.a.owner).get(reverse("dashboard:fallbacks")).content.decode()
    opus = row(html, OPUS)
    assert "off" in opus and f"{OPUS_5} → {SONNET}" in opus  # suggested, not applied
    assert "the catalog's" in row(html, "ezat/auto")
    assert not FallbackPolicy.objects.exists()


def test_an_owner_saves_a_chain_in_order(world: World) -> None:
    client = world.client(world.a.owner)
    response = client.post(edit_url(OPUS), {"model_1": HAIKU_45, "model_2": "", "model_3": OPUS_5})
    assert response.status_code == 302
    assert FallbackPolicy.objects.get(org=world.a.org, model_id=OPUS).fallbacks == [
        HAIKU_45,
        OPUS_5,
    ]
    html = client.get(reverse("dashboard:fallbacks")).content.decode()
    assert f"{HAIKU_45} → {OPUS_5}" in row(html, OPUS)
    client.post(edit_url(OPUS), {"off": "1"})
    assert not FallbackPolicy.objects.filter(org=world.a.org).exists()


def test_the_suggestion_fills_the_form_and_only_saving_applies_it(world: World) -> None:
    client = world.client(world.a.owner)
    form = client.get(edit_url(OPUS) + "?suggested=1").content.decode()
    assert f'<option value="{OPUS_5}" selected>' in form
    assert not FallbackPolicy.objects.exists()
    client.post(edit_url(OPUS), {"model_1": OPUS_5, "model_2": SONNET})
    assert FallbackPolicy.objects.get(org=world.a.org).fallbacks == [OPUS_5, SONNET]


def test_a_bad_chain_is_refused_naming_the_entry(world: World) -> None:
    response = world.client(world.a.owner).post(
        edit_url(OPUS), {"model_1": OPUS_5, "model_2": OPUS_5}
    )
    assert response.status_code == 200
    assert "fallbacks[1]: anthropic/claude-opus-5 is listed twice" in response.content.decode()
    assert not FallbackPolicy.objects.exists()


def test_ezat_auto_takes_the_orgs_chain(world: World) -> None:
    client = world.client(world.a.owner)
    client.post(edit_url("ezat/auto"), {"model_1": SONNET, "model_2": OPUS})
    assert FallbackPolicy.objects.get(org=world.a.org, model_id="ezat/auto").fallbacks == [
        SONNET,
        OPUS,
    ]


def test_members_read_but_cannot_change(world: World) -> None:
    set_fallbacks(org=world.a.org, model=OPUS, fallbacks=[OPUS_5])
    member = world.client(world.member_a)
    assert OPUS_5 in row(member.get(reverse("dashboard:fallbacks")).content.decode(), OPUS)
    assert member.get(edit_url(OPUS)).status_code == 403
    assert member.post(edit_url(OPUS), {"off": "1"}).status_code == 403
    assert FallbackPolicy.objects.get(org=world.a.org).fallbacks == [OPUS_5]


def test_another_org_neither_sees_nor_changes_a_chain(world: World) -> None:
    set_fallbacks(org=world.a.org, model=OPUS, fallbacks=[HAIKU_45])
    carol = world.client(world.b.owner)
    html = carol.get(reverse("dashboard:fallbacks")).content.decode()
    assert HAIKU_45 not in row(html, OPUS)
    # Her edits change her own org's chain, whatever the page was reached from.
    carol.post(edit_url(OPUS), {"off": "1"})
    carol.post(edit_url(OPUS), {"model_1": SONNET})
    assert FallbackPolicy.objects.get(org=world.a.org).fallbacks == [HAIKU_45]
    assert FallbackPolicy.objects.get(org=world.b.org).fallbacks == [SONNET]
    # Another org's id in ?org= is a 404, as on every page.
    assert carol.get(reverse("dashboard:fallbacks") + f"?org={world.a.org.pk}").status_code == 404


def test_unknown_model_is_404(world: World) -> None:
    assert world.client(world.a.owner).get(edit_url("no/such-model")).status_code == 404


def test_the_request_log_marks_a_fallback(world: World) -> None:
    from tests.dashboard.conftest import make_usage

    make_usage(
        world.a.org,
        world.a.key,
        "req_acme_fallback",
        model_name="opus",
        model_id=OPUS_5,
        requested_model=OPUS,
    )
    html = world.client(world.a.owner).get(reverse("dashboard:requests")).content.decode()
    row_html = html.split('data-request-id="req_acme_fallback"', 1)[1].split("</tr>", 1)[0]
    assert ">fallback</span>" in row_html and f"Asked for {OPUS}" in row_html
    plain = html.split(f'data-request-id="{world.a.request_id}"', 1)[1].split("</tr>", 1)[0]
    assert "fallback" not in plain
