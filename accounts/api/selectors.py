"""Reads for the management API's organisation and key endpoints."""

from __future__ import annotations

from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import BigIntegerField, F, OuterRef, QuerySet, Subquery, Sum, Value
from django.db.models.functions import Coalesce

from accounts.models import ApiKey, ManagementKey, Membership, Organization
from billing.api.selectors import month_start
from billing.models import UsageRecord


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
    """The org's inference keys, annotated with `month_spend_nano` (this UTC calendar month)."""
    spend = (
        UsageRecord.objects.filter(api_key=OuterRef("pk"), created_at__gte=month_start(now))
        .order_by()
        .values("api_key")
        .annotate(total=Sum("cost_nano"))
        .values("total")
    )
    keys = ApiKey.objects.filter(org=org).annotate(
        month_spend_nano=Coalesce(
            Subquery(spend, output_field=BigIntegerField()), Value(0, BigIntegerField())
        )
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
