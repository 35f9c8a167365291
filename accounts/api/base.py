"""The management API's shared base: auth, pagination, org scoping, input parsing.

Every management API view (accounts' org and key endpoints, billing's usage and ledger
endpoints) derives from `ManagementAPIView` or `OrgScopedAPIView`. They live here, not in
`accounts/api/views.py`, so billing's API imports this base instead of accounts' endpoints
(see "Dependencies between the apps" in docs/design.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db.models import QuerySet
from rest_framework import serializers
from rest_framework.authentication import SessionAuthentication
from rest_framework.exceptions import ValidationError
from rest_framework.generics import GenericAPIView
from rest_framework.pagination import PageNumberPagination
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from accounts import services
from accounts.api.auth import ManagementKeyAuthentication
from accounts.api.permissions import (
    OrgAccess,
    OrgMemberReadOwnerWrite,
    caller_management_key,
    resolve_org_access,
)


class ApiPagination(PageNumberPagination):
    """`page` and `page_size` (≤ 200); malformed or too large values are a 400 naming the
    parameter."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200

    def get_page_size(self, request: Request) -> int:
        raw = request.query_params.get(self.page_size_query_param)
        if raw in (None, ""):
            return self.page_size
        if not raw.isdigit() or int(raw) < 1:
            raise ValidationError({"page_size": ["must be a positive integer"]})
        if int(raw) > self.max_page_size:
            raise ValidationError({"page_size": [f"must be at most {self.max_page_size}"]})
        return int(raw)

    def paginate_queryset(
        self, queryset: QuerySet[Any], request: Request, view: Any = None
    ) -> list[Any] | None:
        raw = request.query_params.get(self.page_query_param)
        if raw not in (None, "", *self.last_page_strings) and (not raw.isdigit() or int(raw) < 1):
            raise ValidationError({"page": ["must be a positive integer or 'last'"]})
        return super().paginate_queryset(queryset, request, view)


def parse_query(serializer_class: type[serializers.Serializer], request: Request) -> dict[str, Any]:
    """Validated query parameters; a bad one is a 400 naming it."""
    serializer = serializer_class(data=request.query_params)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


def parse_body(serializer_class: type[serializers.Serializer], request: Request) -> dict[str, Any]:
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


@contextmanager
def service_errors() -> Iterator[None]:
    """A service refusing input is the caller's fault (400), never a 500."""
    try:
        yield
    except services.AccountsError as exc:
        raise ValidationError({exc.field or "non_field_errors": [str(exc)]}) from exc


def actor(request: Request) -> str:
    """Who did it, for logs: a username or a management key prefix."""
    key = caller_management_key(request)
    return f"management-key:{key.prefix}" if key else request.user.get_username()


class ManagementAPIView(GenericAPIView):
    """Base of every management API view: management key or session (CSRF-checked) auth."""

    # The key class comes first: its `authenticate_header` makes unauthenticated calls a 401.
    authentication_classes = [ManagementKeyAuthentication, SessionAuthentication]
    permission_classes = [IsAuthenticated]
    pagination_class = ApiPagination

    def paginated(self, queryset: QuerySet[Any], serializer_class: type) -> Response:
        page = self.paginate_queryset(queryset)
        return self.get_paginated_response(serializer_class(page, many=True).data)


class OrgScopedAPIView(ManagementAPIView):
    """A view under `/orgs/{org_id}/`: unknown or foreign orgs are a 404."""

    permission_classes = [IsAuthenticated, OrgMemberReadOwnerWrite]
    _access: OrgAccess | None = None

    def get_org_access(self) -> OrgAccess:
        if self._access is None:
            self._access = resolve_org_access(self.request, self.kwargs["org_id"])
        return self._access

    @property
    def org(self) -> Any:
        return self.get_org_access().org
