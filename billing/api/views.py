"""Management API views over money: usage summaries, the request log, balance and ledger.

Read-only, so members and owners alike may call them (management keys too).
"""

from __future__ import annotations

from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.api.base import OrgScopedAPIView, parse_query
from billing import cache_selectors as cache
from billing import request_log_selectors as log
from billing.api import selectors
from billing.api.serializers import (
    BalanceSerializer,
    CacheQuerySerializer,
    CacheReportSerializer,
    LedgerEntrySerializer,
    LedgerQuerySerializer,
    RequestDetailSerializer,
    RequestLogEntrySerializer,
    RequestLogQuerySerializer,
    UsageQuerySerializer,
    UsageSummarySerializer,
)


class UsageSummaryView(OrgScopedAPIView):
    """Usage totals and rows per UTC day, model or key."""

    @extend_schema(
        operation_id="usage_summary",
        summary="Usage summary per day, model or key",
        description="Requests, tokens by kind and cost over `since` ≤ time < `until`.",
        tags=["usage"],
        parameters=[UsageQuerySerializer],
        responses=UsageSummarySerializer,
    )
    def get(self, request: Request, org_id: int) -> Response:
        query = parse_query(UsageQuerySerializer, request)
        summary = selectors.usage_summary(
            self.org,
            group_by=query["group_by"],
            since=query.get("since"),
            until=query.get("until"),
            key_id=query.get("key_id"),
        )
        return Response(UsageSummarySerializer(summary).data)


class PromptCacheView(OrgScopedAPIView):
    """Prompt-cache figures per model or per key (issue 34)."""

    @extend_schema(
        operation_id="usage_prompt_cache",
        summary="Prompt-cache figures per model or key",
        description="Cache-read tokens, hit rate (cache read ÷ all input) and the money the "
        "cache saved, over `since` ≤ time < `until`.",
        tags=["usage"],
        parameters=[CacheQuerySerializer],
        responses=CacheReportSerializer,
    )
    def get(self, request: Request, org_id: int) -> Response:
        query = parse_query(CacheQuerySerializer, request)
        records = cache.org_records(self.org, query.get("since"), query.get("until"))
        report = cache.prompt_cache(records, self.org, query["group_by"])
        return Response(CacheReportSerializer(report).data)


class RequestLogView(OrgScopedAPIView):
    """The request log: every authenticated request (answered, refused or failed), newest
    first."""

    @extend_schema(
        operation_id="requests_list",
        summary="Request log, newest first",
        description="Every authenticated request, answered, refused or failed. Filter errors "
        "with `status=error` or one status with `http_status=429`.",
        tags=["usage"],
        parameters=[RequestLogQuerySerializer],
        responses=RequestLogEntrySerializer(many=True),
    )
    def get(self, request: Request, org_id: int) -> Response:
        query = parse_query(RequestLogQuerySerializer, request)
        rows = self.paginate_queryset(log.request_logs(self.org, **query)) or []
        # The billed rows' usage records in one query: each row's itemised cost.
        usage = log.usage_by_request_id(self.org, [r.request_id for r in rows])
        data = RequestLogEntrySerializer(rows, many=True, context={"usage": usage}).data
        return self.get_paginated_response(data)


class RequestDetailView(OrgScopedAPIView):
    """One request with its receipt and timeline. Another org's request id is a 404."""

    @extend_schema(
        operation_id="requests_retrieve",
        summary="One request with its receipt and timeline",
        tags=["usage"],
        responses=RequestDetailSerializer,
    )
    def get(self, request: Request, org_id: int, request_id: str) -> Response:
        row = log.find_request(self.org, request_id)
        if row is None:
            raise NotFound("no such request in this organization")
        rec = log.receipt(self.org, row)
        row.receipt = rec  # type: ignore[attr-defined]
        row.timeline = log.timeline(row, rec)  # type: ignore[attr-defined]
        row.output_tokens_per_second = log.output_tokens_per_second(row)  # type: ignore[attr-defined]
        usage = log.usage_by_request_id(self.org, [row.request_id])
        return Response(RequestDetailSerializer(row, context={"usage": usage}).data)


class RequestExportView(OrgScopedAPIView):
    """The filtered request log as CSV, streamed (flat memory whatever the range)."""

    @extend_schema(
        operation_id="requests_export",
        summary="Request log as CSV (streamed)",
        tags=["usage"],
        parameters=[RequestLogQuerySerializer],
        responses={(200, "text/csv"): OpenApiTypes.STR},
    )
    def get(self, request: Request, org_id: int) -> StreamingHttpResponse:
        query = parse_query(RequestLogQuerySerializer, request)
        lines = log.csv_lines(log.request_logs(self.org, **query))
        response = StreamingHttpResponse(lines, content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="requests-org{self.org.pk}.csv"'
        return response


class BalanceView(OrgScopedAPIView):
    """The prepaid balance and this calendar month's (UTC) spend."""

    @extend_schema(
        operation_id="balance_retrieve",
        summary="Prepaid balance and this month's spend",
        tags=["billing"],
        responses=BalanceSerializer,
    )
    def get(self, request: Request, org_id: int) -> Response:
        return Response(BalanceSerializer(selectors.balance(self.org)).data)


class LedgerView(OrgScopedAPIView):
    """Ledger entries: credits, usage debits and adjustments, newest first."""

    @extend_schema(
        operation_id="ledger_list",
        summary="Ledger entries, newest first",
        tags=["billing"],
        parameters=[LedgerQuerySerializer],
        responses=LedgerEntrySerializer(many=True),
    )
    def get(self, request: Request, org_id: int) -> Response:
        query = parse_query(LedgerQuerySerializer, request)
        entries = selectors.ledger_entries(
            self.org, kind=query.get("kind"), since=query.get("since"), until=query.get("until")
        )
        return self.paginated(entries, LedgerEntrySerializer)
