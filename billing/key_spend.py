"""A key's spend over time beside its cap (issue 34): per UTC day, what the cap is compared with
on that day. A daily cap compares each day's spend; a monthly cap the month to date (from 0 on
the 1st); a total cap everything spent up to that day. So a bar reaching the cap's line is a
day the key was (or would have been) refused with 402.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from django.db.models import Sum
from django.db.models.functions import TruncDate

from accounts.models import ApiKey
from billing.models import UsageRecord


def counted_against_cap(
    days: Sequence[date], daily_nano: Sequence[int], period: str, before_nano: int
) -> list[int]:
    """Pure. `before_nano`: what counts at the start of `days[0]` (the month so far before it,
    or everything before it for a total cap; ignored for a daily cap)."""
    out: list[int] = []
    running = 0 if period == "day" else before_nano
    for day, spent in zip(days, daily_nano, strict=True):
        if period == "day":
            running = spent
        else:
            if period == "month" and day.day == 1 and out:
                running = 0  # a new cap month
            running += spent
        out.append(running)
    return out


@dataclass(frozen=True, slots=True)
class KeySpend:
    key: ApiKey
    days: list[date]
    daily_nano: list[int]
    counted_nano: list[int]  # against the cap, per day

    @property
    def label(self) -> str:
        return "counted against the cap" if self.key.spend_cap_nano is not None else "spend"

    @property
    def cost(self) -> list[int]:  # the chart's series protocol (label, cost)
        return self.counted_nano


def _midnight(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def key_spend(key: ApiKey, days: Sequence[date]) -> KeySpend:
    """The key's spend per UTC day over `days` (consecutive), and what its cap counted."""
    days = list(days)
    records = UsageRecord.objects.filter(api_key=key)
    start, end = _midnight(days[0]), _midnight(days[-1] + timedelta(days=1))
    per_day = {
        row["day"]: row["total"] or 0
        for row in records.filter(created_at__gte=start, created_at__lt=end)
        .annotate(day=TruncDate("created_at"))
        .values("day")
        .annotate(total=Sum("cost_nano"))
        .order_by()
    }
    daily = [per_day.get(d, 0) for d in days]
    period = key.spend_cap_period or "month"
    if period == "month":
        before = records.filter(
            created_at__gte=_midnight(days[0].replace(day=1)), created_at__lt=start
        )
    elif period == "total":
        before = records.filter(created_at__lt=start)
    else:
        before = records.none()
    before_nano = before.aggregate(total=Sum("cost_nano"))["total"] or 0
    return KeySpend(key, days, daily, counted_against_cap(days, daily, period, before_nano))
