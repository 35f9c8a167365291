"""Concurrency limits and the fair share are settable wherever RPM is: the dashboard's key form,
the management API, the admin (keys, orgs, deployments) and the CLI; the gateway's key cache
carries them (with the settings' defaults) to admission."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse

from accounts import keycache, keys
from accounts.models import ApiKey, Organization
from catalog.models import Deployment
from tests.dashboard.conftest import World

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator(db: Any) -> Client:
    admin = get_user_model().objects.create_superuser("ops", "ops@example.test", "ops-pass-12345")
    client = Client()
    client.force_login(admin)
    return client


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_dashboard_key_form_sets_and_clears_the_concurrency_limit(world: World) -> None:
    client = world.client(world.a.owner)
    response = client.post(
        reverse("dashboard:key-create"), {"name": "conc", "rpm_limit": "", "max_concurrency": "4"}
    )
    assert response.status_code == 302  # Post/Redirect/Get to the page that shows the secret
    key = ApiKey.objects.get(org=world.a.org, name="conc")
    assert key.max_concurrency == 4
    edit = reverse("dashboard:key-edit", args=[key.pk])
    assert 'name="max_concurrency"' in client.get(edit).content.decode()
    client.post(edit, {"name": "conc", "max_concurrency": "7"})
    key.refresh_from_db()
    assert key.max_concurrency == 7
    client.post(edit, {"name": "conc", "max_concurrency": ""})
    key.refresh_from_db()
    assert key.max_concurrency is None
    bad = client.post(edit, {"name": "conc", "max_concurrency": "0"})
    assert bad.status_code == 200 and "greater than or equal to 1" in bad.content.decode()
    assert "In flight" in client.get(reverse("dashboard:keys")).content.decode()


def test_api_creates_patches_and_validates_max_concurrency(world: World) -> None:
    from rest_framework.test import APIClient

    api = APIClient()
    api.force_login(world.a.owner)
    url = f"/api/v1/orgs/{world.a.org.pk}/keys"
    body = api.post(url, {"max_concurrency": 3}, format="json").json()
    assert body["max_concurrency"] == 3
    patched = api.patch(f"{url}/{body['id']}", {"max_concurrency": 5}, format="json").json()
    assert patched["max_concurrency"] == 5
    # Absent keeps it; null clears it.
    kept = api.patch(f"{url}/{body['id']}", {"rpm_limit": 9}, format="json").json()
    assert kept["max_concurrency"] == 5 and kept["rpm_limit"] == 9
    cleared = api.patch(f"{url}/{body['id']}", {"max_concurrency": None}, format="json").json()
    assert cleared["max_concurrency"] is None
    refused = api.post(url, {"max_concurrency": 0}, format="json")
    assert refused.status_code == 400
    assert "max_concurrency" in refused.content.decode()


def test_admin_sets_key_org_and_deployment_limits(world: World, operator: Client) -> None:
    key = world.a.key
    operator.post(
        reverse("admin:accounts_apikey_change", args=[key.pk]),
        {"name": key.name, "rpm_limit": "", "max_concurrency": "6", "spend_cap_usd": ""},
    )
    key.refresh_from_db()
    assert key.max_concurrency == 6
    org = world.a.org
    page = operator.get(reverse("admin:accounts_organization_change", args=[org.pk]))
    assert 'name="max_concurrency"' in page.content.decode()
    deployment = Deployment(name="fair", base_url="https://api.example.test")
    deployment.set_api_key("sk-ant-x")
    deployment.save()
    assert deployment.fair_share == 0.5
    page = operator.get(reverse("admin:catalog_deployment_change", args=[deployment.pk]))
    assert 'name="fair_share"' in page.content.decode()


def test_cli_sets_the_limits() -> None:
    run("create_org", "Conc", "--max-concurrency", "12")
    org = Organization.objects.get(name="Conc")
    assert org.max_concurrency == 12
    secret = run("create_key", "Conc", "--max-concurrency", "3").strip().splitlines()[-1]
    assert keys.is_well_formed(secret)
    assert ApiKey.objects.get(org=org).max_concurrency == 3
    with pytest.raises(CommandError, match="--max-concurrency: must be at least 1"):
        run("create_key", "Conc", "--max-concurrency", "0")
    with pytest.raises(CommandError, match="--max-concurrency: must be at least 1"):
        run("create_org", "Conc2", "--max-concurrency", "0")
    run("load_catalog")
    run("add_deployment", "fair", "--url", "https://api.example.test", "--api-key", "sk-x")
    assert Deployment.objects.get(name="fair").fair_share == 0.5
    run(
        "add_deployment",
        "fair",
        "--url",
        "https://api.example.test",
        "--api-key",
        "sk-x",
        "--fair-share",
        "0.25",
    )
    assert Deployment.objects.get(name="fair").fair_share == 0.25
    with pytest.raises(CommandError, match=r"--fair-share: must be from 0\.01 to 1"):
        run(
            "add_deployment",
            "fair",
            "--url",
            "https://api.example.test",
            "--api-key",
            "sk-x",
            "--fair-share",
            "1.5",
        )


@pytest.mark.django_db(transaction=True)  # the lookup recycles its connection, as in production
def test_key_cache_carries_the_limits_and_the_defaults(world: World, settings) -> None:
    settings.EZAT_DEFAULT_KEY_CONCURRENCY = 0
    settings.EZAT_DEFAULT_ORG_CONCURRENCY = 40
    key = world.a.key
    info = keycache._fetch(keys.hash_key(world.a.secret))
    assert info is not None
    assert (info.key_concurrency, info.org_concurrency) == (None, 40)
    ApiKey.objects.filter(pk=key.pk).update(max_concurrency=2)
    Organization.objects.filter(pk=world.a.org.pk).update(max_concurrency=9)
    info = keycache._fetch(keys.hash_key(world.a.secret))
    assert info is not None
    assert (info.key_concurrency, info.org_concurrency) == (2, 9)
