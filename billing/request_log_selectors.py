"""Reads of the request log (every authenticated request, billed or not), always one org's.

Shared by the management API, the dashboard and the admin: the filtered list, one request with
its receipt and timeline, and the CSV export's row iterator (flat memory at any size).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Q, QuerySet

from accounts.models import Organization
from billing.models import LedgerEntry, RequestLog, UsageRecord
from billing.selectors import itemised_cost
from core import money

# A prefix shorter than this would match too much of an org's history to be an id search.
MIN_ID_PREFIX = 8
CSV_CHUNK = 2000


def canonical_model(name: str) -> str:
    """The canonical id an alias or id names (any case, trimmed), or the name itself."""
    from catalog.models import Model, ModelAlias

    normalised = name.strip().lower()
    found = Model.objects.filter(id__iexact=normalised).values_list("id", flat=True).first()
    if found:
        return str(found)
    alias = ModelAlias.objects.filter(alias=normalised).values_list("model_id", flat=True).first()
    return str(alias) if alias else name.strip()


def request_logs(
    org: Organization,
    *,
    key_id: int | None = None,
    key_prefix: str | None = None,
    model: str | None = None,
    status: str | None = None,
    http_status: int | None = None,
    request_id: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> QuerySet[RequestLog]:
    """The org's request log, newest first. `model` matches the canonical model (so an alias
    finds every request to its model, whatever name they sent) and the name sent; `request_id`
    is the full id or a prefix of at least MIN_ID_PREFIX characters."""
    qs = RequestLog.objects.filter(org=org).select_related("api_key")
    if key_id is not None:
        qs = qs.filter(api_key_id=key_id)
    if key_prefix is not None:
        qs = qs.filter(api_key__prefix=key_prefix)
    if model:
        canonical = canonical_model(model)
        qs = qs.filter(
            Q(model_id__iexact=canonical)
            | Q(requested_model__iexact=canonical)
            | Q(model_name__iexact=model.strip())
        )
    if status:
        qs = qs.filter(status=status)
    if http_status is not None:
        qs = qs.filter(http_status=http_status)
    if request_id:
        rid = request_id.strip()
        # A full id of any length, or a prefix long enough to be one request's (or a few).
        qs = (
            qs.filter(request_id__startswith=rid)
            if len(rid) >= MIN_ID_PREFIX
            else qs.filter(request_id=rid)
        )
    if since is not None:
        qs = qs.filter(created_at__gte=since)
    if until is not None:
        qs = qs.filter(created_at__lt=until)
    return qs.order_by("-created_at", "-id")


def find_request(org: Organization, request_id: str) -> RequestLog | None:
    """One request of the org by its id (the latest row if a caller reused the id); None for
    another org's id, so a foreign id is a 404 exactly like an unknown one."""
    return (
        RequestLog.objects.filter(org=org, request_id=request_id)
        .select_related("api_key")
        .order_by("-created_at", "-id")
        .first()
    )


def usage_by_request_id(org: Organization, request_ids: list[str]) -> dict[str, UsageRecord]:
    """The org's usage records of these requests (the billed ones), by request id."""
    if not request_ids:
        return {}
    records = UsageRecord.objects.filter(org=org, request_id__in=set(request_ids))
    return {r.request_id: r for r in records}


@dataclass(frozen=True, slots=True)
class Receipt:
    """What one request cost and how it was charged."""

    billed: bool
    cost_nano: int
    itemised: dict[str, Any] | None  # token class × price (version, tier) = cost
    hold_nano: int
    released_nano: int  # the hold given back at settlement (hold − cost)
    ledger_entry: LedgerEntry | None  # the debit that charged it (None until reconciled)
    recorded_at: datetime | None
    reconciled_at: datetime | None


def receipt(org: Organization, row: RequestLog) -> Receipt:
    usage = (
        UsageRecord.objects.filter(org=org, request_id=row.request_id)
        .select_related("ledger_entry")
        .first()
    )
    if usage is None:
        return Receipt(False, 0, None, row.hold_nano, row.hold_nano, None, None, None)
    entry = usage.ledger_entry
    return Receipt(
        billed=True,
        cost_nano=usage.cost_nano,
        itemised=itemised_cost(usage),
        hold_nano=row.hold_nano,
        released_nano=max(row.hold_nano - usage.cost_nano, 0),
        ledger_entry=entry,
        recorded_at=usage.created_at,
        reconciled_at=entry.created_at if entry is not None else None,
    )


def timeline(row: RequestLog, rec: Receipt) -> list[dict[str, Any]]:
    """received, admitted, each attempt, first token, last token, recorded, reconciled: each
    with its offset from receipt (ms) where the gateway measured it."""
    start = row.started_at
    steps: list[dict[str, Any]] = [{"step": "received", "at": start, "ms": 0, "detail": ""}]
    if row.admitted_ms is not None:
        steps.append(
            {
                "step": "admitted",
                "at": start + timedelta(milliseconds=row.admitted_ms),
                "ms": row.admitted_ms,
                "detail": f"hold {money.usd_cost(row.hold_nano)}" if row.hold_nano else "",
            }
        )
    for number, attempt in enumerate(row.attempts or [], start=1):
        if not isinstance(attempt, dict):
            continue
        what = attempt.get("deployment") or attempt.get("model") or ""
        ttfb = attempt.get("ttfb_ms")
        detail = f"{what}: {attempt.get('outcome', '')}"
        if attempt.get("status"):
            detail += f" (HTTP {attempt['status']})"
        if ttfb is not None:
            detail += f", headers after {ttfb} ms"
        steps.append({"step": f"attempt {number}", "at": None, "ms": None, "detail": detail})
    if row.ttft_ms is not None:
        steps.append(
            {
                "step": "first token",
                "at": start + timedelta(milliseconds=row.ttft_ms),
                "ms": row.ttft_ms,
                "detail": "",
            }
        )
    last = "last token" if row.status != RequestLog.Status.ERROR else "answered (error)"
    steps.append(
        {
            "step": last,
            "at": start + timedelta(milliseconds=row.latency_ms),
            "ms": row.latency_ms,
            "detail": f"HTTP {row.http_status}",
        }
    )
    if rec.recorded_at is not None:
        steps.append({"step": "recorded", "at": rec.recorded_at, "ms": None, "detail": ""})
    if rec.reconciled_at is not None:
        entry = rec.ledger_entry
        detail = f"ledger entry {entry.reference}" if entry is not None else ""
        steps.append({"step": "reconciled", "at": rec.reconciled_at, "ms": None, "detail": detail})
    return steps


def output_tokens_per_second(row: RequestLog) -> float | None:
    """Output tokens over the time from the first token to the last (streams and replies)."""
    if not row.output_tokens or row.ttft_ms is None:
        return None
    seconds = (row.latency_ms - row.ttft_ms) / 1000
    if seconds <= 0:
        return None
    return round(row.output_tokens / seconds, 1)


CSV_HEADER = (
    "time", "request_id", "status", "http_status", "error_type", "error_message", "api",
    "model_sent", "model", "requested_model", "key_prefix", "stream", "ttft_ms", "latency_ms",
    "attempts", "finish_reason", "input_tokens", "output_tokens", "cache_read_tokens",
    "cache_write_5m_tokens", "cache_write_1h_tokens", "reasoning_tokens", "cost_usd", "count",
    "cost_nano",
)  # fmt: skip


def csv_lines(qs: QuerySet[RequestLog]) -> Iterator[str]:
    """The CSV export, a line at a time: keyset pages of CSV_CHUNK rows by (created_at, id), so
    memory stays flat whatever the range (no OFFSET scans, no server-side cursor held open
    across the response's writes)."""
    buffer = io.StringIO()
    out = csv.writer(buffer)

    def flush() -> str:
        text = buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
        return text

    out.writerow(CSV_HEADER)
    yield flush()
    base = qs.order_by("-created_at", "-id").values_list(
        "created_at", "id", "request_id", "status", "http_status", "error_type",
        "error_message", "api", "model_name", "model_id", "requested_model",
        "api_key__prefix", "stream", "ttft_ms", "latency_ms", "attempts", "finish_reason",
        "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_5m_tokens",
        "cache_write_1h_tokens", "reasoning_tokens", "cost_nano", "count",
    )  # fmt: skip
    after: tuple[datetime, int] | None = None
    while True:
        page = base
        if after is not None:
            page = page.filter(Q(created_at__lt=after[0]) | Q(created_at=after[0], id__lt=after[1]))
        rows = list(page[:CSV_CHUNK])
        if not rows:
            return
        for r in rows:
            attempts = r[15] or []
            out.writerow(
                (
                    r[0].isoformat(), r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10],
                    r[11] or "", "true" if r[12] else "false", "" if r[13] is None else r[13],
                    r[14], sum(1 for a in attempts if isinstance(a, dict) and "deployment" in a),
                    r[16], r[17], r[18], r[19], r[20], r[21], r[22],
                    money.cost_number(r[23]), r[24], r[23],
                )
            )  # fmt: skip
        yield flush()
        after = (rows[-1][0], rows[-1][1])
