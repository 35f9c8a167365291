"""Reads for the management API's organisation and key endpoints."""

from __future__ import annotations

from datetime import UTC, datetime

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import (
    BigIntegerField,
    Case,
    F,
    OuterRef,
    QuerySet,
    Subquery,
    Sum,
    Value,
    When,
)
from django.db.models.functions import Coalesce
from django.utils import timezone

from accounts.models import ApiKey, ManagementKey, Membership, Organization


def month_start(now: datetime | None = None) -> datetime:
    """Start of the current calendar month in UTC: the window of spend caps."""
    now = (now or timezone.now()).astimezone(UTC)
    return now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def orgs_for_user(user: AbstractBaseUser) -> QuerySet[Organization]:
    """The user's organisations, each annotated with the user's `role` there."""
    # One filter() call: the F() below reads the same (user's) membership row it filtered on.
    return (
        Organization.objects.filter(memberships__user=user)
        .annotate(role=F("memberships__role"))
        .order_by("name", "id")
    )


def orgs_for_management_key(key: ManagementKey) -> QuerySet[Organization]:
    return Organization.objects.filter(pk=key.org_id).annotate(
        role=Value(Membership.Role.OWNER.value)
    )


def api_keys_for_org(
    org: Organization, *, status: str | None = None, now: datetime | None = None
) -> QuerySet[ApiKey]:
    """The org's inference keys, annotated with `month_spend_nano` (this UTC calendar month)
    and `period_spend_nano` (the current period of the key's spend cap: month, day or total)."""
    start = month_start(now)
    day = start.replace(day=(now or timezone.now()).astimezone(UTC).day)

    def spent(since: datetime | None) -> Coalesce:
        # Through the reverse relation (billing's UsageRecord.api_key, related_name
        # "usage_records") rather than an import of billing's model: accounts sits below
        # billing. The filter comes before the Sum, so the Sum covers only the filtered rows.
        rows = ApiKey.objects.filter(pk=OuterRef("pk"))
        if since is not None:
            rows = rows.filter(usage_records__created_at__gte=since)
        total = (
            rows.order_by()
            .values("pk")
            .annotate(total=Sum("usage_records__cost_nano"))
            .values("total")
        )
        return Coalesce(
            Subquery(total, output_field=BigIntegerField()), Value(0, BigIntegerField())
        )

    keys = ApiKey.objects.filter(org=org).annotate(
        month_spend_nano=spent(start),
        period_spend_nano=Case(
            When(spend_cap_period=ApiKey.CapPeriod.DAY, then=spent(day)),
            When(spend_cap_period=ApiKey.CapPeriod.TOTAL, then=spent(None)),
            default=F("month_spend_nano"),
            output_field=BigIntegerField(),
        ),
    )
    if status == "active":
        keys = keys.filter(revoked_at__isnull=True)
    elif status == "revoked":
        keys = keys.filter(revoked_at__isnull=False)
    return keys.order_by("-created_at", "-id")


def get_api_key(org: Organization, key_id: int) -> ApiKey | None:
    return api_keys_for_org(org).filter(pk=key_id).first()


def management_keys_for_org(org: Organization) -> QuerySet[ManagementKey]:
    return (
        ManagementKey.objects.filter(org=org)
        .select_related("created_by")
        .order_by("-created_at", "-id")
    )


def get_management_key(org: Organization, key_id: int) -> ManagementKey | None:
    return management_keys_for_org(org).filter(pk=key_id).first()
