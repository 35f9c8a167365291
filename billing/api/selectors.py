"""Reads over usage records and the ledger, always scoped to one organisation.

Time ranges filter on `created_at` (when the request was recorded), the column the
`(org, -created_at)` index covers; `since` is inclusive and `until` exclusive.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db.models import BigIntegerField, Count, OuterRef, Q, QuerySet, Subquery, Sum, Value
from django.db.models.functions import Coalesce, TruncDate
from django.utils import timezone

from accounts.api.selectors import month_start
from accounts.models import Organization
from billing.models import LedgerEntry, UsageRecord

TOKEN_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_5m_tokens",
    "cache_write_1h_tokens",
    "reasoning_tokens",
)
GROUP_BY_CHOICES = ("day", "model", "key")


def _in_range(qs: QuerySet[Any], since: datetime | None, until: datetime | None) -> QuerySet[Any]:
    if since is not None:
        qs = qs.filter(created_at__gte=since)
    if until is not None:
        qs = qs.filter(created_at__lt=until)
    return qs


def usage_records(
    org: Organization,
    *,
    key_id: int | None = None,
    key_prefix: str | None = None,
    model: str | None = None,
    status: str | None = None,
    request_id: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> QuerySet[UsageRecord]:
    """The org's request log, newest first. `model` matches the canonical id or the alias sent."""
    qs = UsageRecord.objects.filter(org=org).select_related("api_key")
    if key_id is not None:
        qs = qs.filter(api_key_id=key_id)
    if key_prefix is not None:
        qs = qs.filter(api_key__prefix=key_prefix)
    if model is not None:
        qs = qs.filter(Q(model_id=model) | Q(model_name=model))
    if status is not None:
        qs = qs.filter(status=status)
    if request_id is not None:
        qs = qs.filter(request_id=request_id)
    return _in_range(qs, since, until).order_by("-created_at", "-id")


@dataclass(frozen=True, slots=True)
class UsageSummary:
    group_by: str
    since: datetime | None
    until: datetime | None
    totals: dict[str, Any]
    rows: list[dict[str, Any]]


def _sums() -> dict[str, Any]:
    return {
        "requests": Count("id"),
        "cost_nano": Coalesce(Sum("cost_nano"), Value(0, BigIntegerField())),
        **{name: Coalesce(Sum(name), Value(0, BigIntegerField())) for name in TOKEN_FIELDS},
    }


def usage_summary(
    org: Organization,
    *,
    group_by: str,
    since: datetime | None = None,
    until: datetime | None = None,
    key_id: int | None = None,
) -> UsageSummary:
    """Requests, tokens by kind and cost per UTC day, per model (canonical id) or per key;
    `key_id` narrows it to one key (its spend per day: issue 34)."""
    if group_by not in GROUP_BY_CHOICES:
        raise ValueError(f"group_by must be one of {', '.join(GROUP_BY_CHOICES)}")
    # order_by() clears the model's default ordering, which would otherwise split the groups.
    records = UsageRecord.objects.filter(org=org)
    if key_id is not None:
        records = records.filter(api_key_id=key_id)
    base = _in_range(records, since, until).order_by()
    totals = base.aggregate(**_sums())
    rows: list[dict[str, Any]]
    if group_by == "day":
        grouped = (
            base.annotate(day=TruncDate("created_at", tzinfo=UTC))
            .values("day")
            .annotate(**_sums())
            .order_by("day")
        )
        rows = [{**row, "group": row["day"].isoformat()} for row in grouped]
    elif group_by == "model":
        grouped = base.values("model_id").annotate(**_sums()).order_by("-cost_nano", "model_id")
        rows = [{**row, "group": row["model_id"]} for row in grouped]
    else:
        grouped = (
            base.values("api_key_id", "api_key__prefix", "api_key__name")
            .annotate(**_sums())
            .order_by("-cost_nano", "api_key_id")
        )
        rows = [
            {
                **row,
                # Usage of a deleted key stays billable; it forms its own group (null).
                "group": None if row["api_key_id"] is None else str(row["api_key_id"]),
                "key_id": row["api_key_id"],
                "key_prefix": row["api_key__prefix"],
                "key_name": row["api_key__name"],
            }
            for row in grouped
        ]
    return UsageSummary(group_by=group_by, since=since, until=until, totals=totals, rows=rows)


def ledger_entries(
    org: Organization,
    *,
    kind: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> QuerySet[LedgerEntry]:
    qs = LedgerEntry.objects.filter(org=org)
    if kind is not None:
        qs = qs.filter(kind=kind)
    return _in_range(qs, since, until).order_by("-created_at", "-id")


@dataclass(frozen=True, slots=True)
class Balance:
    ledger_balance_nano: int
    unreconciled_usage_nano: int
    month_to_date_spend_nano: int
    month_start: datetime
    as_of: datetime

    @property
    def balance_nano(self) -> int:
        """What is left: the ledger minus usage recorded but not yet reconciled into it."""
        return self.ledger_balance_nano - self.unreconciled_usage_nano


def balance(org: Organization, *, now: datetime | None = None) -> Balance:
    now = now or timezone.now()
    start = month_start(now)

    def total(**filters: Any) -> Coalesce:
        sums = (
            UsageRecord.objects.filter(org=OuterRef("pk"), **filters)
            .order_by()
            .values("org")
            .annotate(total=Sum("cost_nano"))
            .values("total")
        )
        return Coalesce(Subquery(sums, output_field=BigIntegerField()), Value(0, BigIntegerField()))

    # One statement, so the balance and the unreconciled sum come from the same snapshot: the
    # reconciler moves cost from one to the other in a single transaction.
    row = (
        Organization.objects.filter(pk=org.pk)
        .annotate(
            unreconciled=total(ledger_entry__isnull=True),
            month_spend=total(created_at__gte=start),
        )
        .values("balance_nano", "unreconciled", "month_spend")
        .get()
    )
    return Balance(
        ledger_balance_nano=row["balance_nano"],
        unreconciled_usage_nano=row["unreconciled"],
        month_to_date_spend_nano=row["month_spend"],
        month_start=start,
        as_of=now,
    )
