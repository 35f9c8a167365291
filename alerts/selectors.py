"""Reads for alerts: an org's settings and history, and the figures thresholds compare."""

from __future__ import annotations

from django.db.models import QuerySet

from accounts.models import ApiKey, Organization
from alerts.models import AlertEvent, AlertSettings
from billing.selectors import month_to_date_spend, org_balance_nano, unreconciled_cost_nano


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


def key_cap_spend_nano(key: ApiKey) -> int:
    """What counts against the key's cap now (this UTC month)."""
    return month_to_date_spend(key)


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
