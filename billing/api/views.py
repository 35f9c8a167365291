"""Management API views over money: usage summaries, the request log, balance and ledger.

Read-only, so members and owners alike may call them (management keys too).
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.api.views import OrgScopedAPIView, parse_query
from billing.api import selectors
from billing.api.serializers import (
    BalanceSerializer,
    LedgerEntrySerializer,
    LedgerQuerySerializer,
    RequestLogQuerySerializer,
    UsageQuerySerializer,
    UsageRecordSerializer,
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
            self.org, group_by=query["group_by"], since=query.get("since"), until=query.get("until")
        )
        return Response(UsageSummarySerializer(summary).data)


class RequestLogView(OrgScopedAPIView):
    """The request log: one row per billable request, newest first."""

    @extend_schema(
        operation_id="requests_list",
        summary="Request log, newest first",
        tags=["usage"],
        parameters=[RequestLogQuerySerializer],
        responses=UsageRecordSerializer(many=True),
    )
    def get(self, request: Request, org_id: int) -> Response:
        query = parse_query(RequestLogQuerySerializer, request)
        return self.paginated(selectors.usage_records(self.org, **query), UsageRecordSerializer)


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
