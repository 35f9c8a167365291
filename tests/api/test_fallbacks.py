"""Fallback chains in the management API: owners set them per model (and ezat/auto's), members
read them, other orgs can neither read nor change them, bad lists name the entry, and the
catalog's suggestions are offered but never applied."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from accounts.models import FallbackPolicy, Organization
from catalog.services import load_catalog

pytestmark = pytest.mark.django_db

OPUS = "anthropic/claude-opus-5-5"
OPUS_5 = "anthropic/claude-opus-5"
SONNET = "anthropic/claude-sonnet-5-5"


@pytest.fixture(autouse=True)
def catalog(db: Any) -> None:
    load_catalog()


def url(org: Organization, model: str | None = None) -> str:
    base = f"/api/v1/orgs/{org.pk}/fallbacks"
    return base if model is None else f"{base}/{model}"


def test_owner_sets_reads_and_clears_a_chain(org_a: Organization, as_owner_a: APIClient) -> None:
    put = as_owner_a.put(url(org_a, OPUS), {"fallbacks": ["claude-opus-5", SONNET]}, format="json")
    assert put.status_code == 200, put.content
    assert put.json()["model"] == OPUS
    assert put.json()["fallbacks"] == [OPUS_5, SONNET]  # aliases stored as canonical ids
    assert put.json()["updated_by"] == "owner-a"
    # The model may be named by an alias too, any case.
    assert as_owner_a.get(url(org_a, "OPUS")).json()["fallbacks"] == [OPUS_5, SONNET]
    listed = as_owner_a.get(url(org_a)).json()
    assert [c["model"] for c in listed["chains"]] == [OPUS]

    assert as_owner_a.delete(url(org_a, OPUS)).status_code == 204
    assert as_owner_a.get(url(org_a, OPUS)).status_code == 404
    assert as_owner_a.delete(url(org_a, OPUS)).status_code == 204  # idempotent


def test_an_empty_list_turns_the_chain_off(org_a: Organization, as_owner_a: APIClient) -> None:
    as_owner_a.put(url(org_a, OPUS), {"fallbacks": [OPUS_5]}, format="json")
    assert as_owner_a.put(url(org_a, OPUS), {"fallbacks": []}, format="json").status_code == 204
    assert not FallbackPolicy.objects.filter(org=org_a).exists()


def test_ezat_auto_gets_the_orgs_own_chain(org_a: Organization, as_owner_a: APIClient) -> None:
    put = as_owner_a.put(url(org_a, "ezat/auto"), {"fallbacks": [OPUS, SONNET]}, format="json")
    assert put.status_code == 200, put.content
    assert put.json() | {"updated_at": None} == {
        "model": "ezat/auto",
        "fallbacks": [OPUS, SONNET],
        "updated_at": None,
        "updated_by": "owner-a",
    }


@pytest.mark.parametrize(
    ("fallbacks", "message"),
    [
        ([OPUS_5, "no/such-model"], "fallbacks[1]: unknown model"),
        ([OPUS_5, "claude-opus-5"], "fallbacks[1]: anthropic/claude-opus-5 is listed twice"),
        ([OPUS_5, 3], "fallbacks[1]: must be a model id"),
        ([OPUS], "fallbacks[0]: anthropic/claude-opus-5-5 cannot be its own fallback"),
        (["ezat/auto"], "fallbacks[0]: ezat/auto is a chain itself"),
        (
            [f"anthropic/claude-{m}" for m in ("opus-5", "sonnet-5", "haiku-5-5", "opus-4-6")]
            + ["anthropic/claude-sonnet-4-6", "anthropic/claude-haiku-4-5"],
            "fallbacks[5]: at most 5 models",
        ),
    ],
)
def test_bad_lists_name_the_entry(
    org_a: Organization, as_owner_a: APIClient, fallbacks: list[Any], message: str
) -> None:
    response = as_owner_a.put(url(org_a, OPUS), {"fallbacks": fallbacks}, format="json")
    assert response.status_code == 400
    assert response.json()["fallbacks"][0].startswith(message)
    assert not FallbackPolicy.objects.exists()


def test_unknown_model_and_unknown_fields(org_a: Organization, as_owner_a: APIClient) -> None:
    response = as_owner_a.put(url(org_a, "no/such"), {"fallbacks": [OPUS]}, format="json")
    assert response.status_code == 400 and "unknown model" in response.json()["model"][0]
    typo = as_owner_a.put(url(org_a, OPUS), {"fallback": [OPUS_5]}, format="json")
    assert typo.status_code == 400 and typo.json()["fallback"] == ["unknown field"]


def test_members_read_but_cannot_write(
    org_a: Organization, as_owner_a: APIClient, as_member_a: APIClient
) -> None:
    as_owner_a.put(url(org_a, OPUS), {"fallbacks": [OPUS_5]}, format="json")
    assert as_member_a.get(url(org_a, OPUS)).json()["fallbacks"] == [OPUS_5]
    assert as_member_a.put(url(org_a, OPUS), {"fallbacks": []}, format="json").status_code == 403
    assert as_member_a.delete(url(org_a, OPUS)).status_code == 403
    assert FallbackPolicy.objects.get(org=org_a).fallbacks == [OPUS_5]


def test_other_orgs_cannot_read_or_change_a_chain(
    org_a: Organization, org_b: Organization, as_owner_a: APIClient, as_owner_b: APIClient
) -> None:
    as_owner_a.put(url(org_a, OPUS), {"fallbacks": [OPUS_5]}, format="json")
    for response in (
        as_owner_b.get(url(org_a)),
        as_owner_b.get(url(org_a, OPUS)),
        as_owner_b.put(url(org_a, OPUS), {"fallbacks": [SONNET]}, format="json"),
        as_owner_b.delete(url(org_a, OPUS)),
    ):
        assert response.status_code == 404
    assert FallbackPolicy.objects.get(org=org_a).fallbacks == [OPUS_5]
    # B's own list is empty; its chains are its own.
    assert as_owner_b.get(url(org_b)).json()["chains"] == []
    as_owner_b.put(url(org_b, OPUS), {"fallbacks": [SONNET]}, format="json")
    assert FallbackPolicy.objects.get(org=org_a).fallbacks == [OPUS_5]


def test_a_management_key_writes_for_its_own_org_only(
    org_a: Organization, org_b: Organization, as_mk_a: APIClient
) -> None:
    assert as_mk_a.put(url(org_a, OPUS), {"fallbacks": [OPUS_5]}, format="json").status_code == 200
    assert as_mk_a.put(url(org_b, OPUS), {"fallbacks": [OPUS_5]}, format="json").status_code == 404
    assert FallbackPolicy.objects.get(org=org_a).updated_by.startswith("management-key:")


def test_suggestions_are_offered_not_applied(org_a: Organization, as_owner_a: APIClient) -> None:
    body = as_owner_a.get(url(org_a)).json()
    assert body["chains"] == []  # off by default
    suggested = {s["model"]: s for s in body["suggestions"]}
    assert suggested["ezat/auto"]["fallbacks"][0] == SONNET
    assert suggested[OPUS]["fallbacks"] == [OPUS_5, SONNET]
    assert suggested[OPUS]["why"] and suggested[OPUS]["source_url"].startswith("https://")


def test_the_request_log_shows_the_requested_and_the_answering_model(
    org_a: Organization, key_a: Any, as_owner_a: APIClient, usage: Any
) -> None:
    usage(org_a, key_a, model_id=OPUS_5, model_name="opus", requested_model=OPUS)
    usage(org_a, key_a, model_id=SONNET, model_name="sonnet")  # written before fallbacks existed
    rows = as_owner_a.get(f"/api/v1/orgs/{org_a.pk}/requests").json()["results"]
    assert [(r["model_name"], r["requested_model"], r["model"]) for r in rows] == [
        ("sonnet", SONNET, SONNET),
        ("opus", OPUS, OPUS_5),
    ]
