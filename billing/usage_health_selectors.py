"""Reads behind the usage page's error rate and latency tables (issue 16 item 7): per model and
per key, from the request log (every authenticated request, refused and failed ones included).

- Error rate: requests that ended in an error (status "error": refused or failed, as the
  client saw it) ÷ all requests. A collapsed refusal row counts its `count`. A client that
  disconnected is not an error of the service.
- TTFT p50 / p95: nearest-rank percentiles (PostgreSQL's `percentile_disc`: the smallest
  observed TTFT whose cumulative share of the group's TTFTs reaches p), over the requests that
  produced a first token. Requests without a TTFT (refusals, failures before the first token)
  do not enter them. On SQLite (the embedded default, no ordered-set aggregates) the same rank
  is taken in Python over the period's TTFTs.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db import connection
from django.db.models import Aggregate, FloatField, Q, QuerySet, Sum

from accounts.models import Organization
from billing.dashboard_selectors import NO_FILTERS, Period, UsageFilters, key_labels
from billing.models import RequestLog

PERCENTILES = (Decimal("0.5"), Decimal("0.95"))
GROUPS = {"model": "model_id", "key": "api_key_id"}
NO_MODEL = "(no model: refused before one was known)"


class PercentileDisc(Aggregate):
    """`percentile_disc(p) WITHIN GROUP (ORDER BY expr)` (PostgreSQL; NULLs are ignored)."""

    function = "PERCENTILE_DISC"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = FloatField()

    def __init__(self, expression: str, fraction: Decimal) -> None:
        # A constant of this module, never input: formatted into the SQL as a literal.
        super().__init__(expression, fraction=format(Decimal(fraction), "f"))


def nearest_rank(ordered: Sequence[int], fraction: Decimal) -> int | None:
    """percentile_disc over ascending `ordered`: the first value whose cumulative share ≥ p."""
    if not ordered:
        return None
    rank = max(1, math.ceil(Decimal(len(ordered)) * fraction))
    return ordered[rank - 1]


@dataclass(frozen=True, slots=True)
class Health:
    label: str
    requests: int  # every request, collapsed refusals counted
    errors: int
    ttft_p50_ms: int | None
    ttft_p95_ms: int | None

    @property
    def error_rate(self) -> Decimal | None:
        return Decimal(self.errors) / Decimal(self.requests) if self.requests else None


def _rows(org: Organization, period: Period, filters: UsageFilters) -> QuerySet[RequestLog]:
    rows = RequestLog.objects.filter(
        org=org, created_at__gte=period.start, created_at__lt=period.end
    )
    return filters.apply(rows).order_by()


def health(
    org: Organization, period: Period, by: str = "model", filters: UsageFilters = NO_FILTERS
) -> list[Health]:
    """Error rate and TTFT p50/p95 per model (the canonical one) or per key; most requests
    first."""
    if by not in GROUPS:
        raise ValueError(f"by must be one of {tuple(GROUPS)}")
    group = GROUPS[by]
    rows = _rows(org, period, filters).values(group)
    counts = rows.annotate(n=Sum("count"), errors=Sum("count", filter=Q(status="error")))
    if connection.vendor == "postgresql":
        p50, p95 = PERCENTILES
        stats: dict[Any, tuple[int | None, int | None]] = {
            r[group]: (_ms(r["p50"]), _ms(r["p95"]))
            for r in rows.filter(ttft_ms__isnull=False).annotate(
                p50=PercentileDisc("ttft_ms", p50), p95=PercentileDisc("ttft_ms", p95)
            )
        }
    else:
        stats = _percentiles_in_python(rows, group)
    labels = key_labels(org) if by == "key" else {}
    out = []
    for r in counts:
        ident = r[group]
        label = labels.get(ident, f"key {ident}") if by == "key" else ident or NO_MODEL
        p50_ms, p95_ms = stats.get(ident, (None, None))
        out.append(Health(label, r["n"] or 0, r["errors"] or 0, p50_ms, p95_ms))
    return sorted(out, key=lambda h: (-h.requests, h.label))


def _ms(value: float | None) -> int | None:
    return None if value is None else int(value)


def _percentiles_in_python(
    rows: QuerySet[RequestLog], group: str
) -> dict[Any, tuple[int | None, int | None]]:
    ttfts: dict[Any, list[int]] = defaultdict(list)
    values = rows.filter(ttft_ms__isnull=False).values_list(group, "ttft_ms")
    for ident, ttft in values.iterator():
        ttfts[ident].append(ttft)
    p50, p95 = PERCENTILES
    out = {}
    for ident, values_ms in ttfts.items():
        values_ms.sort()
        out[ident] = (nearest_rank(values_ms, p50), nearest_rank(values_ms, p95))
    return out
