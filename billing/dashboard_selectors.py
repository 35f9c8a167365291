"""Reads behind the usage, requests and balance pages. Every function takes the org first.

Days are UTC calendar days (TIME_ZONE is UTC), the same days the spend cap's month uses.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django.db.models import Count, F, QuerySet, Sum
from django.db.models.fields.json import KT
from django.db.models.functions import TruncDate, TruncHour
from django.utils import timezone

from accounts.models import ApiKey, Organization
from billing.live import build_row
from billing.models import LedgerEntry, RequestLog, UsageRecord
from billing.request_log_selectors import canonical_model, request_logs

# Series beyond this many (by cost) are folded into "Other" so a chart legend stays readable.
MAX_SERIES = 7
OTHER = "Other"
SPLITS = ("model", "key")

_TOKENS = (
    F("input_tokens")
    + F("output_tokens")
    + F("cache_read_tokens")
    + F("cache_write_5m_tokens")
    + F("cache_write_1h_tokens")
)


def month_start(now: datetime | None = None) -> datetime:
    now = timezone.localtime(now or timezone.now())
    return now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def _usage(org: Organization) -> QuerySet[UsageRecord]:
    return UsageRecord.objects.filter(org=org)


def month_to_date_spend_nano(org: Organization) -> int:
    total = _usage(org).filter(created_at__gte=month_start()).aggregate(s=Sum("cost_nano"))["s"]
    return total or 0


def key_month_spend(org: Organization) -> dict[int, int]:
    rows = (
        _usage(org)
        .filter(created_at__gte=month_start(), api_key__isnull=False)
        .values("api_key_id")
        .annotate(s=Sum("cost_nano"))
        .order_by()
    )
    return {r["api_key_id"]: r["s"] or 0 for r in rows}


def pending_usage_nano(org: Organization) -> int:
    """Usage recorded but not yet reconciled into the ledger (the balance does not show it yet)."""
    total = _usage(org).filter(ledger_entry__isnull=True).aggregate(s=Sum("cost_nano"))["s"]
    return total or 0


# Reads an org's open holds (nano-USD; None = unavailable). Set by the gateway app at startup
# (gateway.limits.open_holds_nano): the limiter is the gateway's, and billing never imports it.
OpenHoldsReader = Callable[[int], int | None]
_open_holds_reader: OpenHoldsReader | None = None


def set_open_holds_reader(reader: OpenHoldsReader | None) -> None:
    global _open_holds_reader
    _open_holds_reader = reader


def open_holds_nano(org: Organization) -> int | None:
    reader = _open_holds_reader
    return 0 if reader is None else reader(org.pk)


@dataclass(frozen=True)
class Balances:
    """The overview's money: what the ledger says and what can still be spent.

    Available = ledger − usage not yet reconciled − open holds (the worst-case cost the limiter
    holds for requests in flight, released when they settle). `held_nano` is None when the
    limiter cannot be read (Redis down): available then leaves holds out, and the page says so.
    """

    ledger_nano: int  # credits minus reconciled usage (Organization.balance_nano)
    unreconciled_nano: int  # usage recorded, not yet in the ledger (≤ one reconcile interval)
    held_nano: int | None = 0  # open holds of requests in flight

    @property
    def available_nano(self) -> int:
        return self.ledger_nano - self.unreconciled_nano - (self.held_nano or 0)


def balances(org: Organization) -> Balances:
    ledger = Organization.objects.values_list("balance_nano", flat=True).get(pk=org.pk)
    return Balances(
        ledger_nano=ledger,
        unreconciled_nano=pending_usage_nano(org),
        held_nano=open_holds_nano(org),
    )


def requests_since(org: Organization, since: datetime) -> int:
    return _usage(org).filter(created_at__gte=since).count()


# --- Usage report -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Period:
    """Inclusive UTC days [first, last], bucketed by day; or (`hours` > 0) the last `hours`
    whole and current UTC hours up to `until` (exclusive: the start of the next hour),
    bucketed by hour."""

    first: date
    last: date
    hours: int = 0
    until: datetime | None = None

    @classmethod
    def last_days(cls, days: int, today: date | None = None) -> Period:
        today = today or timezone.localdate()
        return cls(first=today - timedelta(days=days - 1), last=today)

    @classmethod
    def last_hours(cls, hours: int = 24, now: datetime | None = None) -> Period:
        """The current hour and the `hours` - 1 before it: "the last 24 h" by the hour."""
        now = timezone.localtime(now or timezone.now())
        until = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
        start = until - timedelta(hours=hours)
        return cls(first=start.date(), last=now.date(), hours=hours, until=until)

    @property
    def hourly(self) -> bool:
        return self.hours > 0

    @property
    def days(self) -> list[date]:
        return [self.first + timedelta(days=i) for i in range((self.last - self.first).days + 1)]

    @property
    def buckets(self) -> list[date] | list[datetime]:
        """The chart's x axis: days, or hours (aware UTC datetimes) for an hourly period."""
        if self.hourly:
            return [self.start + timedelta(hours=i) for i in range(self.hours)]
        return self.days

    @property
    def start(self) -> datetime:
        if self.hourly and self.until is not None:
            return self.until - timedelta(hours=self.hours)
        return timezone.make_aware(datetime.combine(self.first, time.min))

    @property
    def end(self) -> datetime:
        """Exclusive."""
        if self.hourly and self.until is not None:
            return self.until
        return timezone.make_aware(datetime.combine(self.last + timedelta(days=1), time.min))


@dataclass(frozen=True, slots=True)
class UsageFilters:
    """The usage page's key × model filter: one key, one model (an alias finds its canonical
    model), both, or neither."""

    key_id: int | None = None
    model: str = ""

    @property
    def active(self) -> bool:
        return bool(self.key_id or self.model)

    @classmethod
    def of(cls, key_id: int | None, model: str) -> UsageFilters:
        """The filter as asked for, its model name resolved once to the canonical id."""
        return cls(key_id=key_id, model=canonical_model(model) if model.strip() else "")

    def apply(self, records: QuerySet[Any]) -> QuerySet[Any]:
        """Usage records or request-log rows of the key and the model (a canonical id)."""
        if self.key_id:
            records = records.filter(api_key_id=self.key_id)
        if self.model:
            records = records.filter(model_id__iexact=self.model)
        return records


NO_FILTERS = UsageFilters()


def spend_since(org: Organization, since: datetime, filters: UsageFilters = NO_FILTERS) -> int:
    """Cost recorded since `since` (e.g. today's UTC midnight: "spend today")."""
    total = filters.apply(_usage(org).filter(created_at__gte=since)).aggregate(s=Sum("cost_nano"))
    return total["s"] or 0


def today_start(now: datetime | None = None) -> datetime:
    now = timezone.localtime(now or timezone.now())
    return now.replace(hour=0, minute=0, second=0, microsecond=0)


@dataclass(slots=True)
class Series:
    label: str
    cost: list[int]
    tokens: list[int]
    requests: int = 0
    cache_read_tokens: int = 0
    cache_savings_nano: int = 0

    @property
    def total_cost(self) -> int:
        return sum(self.cost)

    @property
    def total_tokens(self) -> int:
        return sum(self.tokens)


@dataclass(slots=True)
class UsageReport:
    period: Period
    split: str
    series: list[Series] = field(default_factory=list)

    @property
    def days(self) -> list[date]:
        return self.period.days

    @property
    def buckets(self) -> list[date] | list[datetime]:
        return self.period.buckets

    @property
    def total_cost(self) -> int:
        return sum(s.total_cost for s in self.series)

    @property
    def total_tokens(self) -> int:
        return sum(s.total_tokens for s in self.series)

    @property
    def total_requests(self) -> int:
        return sum(s.requests for s in self.series)

    @property
    def cache_read_tokens(self) -> int:
        return sum(s.cache_read_tokens for s in self.series)

    @property
    def cache_savings_nano(self) -> int:
        return sum(s.cache_savings_nano for s in self.series)


def key_labels(org: Organization) -> dict[int | None, str]:
    labels: dict[int | None, str] = {None: "(deleted key)"}
    for key_id, name, prefix in ApiKey.objects.filter(org=org).values_list("id", "name", "prefix"):
        labels[key_id] = f"{name} ({prefix}…)" if name else f"{prefix}…"
    return labels


def _savings_nano(cache_read_tokens: int, price_input: Any, price_cache_read: Any) -> Decimal:
    """What the cached tokens would have cost as plain input, minus what they did cost.

    Prices come from the record itself (USD per million tokens), so a later price change never
    changes a past saving; USD/M × tokens × 1e9 / 1e6 = tokens × price × 1000 nano-USD.
    """
    try:
        delta = Decimal(str(price_input)) - Decimal(str(price_cache_read))
    except ArithmeticError:
        return Decimal(0)
    return Decimal(cache_read_tokens) * delta * 1000


savings_nano = _savings_nano  # the one rule, shared with billing/cache_selectors.py


def usage_report(
    org: Organization, period: Period, split: str = "model", filters: UsageFilters = NO_FILTERS
) -> UsageReport:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}")
    group = "model_id" if split == "model" else "api_key_id"
    records = filters.apply(
        _usage(org).filter(created_at__gte=period.start, created_at__lt=period.end)
    )
    bucket = TruncHour("created_at") if period.hourly else TruncDate("created_at")
    daily = (
        records.annotate(day=bucket)
        .values("day", group)
        .annotate(cost=Sum("cost_nano"), tokens=Sum(_TOKENS), n=Count("id"))
        .order_by()
    )
    savings_rows = (
        records.filter(cache_read_tokens__gt=0)
        .values(group, price_input=KT("prices__input"), price_cache_read=KT("prices__cacheRead"))
        .annotate(cached=Sum("cache_read_tokens"))
        .order_by()
    )

    day_index: dict[Any, int] = {d: i for i, d in enumerate(period.buckets)}
    width = len(day_index)
    by_group: dict[Any, Series] = {}
    for row in daily:
        series = by_group.setdefault(
            row[group], Series(label="", cost=[0] * width, tokens=[0] * width)
        )
        day = row["day"]
        if not period.hourly and isinstance(day, datetime):
            day = day.date()
        index = day_index.get(day)
        if index is None:  # cannot happen with UTC days; a row outside the axis is dropped
            continue
        series.cost[index] += row["cost"] or 0
        series.tokens[index] += row["tokens"] or 0
        series.requests += row["n"]
    savings: dict[Any, Decimal] = defaultdict(Decimal)
    for row in savings_rows:
        series = by_group.get(row[group])
        if series is None:
            continue
        series.cache_read_tokens += row["cached"] or 0
        savings[row[group]] += _savings_nano(
            row["cached"] or 0, row["price_input"], row["price_cache_read"]
        )
    for key, amount in savings.items():
        by_group[key].cache_savings_nano = int(amount.quantize(Decimal(1), rounding=ROUND_HALF_UP))

    labels = key_labels(org) if split == "key" else {}
    for key, series in by_group.items():
        series.label = labels.get(key, f"key {key}") if split == "key" else str(key)
    ranked = sorted(by_group.values(), key=lambda s: (-s.total_cost, -s.total_tokens, s.label))
    report = UsageReport(period=period, split=split, series=ranked[:MAX_SERIES])
    if len(ranked) > MAX_SERIES:
        other = Series(label=OTHER, cost=[0] * width, tokens=[0] * width)
        for series in ranked[MAX_SERIES:]:
            other.cost = [a + b for a, b in zip(other.cost, series.cost, strict=True)]
            other.tokens = [a + b for a, b in zip(other.tokens, series.tokens, strict=True)]
            other.requests += series.requests
            other.cache_read_tokens += series.cache_read_tokens
            other.cache_savings_nano += series.cache_savings_nano
        report.series.append(other)
    return report


@dataclass(frozen=True, slots=True)
class CacheHitRate:
    """One model's prompt-cache hit rate: cache reads ÷ cacheable input tokens, where cacheable
    means at or before a request's last cache breakpoint -- read from the cache or written to it
    (the same definition as the cache benchmark's, bench/cache_metrics.py)."""

    model_id: str
    cache_read_tokens: int
    cache_write_tokens: int

    @property
    def cacheable_tokens(self) -> int:
        return self.cache_read_tokens + self.cache_write_tokens

    @property
    def rate(self) -> Decimal | None:
        """None when nothing was cacheable (no breakpoints): a rate of nothing is not 0 %."""
        if not self.cacheable_tokens:
            return None
        return Decimal(self.cache_read_tokens) / Decimal(self.cacheable_tokens)


def cache_hit_rates(
    org: Organization, period: Period, filters: UsageFilters = NO_FILTERS
) -> list[CacheHitRate]:
    """Per model, for the org's usage in the period; most cacheable tokens first."""
    rows = (
        filters.apply(_usage(org).filter(created_at__gte=period.start, created_at__lt=period.end))
        .values("model_id")
        .annotate(
            read=Sum("cache_read_tokens"),
            written=Sum(F("cache_write_5m_tokens") + F("cache_write_1h_tokens")),
        )
        .order_by()
    )
    rates = [CacheHitRate(r["model_id"], r["read"] or 0, r["written"] or 0) for r in rows]
    return sorted(rates, key=lambda r: (-r.cacheable_tokens, r.model_id))


# --- Request log --------------------------------------------------------------------------------


# The request log's sort orders (issue 34): a "-" first is descending. Ties break on the id, so
# pages of equal costs never repeat or skip a row.
SORT_FIELDS = {"time": "created_at", "cost": "cost_nano", "latency": "latency_ms"}
SORTS = tuple(f"{sign}{name}" for name in SORT_FIELDS for sign in ("-", ""))
DEFAULT_SORT = "-time"


@dataclass(frozen=True, slots=True)
class RequestFilters:
    key_id: int | None = None
    model: str = ""
    status: str = ""
    request_id: str = ""
    since: date | None = None  # UTC days, both included
    until: date | None = None
    sort: str = DEFAULT_SORT

    @property
    def active(self) -> bool:
        return bool(
            self.key_id or self.model or self.status or self.request_id or self.since or self.until
        )

    @property
    def newest_first(self) -> bool:
        """Whether live rows belong at the top: newest first, and a range that includes now."""
        return self.sort == DEFAULT_SORT and (
            self.until is None or self.until >= timezone.now().date()
        )

    def ordering(self) -> tuple[str, str]:
        sort = self.sort if self.sort in SORTS else DEFAULT_SORT
        column = SORT_FIELDS[sort.lstrip("-")]
        return (f"-{column}", "-id") if sort.startswith("-") else (column, "id")


def request_log(org: Organization, filters: RequestFilters) -> QuerySet[RequestLog]:
    """Every authenticated request of the org (billing/request_log_selectors.py): the model
    filter matches the canonical model, the id search a full id or a prefix of 8+ characters."""
    return (
        request_logs(
            org,
            key_id=filters.key_id or None,
            model=filters.model.strip() or None,
            status=filters.status or None,
            request_id=filters.request_id.strip() or None,
            since=None if filters.since is None else day_start(filters.since),
            until=None if filters.until is None else day_start(filters.until + timedelta(days=1)),
        )
        .order_by(*filters.ordering())
        .defer("api_key__key_hash")
    )


def day_start(day: date) -> datetime:
    """00:00 UTC of a day (the log's dates are UTC days)."""
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def request_row(record: RequestLog) -> dict[str, Any]:
    key = record.api_key
    return build_row(
        request_id=record.request_id,
        created_at=record.created_at,
        model_id=record.model_id,
        model_name=record.model_name,
        key_id=record.api_key_id,
        key_prefix=key.prefix if key is not None else "",
        status=record.status,
        input_tokens=record.input_tokens,
        output_tokens=record.output_tokens,
        cache_read_tokens=record.cache_read_tokens,
        cache_write_tokens=record.cache_write_tokens,
        cost_nano=record.cost_nano,
        output_exact=record.output_exact,
        latency_ms=record.latency_ms,
        deployment=record.deployment,
        attempts=sum(1 for a in record.attempts or [] if isinstance(a, dict) and "deployment" in a),
        requested_model=record.requested_model,
        http_status=record.http_status,
        error_type=record.error_type,
        error_message=record.error_message,
        count=record.count,
    )


def attempts_summary(attempts: list[Any]) -> str:
    """One line per upstream attempt for the log's tooltip, whatever keys the gateway records."""
    lines = []
    for number, attempt in enumerate(attempts or [], start=1):
        if isinstance(attempt, dict):
            detail = ", ".join(f"{k}={v}" for k, v in attempt.items())
        else:
            detail = str(attempt)
        lines.append(f"{number}. {detail}")
    return "\n".join(lines)


def recent_requests(org: Organization, limit: int = 10) -> list[RequestLog]:
    return list(request_log(org, RequestFilters())[:limit])


# --- Ledger -------------------------------------------------------------------------------------


def ledger_entries(org: Organization) -> QuerySet[LedgerEntry]:
    return LedgerEntry.objects.filter(org=org).order_by("-created_at", "-id")


def ledger_totals(org: Organization) -> dict[str, int]:
    rows = ledger_entries(org).values("kind").annotate(s=Sum("amount_nano")).order_by()
    totals = {kind: 0 for kind in LedgerEntry.Kind.values}
    totals.update({r["kind"]: r["s"] or 0 for r in rows})
    return totals
