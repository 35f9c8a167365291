"""Prompt-cache figures per model or per key (issue 34), for the usage page and the management
API alike: cache-read tokens, the hit rate (cache-read ÷ all input) and the money the cache
saved (what the cache-read tokens would have cost at the record's input price, minus what they
cost at its cache-read price). Prices come from each usage record, so a later price change never
rewrites a past saving.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django.db.models import F, QuerySet, Sum
from django.db.models.fields.json import KT

from accounts.models import Organization
from billing.dashboard_selectors import key_labels, savings_nano
from billing.models import UsageRecord

GROUPS = ("model", "key")
_ALL_INPUT = (
    F("input_tokens")
    + F("cache_read_tokens")
    + F("cache_write_5m_tokens")
    + F("cache_write_1h_tokens")
)


@dataclass(slots=True)
class CacheFigures:
    group: str | None  # the canonical model id, or the key id as text (None: a deleted key)
    label: str
    input_tokens: int = 0  # all input: uncached + cache read + cache write
    cache_read_tokens: int = 0
    saved_nano: int = 0

    @property
    def hit_rate(self) -> Decimal | None:
        """Cache-read ÷ all input; None without input."""
        if not self.input_tokens:
            return None
        return Decimal(self.cache_read_tokens) / Decimal(self.input_tokens)


@dataclass(frozen=True, slots=True)
class CacheReport:
    group_by: str
    rows: list[CacheFigures]
    total: CacheFigures


def prompt_cache(records: QuerySet[UsageRecord], org: Organization, group_by: str) -> CacheReport:
    """The figures of `records` (already narrowed to the org, a period, filters) per group,
    most cache-read tokens first."""
    if group_by not in GROUPS:
        raise ValueError(f"group_by must be one of {', '.join(GROUPS)}")
    field = "model_id" if group_by == "model" else "api_key_id"
    rows: dict[Any, CacheFigures] = {}
    for row in (
        records.values(field)
        .annotate(inp=Sum(_ALL_INPUT), read=Sum("cache_read_tokens"))
        .order_by()
    ):
        rows[row[field]] = CacheFigures(
            group=None if row[field] is None else str(row[field]),
            label="",
            input_tokens=row["inp"] or 0,
            cache_read_tokens=row["read"] or 0,
        )
    saved: dict[Any, Decimal] = defaultdict(Decimal)
    priced = (
        records.filter(cache_read_tokens__gt=0)
        .values(field, price_input=KT("prices__input"), price_cache_read=KT("prices__cacheRead"))
        .annotate(cached=Sum("cache_read_tokens"))
        .order_by()
    )
    for row in priced:
        saved[row[field]] += savings_nano(
            row["cached"] or 0, row["price_input"], row["price_cache_read"]
        )
    labels = key_labels(org) if group_by == "key" else {}
    for group, figures in rows.items():
        figures.saved_nano = int(saved[group].quantize(Decimal(1), rounding=ROUND_HALF_UP))
        figures.label = labels.get(group, f"key {group}") if group_by == "key" else str(group)
    ranked = sorted(rows.values(), key=lambda f: (-f.cache_read_tokens, -f.input_tokens, f.label))
    total = CacheFigures(
        group=None,
        label="Total",
        input_tokens=sum(f.input_tokens for f in ranked),
        cache_read_tokens=sum(f.cache_read_tokens for f in ranked),
        saved_nano=sum(f.saved_nano for f in ranked),
    )
    return CacheReport(group_by=group_by, rows=ranked, total=total)


def org_records(
    org: Organization, since: datetime | None = None, until: datetime | None = None
) -> QuerySet[UsageRecord]:
    records = UsageRecord.objects.filter(org=org)
    if since is not None:
        records = records.filter(created_at__gte=since)
    if until is not None:
        records = records.filter(created_at__lt=until)
    return records
