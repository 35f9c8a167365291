"""The Playground's pieces without a browser: the request it builds, its session key (minted
once, never in a page, revoked at expiry), CSRF and tenancy of the run endpoint. The streamed
run itself is covered in tests/playground/test_playground_alerts_browser.py."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from accounts import keys
from accounts import services as accounts
from accounts.models import ApiKey
from playground import relay, services
from playground.models import PlaygroundKey

pytestmark = pytest.mark.django_db


def test_run_body_builds_a_streaming_responses_request() -> None:
    body = relay.run_body(
        {"model": " sonnet ", "reasoning": "high", "system": "Be brief.", "prompt": "Hi"}
    )
    assert body == {
        "model": "sonnet",
        "instructions": "Be brief.",
        "input": [{"role": "user", "content": "Hi"}],
        "stream": True,
        "store": False,
        "reasoning": {"summary": "auto", "effort": "high"},
    }
    plain = relay.run_body({"model": "m", "system": "  ", "prompt": "x"})
    assert plain["reasoning"] == {"summary": "auto"}
    assert "instructions" not in plain


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ([], "JSON object"),
        ({"prompt": "x"}, "model"),
        ({"model": "m", "prompt": 3}, "prompt"),
        ({"model": "m", "prompt": " \n "}, "prompt: write a prompt first"),  # issue 34
        ({"model": "m", "system": [], "prompt": "x"}, "system"),
        ({"model": "m", "prompt": "x", "reasoning": "extreme"}, "reasoning"),
    ],
)
def test_run_body_names_the_bad_field(data: Any, field: str) -> None:
    with pytest.raises(relay.PlaygroundInputError, match=field):
        relay.run_body(data)


@pytest.fixture
def owner() -> Any:
    return get_user_model().objects.create_user("pg-owner", password="pg-pass-12345")


@pytest.fixture
def org(owner: Any) -> Any:
    org = accounts.create_org(name="Playground Co")
    accounts.add_member(org=org, user=owner, role="owner")
    return org


def test_session_key_is_minted_once_and_renewed_after_expiry(org: Any, owner: Any) -> None:
    session: dict[str, Any] = {}
    first = services.session_secret(session, org, owner)
    assert services.session_secret(session, org, owner) == first
    key = ApiKey.objects.get(key_hash=keys.hash_key(first))
    assert key.org == org and key.name == "Playground · pg-owner"
    assert PlaygroundKey.objects.get(api_key=key).expires_at > timezone.now()

    # Past its expiry, beat revokes it; the session then gets a new one.
    later = timezone.now() + timedelta(hours=2)
    assert services.revoke_expired_keys(now=later) == 1
    assert services.revoke_expired_keys(now=later) == 0  # idempotent
    key.refresh_from_db()
    assert key.revoked_at is not None
    second = services.session_secret(session, org, owner)
    assert second != first
    assert ApiKey.objects.filter(org=org, name="Playground · pg-owner").count() == 2


def test_session_key_is_per_org(org: Any, owner: Any) -> None:
    other = accounts.create_org(name="Second Co")
    accounts.add_member(org=other, user=owner, role="member")
    session: dict[str, Any] = {}
    a = services.session_secret(session, org, owner)
    b = services.session_secret(session, other, owner)
    assert a != b
    assert ApiKey.objects.get(key_hash=keys.hash_key(b)).org == other


def test_page_has_no_key_and_run_needs_csrf_and_membership(org: Any, owner: Any) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    page = client.get("/dashboard/playground/")
    assert page.status_code == 200
    assert "ezat_sk_" not in page.content.decode()
    assert not ApiKey.objects.filter(org=org).exists()  # nothing minted by viewing

    refused = client.post("/dashboard/playground/run", data=b"{}", content_type="application/json")
    assert refused.status_code == 403
    assert not ApiKey.objects.filter(org=org).exists()

    token = client.cookies["csrftoken"].value
    bad = client.post(
        "/dashboard/playground/run",
        data=b'{"prompt": "hi"}',
        content_type="application/json",
        headers={"X-CSRFToken": token},
    )
    assert bad.status_code == 400
    assert "model" in bad.json()["error"]["message"]
    assert not ApiKey.objects.filter(org=org).exists()

    member = get_user_model().objects.create_user("pg-member", password="pg-pass-12345")
    accounts.add_member(org=org, user=member, role="member")
    as_member = Client()
    as_member.force_login(member)
    assert "Only owners" in as_member.get("/dashboard/playground/").content.decode()
    refused_member = as_member.post(
        "/dashboard/playground/run",
        data=b'{"model": "m", "prompt": "x"}',
        content_type="application/json",
    )
    assert refused_member.status_code == 403  # runs spend money: owners only, like keys
    assert not ApiKey.objects.filter(org=org).exists()

    anonymous = Client().post(
        "/dashboard/playground/run", data=b"{}", content_type="application/json"
    )
    assert anonymous.status_code == 302  # to the login page

    stranger = get_user_model().objects.create_user("pg-stranger", password="pg-pass-12345")
    outsider = Client()
    outsider.force_login(stranger)
    response = outsider.post(
        "/dashboard/playground/run",
        data=b'{"model": "m", "prompt": "x"}',
        content_type="application/json",
    )
    assert response.status_code == 403  # no org: the no-org page
    assert not ApiKey.objects.exclude(org=org).filter(name__startswith="Playground").exists()


@pytest.mark.parametrize(
    ("configured", "server", "url"),
    [
        ("http://gw.internal:8000/", ("10.0.0.5", 9000), "http://gw.internal:8000"),
        ("", ("10.0.0.5", 9000), "http://10.0.0.5:9000"),
        ("", ("0.0.0.0", 8000), "http://127.0.0.1:8000"),
        ("", ("::1", 8000), "http://[::1]:8000"),
    ],
)
def test_the_relay_goes_to_the_configured_address_or_the_servers_own_socket(
    configured: str, server: Any, url: str
) -> None:
    assert relay.gateway_url(configured, server) == url


@pytest.mark.parametrize("server", [None, ("/run/ezat.sock", None), ("", 0)])
def test_the_relay_refuses_to_guess_an_address_it_cannot_name(server: Any) -> None:
    with pytest.raises(relay.RelayAddressUnknown, match="EZAT_PLAYGROUND_GATEWAY_URL"):
        relay.gateway_url("", server)
