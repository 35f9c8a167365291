"""Issue 34: the admin's usage records and request logs filter by org, model and key."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from tests.dashboard.conftest import World, make_usage


@pytest.fixture
def operator(world: World) -> Client:
    admin = get_user_model().objects.create_superuser("root", password="pw-for-tests-only")
    client = Client()
    client.force_login(admin)
    return client


@pytest.mark.parametrize("listing", ["usagerecord", "requestlog"])
def test_filters_by_org_model_and_key(world: World, operator: Client, listing: str) -> None:
    make_usage(world.a.org, world.a.key, "req_acme_opus_f", model_id="anthropic/claude-opus-5-5")
    url = f"/admin/billing/{listing}/"

    def ids(**params: str) -> set[str]:
        response = operator.get(url, params)
        assert response.status_code == 200
        html = response.content.decode()
        assert "?e=1" not in response.get("Location", "")
        return {i for i in ("req_acme_0001", "req_acme_opus_f", "req_globex_0001") if i in html}

    assert ids() == {"req_acme_0001", "req_acme_opus_f", "req_globex_0001"}
    assert ids(org=str(world.b.org.pk)) == {"req_globex_0001"}
    assert ids(org="acme") == {"req_acme_0001", "req_acme_opus_f"}
    assert ids(model="anthropic/claude-opus-5-5") == {"req_acme_opus_f"}
    assert ids(key=world.b.key.prefix) == {"req_globex_0001"}
    assert ids(key=str(world.a.key.pk), model="anthropic/claude-sonnet-5-5") == {"req_acme_0001"}
    html = operator.get(url, {"org": "acme", "model": "x"}).content.decode()
    # Each box keeps the other filters' values when it is submitted.
    assert '<input type="hidden" name="org" value="acme">' in html
    assert 'name="key" value=""' in html
