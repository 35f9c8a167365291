"""Issue 34: a key's IP allow-list is set from the management API, the dashboard and the CLI
alike; a bad entry is refused naming it, and nothing is saved."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from accounts.models import ApiKey, Organization

pytestmark = pytest.mark.django_db


def test_api_create_patch_and_clear(org_a: Organization, as_owner_a: APIClient) -> None:
    url = f"/api/v1/orgs/{org_a.pk}/keys"
    created = as_owner_a.post(
        url, {"name": "office", "allowed_ips": ["203.0.113.9", "10.1.2.3/8"]}, format="json"
    )
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["allowed_ips"] == ["203.0.113.9/32", "10.0.0.0/8"]
    patched = as_owner_a.patch(f"{url}/{body['id']}", {"allowed_ips": ["::1"]}, format="json")
    assert patched.status_code == 200 and patched.json()["allowed_ips"] == ["::1/128"]
    bad = as_owner_a.patch(f"{url}/{body['id']}", {"allowed_ips": ["10.0.0.0/33"]}, format="json")
    assert bad.status_code == 400 and "10.0.0.0/33" in bad.content.decode()
    assert ApiKey.objects.get(pk=body["id"]).allowed_ips == ["::1/128"]
    cleared = as_owner_a.patch(f"{url}/{body['id']}", {"allowed_ips": None}, format="json")
    assert cleared.json()["allowed_ips"] == []
    assert as_owner_a.get(f"{url}/{body['id']}").json()["allowed_ips"] == []


def test_dashboard_create_and_edit(org_a: Organization, owner_a: object) -> None:
    client = Client()
    client.force_login(owner_a)  # type: ignore[arg-type]
    response = client.post(
        reverse("dashboard:key-create"), {"name": "ci", "allowed_ips": "192.0.2.0/24,\n::1"}
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    key = ApiKey.objects.get(org=org_a, name="ci")
    assert key.allowed_ips == ["192.0.2.0/24", "::1/128"]
    listing = client.get(reverse("dashboard:keys")).content.decode()
    assert "192.0.2.0/24" in listing
    edit = client.get(reverse("dashboard:key-edit", args=[key.pk])).content.decode()
    assert "192.0.2.0/24\n::1/128" in edit
    bad = client.post(reverse("dashboard:key-edit", args=[key.pk]), {"allowed_ips": "nope"})
    assert (
        bad.status_code == 200 and "&#x27;nope&#x27; is not an IP address" in bad.content.decode()
    )
    key.refresh_from_db()
    assert key.allowed_ips == ["192.0.2.0/24", "::1/128"]


def test_cli_allow_ip_is_repeatable(org_a: Organization) -> None:
    out = StringIO()
    call_command(
        "create_key", org_a.name, "--name", "cli", "--allow-ip", "198.51.100.0/24",
        "--allow-ip", "2001:db8::/32", stdout=out,
    )  # fmt: skip
    key = ApiKey.objects.get(org=org_a, name="cli")
    assert key.allowed_ips == ["198.51.100.0/24", "2001:db8::/32"]
    with pytest.raises(CommandError, match="not an IP address"):
        call_command("create_key", org_a.name, "--name", "x", "--allow-ip", "example.com")
