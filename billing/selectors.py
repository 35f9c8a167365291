"""Reads of money and usage for the CLI and the dashboard. No writes here (see services.py).

Time windows are on `UsageRecord.created_at` (when the request was recorded, i.e. when it ended),
which is indexed per org; `since` is inclusive and `until` exclusive. Usage figures count every
record, reconciled or not: reconciliation decides when the ledger is debited, not what was used.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from django.db.models import Count, QuerySet, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from accounts.models import ApiKey, Organization
from billing.models import UsageRecord
from catalog.pricing import PRICE_KINDS, Prices, TokenCounts, itemise
from core import money

SUMMARY_FIELDS = (
    "requests",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "cost_nano",
)


def usd_string(nano: int) -> str:
    """Nano-USD as the shortest exact plain decimal: 15500000000 -> "15.5", 0 -> "0".

    The CLI and the management API print money the same way as /api/models (issue 12: plain
    decimals, always); exact to the nano-dollar, never exponent notation."""
    return money.usd_from_nano(nano)


def org_balance_nano(org: Organization) -> int:
    """The org's balance as committed now (the passed instance may be stale)."""
    return Organization.objects.values_list("balance_nano", flat=True).get(pk=org.pk)


def unreconciled_cost_nano(org: Organization) -> int:
    """Usage recorded but not yet debited from the balance (at most one reconcile interval)."""
    return UsageRecord.objects.filter(org=org, ledger_entry__isnull=True).aggregate(
        total=Coalesce(Sum("cost_nano"), 0)
    )["total"]


def _window(
    qs: QuerySet[UsageRecord], since: datetime | None, until: datetime | None
) -> QuerySet[UsageRecord]:
    if since is not None:
        qs = qs.filter(created_at__gte=since)
    if until is not None:
        qs = qs.filter(created_at__lt=until)
    return qs


def usage_summary(
    org: Organization, since: datetime | None = None, until: datetime | None = None
) -> dict[str, int]:
    """Totals of the org's usage in [since, until): the keys of `SUMMARY_FIELDS`, all ints.

    `cache_write_tokens` is 5-minute plus 1-hour cache writes.
    """
    qs = _window(UsageRecord.objects.filter(org=org), since, until)
    sums: dict[str, Any] = qs.aggregate(
        requests=Count("id"),
        input_tokens=Coalesce(Sum("input_tokens"), 0),
        output_tokens=Coalesce(Sum("output_tokens"), 0),
        cache_read_tokens=Coalesce(Sum("cache_read_tokens"), 0),
        cache_write_5m=Coalesce(Sum("cache_write_5m_tokens"), 0),
        cache_write_1h=Coalesce(Sum("cache_write_1h_tokens"), 0),
        reasoning_tokens=Coalesce(Sum("reasoning_tokens"), 0),
        cost_nano=Coalesce(Sum("cost_nano"), 0),
    )
    sums["cache_write_tokens"] = sums.pop("cache_write_5m") + sums.pop("cache_write_1h")
    return {name: int(sums[name]) for name in SUMMARY_FIELDS}


def month_start(now: datetime | None = None) -> datetime:
    """Midnight UTC on the first day of `now`'s calendar month (spend caps are per UTC month)."""
    now = (now or timezone.now()).astimezone(UTC)
    return now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def month_to_date_spend(owner: Organization | ApiKey, now: datetime | None = None) -> int:
    """Nano-USD spent this calendar month (UTC) by an org or by one API key."""
    if isinstance(owner, Organization):
        qs = UsageRecord.objects.filter(org=owner)
    elif isinstance(owner, ApiKey):
        qs = UsageRecord.objects.filter(api_key=owner)
    else:
        raise TypeError(f"expected an Organization or ApiKey, got {type(owner).__name__}")
    return qs.filter(created_at__gte=month_start(now)).aggregate(
        total=Coalesce(Sum("cost_nano"), 0)
    )["total"]


def itemised_cost(record: UsageRecord) -> dict[str, Any]:
    """How a record's cost adds up: tokens × the applied tier's price per kind (exact), the
    tier and price version applied, and the total rounded once to nano-USD (= cost_nano)."""
    prices = record.prices or {}
    tokens = TokenCounts(
        input=record.input_tokens,
        output=record.output_tokens,
        cache_read=record.cache_read_tokens,
        cache_write_5m=record.cache_write_5m_tokens,
        cache_write_1h=record.cache_write_1h_tokens,
    )
    applied = Prices.from_decimals(*(Decimal(str(prices.get(k, "0"))) for k in PRICE_KINDS))
    return {
        "price_version": record.price_version,
        "up_to_prompt_tokens": prices.get("upToPromptTokens"),
        "prompt_tokens": tokens.prompt,
        "items": [
            {
                "kind": item.kind,
                "tokens": item.tokens,
                "usd_per_mtok": money.usd_per_mtok(item.price_micro),
                "usd": money.usd_from_pico(item.amount_pico),
                "usd_text": money.usd_cost_pico(item.amount_pico),  # the page's one rule
            }
            for item in itemise(tokens, applied)
        ],
        "total_nano": record.cost_nano,
    }
