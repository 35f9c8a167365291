"""Reads for alerts: an org's settings and history, and the figures thresholds compare."""

from __future__ import annotations

from datetime import UTC, datetime

from django.db.models import QuerySet, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from accounts.models import ApiKey, Organization
from alerts.models import AlertEvent, AlertSettings, WebhookDelivery
from billing.models import UsageRecord
from billing.selectors import month_start, org_balance_nano, unreconciled_cost_nano


def org_settings(org: Organization) -> AlertSettings | None:
    return AlertSettings.objects.filter(org=org).first()


def org_history(org: Organization, limit: int = 100) -> QuerySet[AlertEvent]:
    return AlertEvent.objects.filter(org=org).select_related("api_key")[:limit]


def available_balance_nano(org: Organization) -> int:
    """Ledger balance minus usage recorded but not yet reconciled into the ledger."""
    return org_balance_nano(org) - unreconciled_cost_nano(org)


def capped_keys(org: Organization) -> list[ApiKey]:
    return list(
        ApiKey.objects.filter(org=org, revoked_at__isnull=True, spend_cap_nano__isnull=False)
    )


def cap_period_start(period: str, now: datetime | None = None) -> datetime | None:
    """Start of the key's current cap period (UTC month or day); None for an all-time cap."""
    now = (now or timezone.now()).astimezone(UTC)
    if period == ApiKey.CapPeriod.TOTAL:
        return None
    if period == ApiKey.CapPeriod.DAY:
        return now.replace(hour=0, minute=0, second=0, microsecond=0)
    return month_start(now)


def key_cap_spend_nano(key: ApiKey, now: datetime | None = None) -> int:
    """What counts against the key's cap now: its spend in the current cap period."""
    qs = UsageRecord.objects.filter(api_key=key)
    start = cap_period_start(key.spend_cap_period, now)
    if start is not None:
        qs = qs.filter(created_at__gte=start)
    return int(qs.aggregate(total=Coalesce(Sum("cost_nano"), 0))["total"])


def orgs_with_alerts() -> QuerySet[AlertSettings]:
    return AlertSettings.objects.select_related("org")


def owner_emails(org: Organization) -> list[str]:
    return sorted(
        {
            m.user.email
            for m in org.memberships.filter(role="owner").select_related("user")
            if m.user.email
        }
    )


def deliveries(org: Organization, limit: int = 50) -> QuerySet[WebhookDelivery]:
    """The delivery log: the latest POSTs to the org's webhook, alerts' retries and tests."""
    return WebhookDelivery.objects.filter(org=org).select_related("event")[:limit]
