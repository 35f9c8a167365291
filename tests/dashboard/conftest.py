"""Two orgs, three users, keys, usage and ledger rows for the dashboard tenancy tests.

Org A ("Acme") has an owner (alice) and a member (bob); org B ("Globex") has its own owner
(carol). Every string that belongs to one org is unique to it ("acme-…" / "globex-…"), so a
test can assert that one org's page never contains the other org's markers.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from accounts import services
from accounts.models import ApiKey, Organization
from billing.models import UsageRecord
from billing.request_log import mirror_usage
from billing.services import grant_credit

PASSWORD = "correct-horse-battery-1"
PRICES = {
    "input": "3",
    "output": "15",
    "cacheRead": "0.3",
    "cacheWrite5m": "3.75",
    "cacheWrite1h": "6",
}


def make_usage(
    org: Organization, key: ApiKey | None, request_id: str, **fields: Any
) -> UsageRecord:
    values: dict[str, Any] = {
        "request_id": request_id,
        "org": org,
        "api_key": key,
        "api": "chat",
        "model_id": "anthropic/claude-sonnet-5-5",
        "model_name": "sonnet",
        "deployment": "sim",
        "input_tokens": 1000,
        "output_tokens": 200,
        "cost_nano": 6_000_000,
        "prices": PRICES,
        "started_at": timezone.now(),
        "latency_ms": 420,
        "attempts": [{"deployment": "sim", "outcome": "ok"}],
        **fields,
    }
    created_at = values.pop("created_at", None)
    record = UsageRecord.objects.create(**values)
    if created_at is not None:  # auto_now_add: move it afterwards
        UsageRecord.objects.filter(pk=record.pk).update(created_at=created_at)
        record.refresh_from_db()
    # The gateway writes a request-log row beside each usage record: so do the fixtures.
    mirror_usage(record)
    return record


@dataclass
class Tenant:
    org: Organization
    owner: Any
    key: ApiKey
    secret: str
    request_id: str
    markers: tuple[str, ...]  # strings only this org's pages may contain


@dataclass
class World:
    a: Tenant
    b: Tenant
    member_a: Any

    def client(self, user: Any, **kwargs: Any) -> Client:
        client = Client(**kwargs)
        client.force_login(user)
        return client


def _user(username: str) -> Any:
    return get_user_model().objects.create_user(
        username=username, email=f"{username}@example.test", password=PASSWORD
    )


def _tenant(name: str, slug: str, owner: Any) -> Tenant:
    org = services.create_org(name=name)
    services.add_member(org=org, user=owner, role="owner")
    new = services.create_api_key(org=org, name=f"{slug}-prod-key", rpm_limit=60, created_by=owner)
    request_id = f"req_{slug}_0001"
    make_usage(org, new.key, request_id, model_name=f"{slug}-model-alias")
    make_usage(
        org,
        new.key,
        f"req_{slug}_0002",
        model_name=f"{slug}-model-alias",
        cache_read_tokens=1_000_000,
        created_at=timezone.now() - timedelta(days=2),
    )
    grant_credit(org=org, amount_nano=50_000_000_000, memo=f"{slug}-credit-memo", created_by="t")
    org.refresh_from_db()
    return Tenant(
        org=org,
        owner=owner,
        key=new.key,
        secret=new.secret,
        request_id=request_id,
        markers=(
            f"{slug}-prod-key",
            new.key.prefix,
            request_id,
            f"{slug}-model-alias",
            f"{slug}-credit-memo",
        ),
    )


@pytest.fixture(autouse=True)
def _fast_passwords(request: pytest.FixtureRequest) -> None:
    # PBKDF2 at full strength costs ~0.3 s per user; the tests are about tenancy, not hashing.
    # Not for the browser tests beside them: their users sign in to a server in another
    # process, which checks passwords with the real hashers.
    if request.node.get_closest_marker("browser") is None:
        settings = request.getfixturevalue("settings")
        settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def world(db: Any) -> World:
    alice, bob, carol = _user("alice"), _user("bob"), _user("carol")
    a = _tenant("Acme", "acme", alice)
    services.add_member(org=a.org, user=bob, role="member")
    b = _tenant("Globex", "globex", carol)
    return World(a=a, b=b, member_a=bob)
