"""Organisations and inference keys: listing, creating, editing, revoking, tenancy, input errors."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from accounts import keys, services
from accounts.models import ApiKey, Organization
from tests.api.conftest import make_usage

pytestmark = pytest.mark.django_db


def keys_url(org: Organization, key: ApiKey | int | None = None, action: str = "") -> str:
    base = f"/api/v1/orgs/{org.pk}/keys"
    if key is not None:
        base += f"/{key if isinstance(key, int) else key.pk}"
    return base + (f"/{action}" if action else "")


# --- Organisations --------------------------------------------------------------------------


def test_orgs_list_shows_my_orgs_with_my_role(
    org_a: Organization, org_b: Organization, owner_a: Any, member_a: Any, owner_b: Any
):
    services.add_member(org=org_b, user=member_a, role="owner")
    from tests.api.conftest import session_client

    mine = session_client(member_a).get("/api/v1/orgs/").json()
    assert mine["count"] == 2
    assert {(o["name"], o["role"]) for o in mine["results"]} == {
        ("Org A", "member"),
        ("Org B", "owner"),
    }
    theirs = session_client(owner_b).get("/api/v1/orgs/").json()
    assert [(o["name"], o["role"]) for o in theirs["results"]] == [("Org B", "owner")]


def test_org_detail_and_404_for_strangers(
    org_a: Organization, org_b: Organization, as_member_a: APIClient
):
    body = as_member_a.get(f"/api/v1/orgs/{org_a.pk}").json()
    assert body["name"] == "Org A" and body["role"] == "member"
    # Someone else's org and a missing org answer the same.
    other = as_member_a.get(f"/api/v1/orgs/{org_b.pk}")
    missing = as_member_a.get("/api/v1/orgs/987654")
    assert other.status_code == missing.status_code == 404
    assert other.json() == missing.json()


def test_user_without_orgs_sees_empty_list(db: Any):
    from django.contrib.auth import get_user_model

    from tests.api.conftest import session_client

    loner = get_user_model().objects.create_user(username="loner", password=None)
    body = session_client(loner).get("/api/v1/orgs/").json()
    assert body["count"] == 0 and body["results"] == []


# --- Creating ---------------------------------------------------------------------------------


def test_owner_creates_key_and_sees_secret_once(org_a: Organization, as_owner_a: APIClient):
    response = as_owner_a.post(
        keys_url(org_a),
        {"name": "prod", "rpm_limit": 60, "spend_cap_usd": "12.5"},
        format="json",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert keys.is_well_formed(body["secret"])
    assert body["secret"].startswith(body["prefix"])
    assert body["rpm_limit"] == 60
    assert body["spend_cap_usd"] == "12.5"
    assert body["status"] == "active"
    assert body["month_to_date_spend_usd"] == "0"

    key = ApiKey.objects.get(pk=body["id"])
    assert key.org == org_a and key.spend_cap_nano == 12_500_000_000
    assert key.key_hash == keys.hash_key(body["secret"])

    detail = as_owner_a.get(keys_url(org_a, key)).json()
    listed = as_owner_a.get(keys_url(org_a)).json()["results"][0]
    assert "secret" not in detail and "secret" not in listed
    assert body["secret"] not in str(detail) + str(listed)


def test_create_with_defaults(org_a: Organization, as_owner_a: APIClient):
    body = as_owner_a.post(keys_url(org_a), {}, format="json").json()
    assert body["name"] == "" and body["rpm_limit"] is None and body["spend_cap_usd"] is None


def test_spend_cap_accepts_json_number(org_a: Organization, as_owner_a: APIClient):
    body = as_owner_a.post(keys_url(org_a), {"spend_cap_usd": 0.1}, format="json").json()
    assert body["spend_cap_usd"] == "0.1"


@pytest.mark.parametrize(
    ("payload", "field", "message"),
    [
        ({"rpm_limit": 0}, "rpm_limit", "must be ≥ 1"),
        ({"rpm_limit": -5}, "rpm_limit", "must be ≥ 1"),
        ({"rpm_limit": "lots"}, "rpm_limit", None),
        ({"rpm_limit": 1.5}, "rpm_limit", None),
        ({"rpm_limit": 10**12}, "rpm_limit", None),
        ({"spend_cap_usd": "-1"}, "spend_cap_usd", "must be ≥ 0"),
        ({"spend_cap_usd": "0.0000000001"}, "spend_cap_usd", "at most 9 decimal places"),
        ({"spend_cap_usd": "abc"}, "spend_cap_usd", None),
        ({"spend_cap_usd": "NaN"}, "spend_cap_usd", None),
        ({"spend_cap_usd": "Infinity"}, "spend_cap_usd", None),
        ({"spend_cap_usd": "1e30"}, "spend_cap_usd", "exponent notation"),
        ({"spend_cap_usd": "1000000001"}, "spend_cap_usd", "must be ≤"),
        ({"spend_cap_usd": "-1e30"}, "spend_cap_usd", "exponent notation"),
        ({"spend_cap_usd": "1000000000.000000001"}, "spend_cap_usd", "must be ≤"),
        ({"spend_cap_usd": True}, "spend_cap_usd", None),
        ({"name": "x" * 101}, "name", None),
        ({"spend_cap": "10"}, "spend_cap", "unknown field"),
        ({"prefix": "ezat_sk_abc"}, "prefix", "unknown field"),
    ],
)
def test_create_rejects_bad_input_naming_the_field(
    org_a: Organization, as_owner_a: APIClient, payload: dict, field: str, message: str | None
):
    response = as_owner_a.post(keys_url(org_a), payload, format="json")
    assert response.status_code == 400, response.content
    errors = response.json()
    assert list(errors) == [field]
    if message:
        assert message in errors[field][0]
    assert not ApiKey.objects.filter(org=org_a).exists()


def test_create_rejects_malformed_bodies(org_a: Organization, as_owner_a: APIClient):
    not_json = as_owner_a.post(keys_url(org_a), "{nope", content_type="application/json")
    assert not_json.status_code == 400
    a_list = as_owner_a.post(keys_url(org_a), [1, 2], format="json")
    assert a_list.status_code == 400 and "non_field_errors" in a_list.json()


def test_member_cannot_write(org_a: Organization, key_a: ApiKey, as_member_a: APIClient):
    assert as_member_a.get(keys_url(org_a)).status_code == 200
    assert as_member_a.get(keys_url(org_a, key_a)).status_code == 200
    assert as_member_a.post(keys_url(org_a), {"name": "x"}, format="json").status_code == 403
    patch = as_member_a.patch(keys_url(org_a, key_a), {"rpm_limit": 5}, format="json")
    assert patch.status_code == 403
    assert as_member_a.delete(keys_url(org_a, key_a)).status_code == 403
    assert as_member_a.post(keys_url(org_a, key_a, "revoke")).status_code == 403
    key_a.refresh_from_db()
    assert key_a.rpm_limit == 100 and key_a.revoked_at is None
    assert ApiKey.objects.filter(org=org_a).count() == 1


# --- Reading ----------------------------------------------------------------------------------


def test_list_filters_by_status_and_reports_month_spend(
    org_a: Organization, key_a: ApiKey, as_owner_a: APIClient
):
    revoked = services.revoke_api_key(key=services.create_api_key(org=org_a).key)
    make_usage(org_a, key_a, cost_nano=1_250_000_000)
    make_usage(org_a, key_a, cost_nano=250_000_000)

    everything = as_owner_a.get(keys_url(org_a)).json()
    assert everything["count"] == 2
    active = as_owner_a.get(keys_url(org_a), {"status": "active"}).json()["results"]
    assert [k["id"] for k in active] == [key_a.pk]
    assert active[0]["month_to_date_spend_usd"] == "1.5"
    gone = as_owner_a.get(keys_url(org_a), {"status": "revoked"}).json()["results"]
    assert [(k["id"], k["status"]) for k in gone] == [(revoked.pk, "revoked")]

    bad = as_owner_a.get(keys_url(org_a), {"status": "deleted"})
    assert bad.status_code == 400 and "status" in bad.json()


def test_unknown_key_is_404(org_a: Organization, as_owner_a: APIClient):
    assert as_owner_a.get(keys_url(org_a, 424242)).status_code == 404


# --- Editing ----------------------------------------------------------------------------------


def test_patch_changes_only_what_is_given(
    org_a: Organization, key_a: ApiKey, as_owner_a: APIClient
):
    response = as_owner_a.patch(keys_url(org_a, key_a), {"spend_cap_usd": "3"}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["spend_cap_usd"] == "3"
    key_a.refresh_from_db()
    assert (key_a.name, key_a.rpm_limit, key_a.spend_cap_nano) == ("prod-a", 100, 3 * 10**9)

    as_owner_a.patch(keys_url(org_a, key_a), {"name": " renamed "}, format="json")
    key_a.refresh_from_db()
    assert (key_a.name, key_a.rpm_limit, key_a.spend_cap_nano) == ("renamed", 100, 3 * 10**9)

    # null clears a limit back to the default / no cap.
    cleared = as_owner_a.patch(
        keys_url(org_a, key_a), {"rpm_limit": None, "spend_cap_usd": None}, format="json"
    ).json()
    assert cleared["rpm_limit"] is None and cleared["spend_cap_usd"] is None

    unchanged = as_owner_a.patch(keys_url(org_a, key_a), {}, format="json")
    assert unchanged.status_code == 200 and unchanged.json()["name"] == "renamed"


def test_patch_rejects_bad_input(org_a: Organization, key_a: ApiKey, as_owner_a: APIClient):
    response = as_owner_a.patch(keys_url(org_a, key_a), {"rpm_limit": 0}, format="json")
    assert response.status_code == 400
    assert response.json() == {"rpm_limit": ["must be ≥ 1"]}
    response = as_owner_a.patch(keys_url(org_a, key_a), {"rpm": 5}, format="json")
    assert response.json() == {"rpm": ["unknown field"]}
    key_a.refresh_from_db()
    assert key_a.rpm_limit == 100


def test_put_is_not_allowed(org_a: Organization, key_a: ApiKey, as_owner_a: APIClient):
    assert as_owner_a.put(keys_url(org_a, key_a), {}, format="json").status_code == 405


# --- Revoking ---------------------------------------------------------------------------------


def test_revoke_via_post_is_idempotent(org_a: Organization, key_a: ApiKey, as_owner_a: APIClient):
    first = as_owner_a.post(keys_url(org_a, key_a, "revoke"))
    assert first.status_code == 200 and first.json()["status"] == "revoked"
    second = as_owner_a.post(keys_url(org_a, key_a, "revoke"))
    assert second.json()["revoked_at"] == first.json()["revoked_at"]
    assert as_owner_a.get(keys_url(org_a, key_a, "revoke")).status_code == 405


def test_delete_revokes_but_keeps_the_key(
    org_a: Organization, key_a: ApiKey, as_owner_a: APIClient
):
    assert as_owner_a.delete(keys_url(org_a, key_a)).status_code == 204
    key_a.refresh_from_db()
    assert key_a.revoked_at is not None
    assert as_owner_a.get(keys_url(org_a, key_a)).json()["status"] == "revoked"


# --- Tenancy ----------------------------------------------------------------------------------


def test_nobody_touches_another_orgs_keys(
    org_a: Organization,
    org_b: Organization,
    key_a: ApiKey,
    key_b: ApiKey,
    as_owner_a: APIClient,
    as_member_a: APIClient,
    as_owner_b: APIClient,
):
    for client in (as_owner_a, as_member_a):
        assert client.get(keys_url(org_b)).status_code == 404
        assert client.post(keys_url(org_b), {}, format="json").status_code == 404
        # Key B through org A's URL: the key isn't in org A.
        assert client.get(keys_url(org_a, key_b)).status_code == 404
    assert (
        as_owner_a.patch(keys_url(org_a, key_b), {"rpm_limit": 1}, format="json").status_code == 404
    )
    assert as_owner_a.delete(keys_url(org_a, key_b)).status_code == 404
    assert as_owner_a.post(keys_url(org_a, key_b, "revoke")).status_code == 404

    assert as_owner_b.get(keys_url(org_a)).status_code == 404
    assert as_owner_b.get(keys_url(org_a, key_a)).status_code == 404
    assert (
        as_owner_b.patch(keys_url(org_a, key_a), {"rpm_limit": 1}, format="json").status_code == 404
    )
    assert as_owner_b.delete(keys_url(org_a, key_a)).status_code == 404
    assert as_owner_b.post(keys_url(org_b, key_a, "revoke")).status_code == 404

    listed = as_owner_b.get(keys_url(org_b)).json()["results"]
    assert [k["id"] for k in listed] == [key_b.pk]
    key_a.refresh_from_db()
    key_b.refresh_from_db()
    assert key_a.revoked_at is None and key_a.rpm_limit == 100
    assert key_b.revoked_at is None and key_b.rpm_limit is None
    assert ApiKey.objects.filter(org=org_b).count() == 1


# --- Pagination -------------------------------------------------------------------------------


def test_pagination(org_a: Organization, as_owner_a: APIClient):
    for i in range(7):
        services.create_api_key(org=org_a, name=f"k{i}")
    page1 = as_owner_a.get(keys_url(org_a), {"page_size": 3}).json()
    assert page1["count"] == 7 and len(page1["results"]) == 3 and page1["next"]
    page3 = as_owner_a.get(keys_url(org_a), {"page_size": 3, "page": 3}).json()
    assert len(page3["results"]) == 1 and page3["next"] is None
    last = as_owner_a.get(keys_url(org_a), {"page_size": 3, "page": "last"}).json()
    assert last["results"] == page3["results"]
    names = [
        k["name"]
        for p in (1, 2, 3)
        for k in as_owner_a.get(keys_url(org_a), {"page_size": 3, "page": p}).json()["results"]
    ]
    assert sorted(names) == [f"k{i}" for i in range(7)]


def test_page_size_over_the_maximum_is_refused(org_a: Organization, as_owner_a: APIClient):
    for i in range(3):
        services.create_api_key(org=org_a, name=f"k{i}")
    response = as_owner_a.get(keys_url(org_a), {"page_size": 100000})
    assert response.status_code == 400
    assert "page_size" in response.json()  # names the parameter (issue 16: no silent cap)
    body = as_owner_a.get(keys_url(org_a), {"page_size": 200}).json()
    assert len(body["results"]) == 3


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"page": "abc"}, "page"),
        ({"page": "0"}, "page"),
        ({"page": "-1"}, "page"),
        ({"page_size": "0"}, "page_size"),
        ({"page_size": "ten"}, "page_size"),
    ],
)
def test_bad_pagination_params_are_400(
    org_a: Organization, as_owner_a: APIClient, params: dict, field: str
):
    response = as_owner_a.get(keys_url(org_a), params)
    assert response.status_code == 400
    assert field in response.json()


def test_page_past_the_end_is_404(org_a: Organization, key_a: ApiKey, as_owner_a: APIClient):
    assert as_owner_a.get(keys_url(org_a), {"page": 5}).status_code == 404
