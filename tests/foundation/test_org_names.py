"""Organization names are unique ignoring case (issue 33, item 7): `acme` and `Acme` used to
become two tenants. The service, the database constraint and the admin form all refuse the
second, and the operator commands find an org whatever the case typed."""

from __future__ import annotations

import importlib
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import IntegrityError, transaction
from django.test import Client

from accounts.models import Organization

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_the_cli_refuses_a_name_differing_only_in_case_and_finds_it_in_any_case() -> None:
    run("create_org", "acme")
    with pytest.raises(CommandError, match="already exists as 'acme'"):
        run("create_org", "Acme")
    assert list(Organization.objects.values_list("name", flat=True)) == ["acme"]
    assert "to acme" in run("grant_credit", "ACME", "2")


def test_the_database_refuses_it_too() -> None:
    Organization.objects.create(name="Acme")
    with pytest.raises(IntegrityError), transaction.atomic():
        Organization.objects.create(name="aCME")


def test_the_admin_form_refuses_it_with_words() -> None:
    Organization.objects.create(name="acme")
    admin = get_user_model().objects.create_superuser("root", "root@example.com", "pw")
    client = Client()
    client.force_login(admin)
    response = client.post(
        "/admin/accounts/organization/add/",
        {"name": "ACME", "memberships-TOTAL_FORMS": "0", "memberships-INITIAL_FORMS": "0"},
    )
    assert response.status_code == 200
    assert "compared ignoring case" in response.content.decode()
    assert Organization.objects.count() == 1


def test_the_migration_names_existing_clashes() -> None:
    migration = importlib.import_module("accounts.migrations.0007_org_name_unique_ignoring_case")

    class Rows:
        def values_list(self, *args: Any, **kwargs: Any) -> list[str]:
            return ["acme", "Acme", "other"]

    class Model:
        objects = Rows()

    class Apps:
        def get_model(self, *args: str) -> type[Model]:
            return Model

    with pytest.raises(RuntimeError, match="'Acme', 'acme'"):
        migration.refuse_duplicates(Apps(), None)
