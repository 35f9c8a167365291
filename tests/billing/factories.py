"""Small builders for billing tests: orgs with credit, usage records with a known cost."""

from __future__ import annotations

import itertools
import uuid
from datetime import datetime
from typing import Any

from django.utils import timezone

from accounts.models import Organization
from billing.models import UsageRecord
from billing.services import grant_credit

_names = itertools.count(1)

PRICES = {
    "input": "3",
    "output": "15",
    "cacheRead": "0.3",
    "cacheWrite5m": "3.75",
    "cacheWrite1h": "6",
}


def make_org(name: str | None = None, *, credit_nano: int = 0) -> Organization:
    org = Organization.objects.create(name=name or f"org-{next(_names)}-{uuid.uuid4().hex[:6]}")
    if credit_nano:
        grant_credit(org=org, amount_nano=credit_nano, memo="test credit")
        org.refresh_from_db()
    return org


def usage_fields(org: Organization, *, cost_nano: int = 1_000, **overrides: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "request_id": f"req_{uuid.uuid4().hex}",
        "org": org,
        "api": "messages",
        "model_id": "claude-test",
        "model_name": "claude-test",
        "cost_nano": cost_nano,
        "prices": PRICES,
        "started_at": timezone.now(),
        "input_tokens": 10,
        "output_tokens": 5,
    }
    fields.update(overrides)
    return fields


def make_usage(org: Organization, *, cost_nano: int = 1_000, **overrides: Any) -> UsageRecord:
    return UsageRecord.objects.create(**usage_fields(org, cost_nano=cost_nano, **overrides))


def make_usages(org: Organization, costs: list[int], **overrides: Any) -> list[UsageRecord]:
    """Many records at once, one per cost (bulk insert keeps the big tests fast)."""
    return UsageRecord.objects.bulk_create(
        UsageRecord(**usage_fields(org, cost_nano=cost, **overrides)) for cost in costs
    )


def set_created_at(record: UsageRecord, when: datetime) -> None:
    """`created_at` is auto_now_add; tests that need a given time move it afterwards."""
    UsageRecord.objects.filter(pk=record.pk).update(created_at=when)
