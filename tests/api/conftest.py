"""Fixtures for the management API: two orgs, three users, keys, usage and ledger rows.

Org A has an owner and a member; org B has its own owner. Every tenancy test checks that one
side cannot see or change the other's data.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db.models import F
from rest_framework.test import APIClient

from accounts import services
from accounts.models import ApiKey, Organization
from billing.models import LedgerEntry, UsageRecord
from billing.request_log import mirror_usage

_ids = itertools.count(1)

PRICES = {
    "input": "3",
    "output": "15",
    "cacheRead": "0.3",
    "cacheWrite5m": "3.75",
    "cacheWrite1h": "6",
}


@pytest.fixture
def org_a(db: Any) -> Organization:
    return services.create_org(name="Org A")


@pytest.fixture
def org_b(db: Any) -> Organization:
    return services.create_org(name="Org B")


def _user(name: str, org: Organization, role: str) -> Any:
    # No password: tests sign in with force_login, and hashing one makes every test slow.
    user = get_user_model().objects.create_user(username=name, password=None)
    services.add_member(org=org, user=user, role=role)
    return user


@pytest.fixture
def owner_a(org_a: Organization) -> Any:
    return _user("owner-a", org_a, "owner")


@pytest.fixture
def member_a(org_a: Organization) -> Any:
    return _user("member-a", org_a, "member")


@pytest.fixture
def owner_b(org_b: Organization) -> Any:
    return _user("owner-b", org_b, "owner")


def session_client(user: Any) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


def bearer_client(secret: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


@pytest.fixture
def as_owner_a(owner_a: Any) -> APIClient:
    return session_client(owner_a)


@pytest.fixture
def as_member_a(member_a: Any) -> APIClient:
    return session_client(member_a)


@pytest.fixture
def as_owner_b(owner_b: Any) -> APIClient:
    return session_client(owner_b)


@pytest.fixture
def mk_a(org_a: Organization, owner_a: Any) -> tuple[Any, str]:
    """A management key of org A: (model, secret)."""
    return services.create_management_key(org=org_a, name="ci", created_by=owner_a)


@pytest.fixture
def as_mk_a(mk_a: tuple[Any, str]) -> APIClient:
    return bearer_client(mk_a[1])


@pytest.fixture
def key_a(org_a: Organization) -> ApiKey:
    return services.create_api_key(org=org_a, name="prod-a", rpm_limit=100).key


@pytest.fixture
def key_b(org_b: Organization) -> ApiKey:
    return services.create_api_key(org=org_b, name="prod-b").key


def make_usage(
    org: Organization,
    key: ApiKey | None,
    *,
    created_at: datetime | None = None,
    **fields: Any,
) -> UsageRecord:
    """A usage record; `created_at` (auto_now_add) is set afterwards when given."""
    n = next(_ids)
    values: dict[str, Any] = {
        "request_id": f"req_{n}",
        "org": org,
        "api_key": key,
        "api": "messages",
        "model_id": "claude-sonnet-4",
        "model_name": "sonnet",
        "input_tokens": 100,
        "output_tokens": 10,
        "cost_nano": 450_000,
        "prices": PRICES,
        "started_at": created_at or datetime.now(UTC),
        **fields,
    }
    record = UsageRecord.objects.create(**values)
    if created_at is not None:
        UsageRecord.objects.filter(pk=record.pk).update(created_at=created_at)
        record.refresh_from_db()
    # The gateway writes a request-log row beside each usage record: so do the fixtures.
    mirror_usage(record)
    return record


@pytest.fixture
def usage() -> Callable[..., UsageRecord]:
    return make_usage


def make_ledger(org: Organization, amount_nano: int, kind: str = "credit", **fields: Any) -> Any:
    """A ledger row and the matching balance move, as billing.services does it."""
    entry = LedgerEntry.objects.create(
        org=org,
        kind=kind,
        amount_nano=amount_nano,
        reference=f"test:{next(_ids)}",
        **fields,
    )
    Organization.objects.filter(pk=org.pk).update(balance_nano=F("balance_nano") + amount_nano)
    return entry


@pytest.fixture
def ledger() -> Callable[..., Any]:
    return make_ledger
