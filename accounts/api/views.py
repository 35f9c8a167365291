"""Management API views for organisations, inference keys and management keys.

Thin: parse input with a serializer, read through selectors, write through services. Org
scoping and roles live in `permissions`; every org-scoped view resolves the caller's access
from the URL's `org_id` before doing anything else.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.db.models import Model
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from accounts import services
from accounts import services as account_services
from accounts.api import selectors
from accounts.api.base import (
    ManagementAPIView,
    OrgScopedAPIView,
    actor,
    parse_body,
    parse_query,
    service_errors,
)
from accounts.api.permissions import (
    SessionOwnerOnly,
    caller_management_key,
)
from accounts.api.serializers import (
    ApiKeyCreatedSerializer,
    ApiKeyCreateSerializer,
    ApiKeyQuerySerializer,
    ApiKeySerializer,
    ApiKeyUpdateSerializer,
    ManagementKeyCreatedSerializer,
    ManagementKeyCreateSerializer,
    ManagementKeySerializer,
    OrgSerializer,
)
from accounts.models import ApiKey, ManagementKey

logger = logging.getLogger(__name__)

KEY_NOT_FOUND = "key not found"


def _get_or_404(obj: Model | None) -> Any:
    if obj is None:
        raise NotFound(KEY_NOT_FOUND)
    return obj


# --- Organisations --------------------------------------------------------------------------


class OrgListView(ManagementAPIView):
    """Organizations the caller belongs to (a management key: its own), with the caller's role."""

    @extend_schema(
        operation_id="orgs_list",
        summary="Organizations I can access",
        tags=["organizations"],
        responses=OrgSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        key = caller_management_key(request)
        orgs = (
            selectors.orgs_for_management_key(key) if key else selectors.orgs_for_user(request.user)
        )
        return self.paginated(orgs, OrgSerializer)


class OrgDetailView(OrgScopedAPIView):
    """One organization and the caller's role in it."""

    @extend_schema(
        operation_id="orgs_retrieve",
        summary="One organization",
        tags=["organizations"],
        responses=OrgSerializer,
    )
    def get(self, request: Request, org_id: int) -> Response:
        access = self.get_org_access()
        org = access.org
        data = {"id": org.pk, "name": org.name, "role": access.role, "created_at": org.created_at}
        return Response(OrgSerializer(data).data)


# --- Inference keys ---------------------------------------------------------------------------


class ApiKeyListView(OrgScopedAPIView):
    """An organization's inference keys (`ezat_sk_…`). Members read; owners create."""

    serializer_class = ApiKeyCreateSerializer  # describes POST in OPTIONS responses

    @extend_schema(
        operation_id="keys_list",
        summary="List inference keys",
        tags=["keys"],
        parameters=[ApiKeyQuerySerializer],
        responses=ApiKeySerializer(many=True),
    )
    def get(self, request: Request, org_id: int) -> Response:
        query = parse_query(ApiKeyQuerySerializer, request)
        keys = selectors.api_keys_for_org(self.org, status=query.get("status"))
        return self.paginated(keys, ApiKeySerializer)

    @extend_schema(
        operation_id="keys_create",
        summary="Create an inference key (owners)",
        description="The response carries the key's secret; it is never shown again.",
        tags=["keys"],
        request=ApiKeyCreateSerializer,
        responses={201: ApiKeyCreatedSerializer},
    )
    def post(self, request: Request, org_id: int) -> Response:
        data = parse_body(ApiKeyCreateSerializer, request)
        access = self.get_org_access()
        with service_errors():
            new = services.create_api_key(
                org=self.org,
                name=data["name"],
                rpm_limit=data["rpm_limit"],
                max_concurrency=data["max_concurrency"],
                spend_cap_nano=data["spend_cap_usd"],
                spend_cap_period=data["spend_cap_period"],
                allowed_models=data["allowed_models"],
                allowed_ips=data["allowed_ips"],
                expires_at=data["expires_at"],
                # A management key is not a person; its actions are attributed in the log line.
                created_by=None if access.via_management_key else request.user,
            )
        logger.info(
            "api key created",
            extra={"org_id": self.org.pk, "key_id": new.key.pk, "actor": actor(request)},
        )
        key = selectors.get_api_key(self.org, new.key.pk)
        body = ApiKeyCreatedSerializer(key).data
        body["secret"] = new.secret
        return Response(body, status=status.HTTP_201_CREATED)


class ApiKeyDetailView(OrgScopedAPIView):
    """One inference key. Members read; owners rename, change limits and revoke."""

    def get_key(self, key_id: int) -> ApiKey:
        return _get_or_404(selectors.get_api_key(self.org, key_id))

    @extend_schema(
        operation_id="keys_retrieve",
        summary="One inference key",
        tags=["keys"],
        responses=ApiKeySerializer,
    )
    def get(self, request: Request, org_id: int, key_id: int) -> Response:
        return Response(ApiKeySerializer(self.get_key(key_id)).data)

    @extend_schema(
        operation_id="keys_partial_update",
        summary="Rename a key or change its limits (owners)",
        description="Absent fields keep their value; `null` clears a limit.",
        tags=["keys"],
        request=ApiKeyUpdateSerializer,
        responses=ApiKeySerializer,
    )
    def patch(self, request: Request, org_id: int, key_id: int) -> Response:
        key = self.get_key(key_id)
        data = parse_body(ApiKeyUpdateSerializer, request)
        changes: dict[str, Any] = {}
        if "name" in data:
            changes["name"] = data["name"]
        if "rpm_limit" in data:
            changes["rpm_limit"] = data["rpm_limit"]
        if "max_concurrency" in data:
            changes["max_concurrency"] = data["max_concurrency"]
        if "spend_cap_usd" in data:
            changes["spend_cap_nano"] = data["spend_cap_usd"]
        for name in ("spend_cap_period", "allowed_models", "allowed_ips", "expires_at"):
            if name in data:
                changes[name] = data[name]
        disabled = data.get("disabled")
        if key.revoked_at is not None and (changes or disabled is not None):
            raise ValidationError({"non_field_errors": ["a revoked key cannot be changed"]})
        if changes or disabled is not None:
            with service_errors(), transaction.atomic():
                if changes:
                    account_services.patch_api_key(key=key, **changes)
                if disabled is not None:
                    account_services.set_api_key_disabled(key=key, disabled=disabled)
            if disabled is not None:
                changes["disabled"] = disabled
            logger.info(
                "api key updated",
                extra={
                    "org_id": self.org.pk,
                    "key_id": key.pk,
                    "fields": sorted(changes),
                    "actor": actor(request),
                },
            )
        return Response(ApiKeySerializer(self.get_key(key_id)).data)

    @extend_schema(
        operation_id="keys_destroy",
        summary="Revoke a key (owners)",
        description="Same as POST …/revoke; the key stays listed as revoked. Idempotent.",
        tags=["keys"],
        responses={204: OpenApiResponse(description="Revoked.")},
    )
    def delete(self, request: Request, org_id: int, key_id: int) -> Response:
        _revoke_api_key(request, self.org, self.get_key(key_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class ApiKeyRevokeView(ApiKeyDetailView):
    """Revoke an inference key (owners)."""

    serializer_class = serializers.Serializer  # no body; OPTIONS introspects one

    http_method_names = ["post", "options"]

    @extend_schema(
        operation_id="keys_revoke",
        summary="Revoke a key (owners)",
        description="Gateways stop accepting it within seconds. Idempotent.",
        tags=["keys"],
        request=None,
        responses=ApiKeySerializer,
    )
    def post(self, request: Request, org_id: int, key_id: int) -> Response:
        _revoke_api_key(request, self.org, self.get_key(key_id))
        return Response(ApiKeySerializer(self.get_key(key_id)).data)


class ApiKeyDisableView(ApiKeyDetailView):
    """Disable an inference key (owners): reversible, unlike revoking."""

    serializer_class = serializers.Serializer  # no body; OPTIONS introspects one
    http_method_names = ["post", "options"]
    disabled = True

    @extend_schema(
        operation_id="keys_disable",
        summary="Disable a key (owners)",
        description="Gateways refuse it (401, saying it is disabled) within seconds, until it is "
        "enabled again. Idempotent.",
        tags=["keys"],
        request=None,
        responses=ApiKeySerializer,
    )
    def post(self, request: Request, org_id: int, key_id: int) -> Response:
        key = self.get_key(key_id)
        with service_errors():
            services.set_api_key_disabled(key=key, disabled=self.disabled)
        logger.info(
            "api key disabled" if self.disabled else "api key enabled",
            extra={"org_id": self.org.pk, "key_id": key.pk, "actor": actor(request)},
        )
        return Response(ApiKeySerializer(self.get_key(key_id)).data)


class ApiKeyEnableView(ApiKeyDisableView):
    """Enable a disabled inference key again (owners)."""

    disabled = False

    @extend_schema(
        operation_id="keys_enable",
        summary="Enable a disabled key (owners)",
        description="Gateways accept it again within seconds. Idempotent.",
        tags=["keys"],
        request=None,
        responses=ApiKeySerializer,
    )
    def post(self, request: Request, org_id: int, key_id: int) -> Response:
        return super().post(request, org_id, key_id)


def _revoke_api_key(request: Request, org: Any, key: ApiKey) -> None:
    services.revoke_api_key(key=key)
    logger.info(
        "api key revoked", extra={"org_id": org.pk, "key_id": key.pk, "actor": actor(request)}
    )


# --- Management keys --------------------------------------------------------------------------


class ManagementKeyListView(OrgScopedAPIView):
    """Management keys (`ezat_mk_…`): for signed-in owners only, never for management keys."""

    serializer_class = ManagementKeyCreateSerializer  # describes POST in OPTIONS responses

    permission_classes = [IsAuthenticated, SessionOwnerOnly]

    @extend_schema(
        operation_id="management_keys_list",
        summary="List management keys (owners, signed in)",
        tags=["management keys"],
        responses=ManagementKeySerializer(many=True),
    )
    def get(self, request: Request, org_id: int) -> Response:
        return self.paginated(selectors.management_keys_for_org(self.org), ManagementKeySerializer)

    @extend_schema(
        operation_id="management_keys_create",
        summary="Create a management key (owners, signed in)",
        description="The response carries the key's secret; it is never shown again.",
        tags=["management keys"],
        request=ManagementKeyCreateSerializer,
        responses={201: ManagementKeyCreatedSerializer},
    )
    def post(self, request: Request, org_id: int) -> Response:
        data = parse_body(ManagementKeyCreateSerializer, request)
        key, secret = services.create_management_key(
            org=self.org, name=data["name"], created_by=request.user
        )
        logger.info(
            "management key created",
            extra={"org_id": self.org.pk, "key_id": key.pk, "actor": actor(request)},
        )
        body = ManagementKeyCreatedSerializer(key).data
        body["secret"] = secret
        return Response(body, status=status.HTTP_201_CREATED)


class ManagementKeyDetailView(OrgScopedAPIView):
    """One management key: for signed-in owners only."""

    permission_classes = [IsAuthenticated, SessionOwnerOnly]

    def get_key(self, key_id: int) -> ManagementKey:
        return _get_or_404(selectors.get_management_key(self.org, key_id))

    @extend_schema(
        operation_id="management_keys_retrieve",
        summary="One management key (owners, signed in)",
        tags=["management keys"],
        responses=ManagementKeySerializer,
    )
    def get(self, request: Request, org_id: int, key_id: int) -> Response:
        return Response(ManagementKeySerializer(self.get_key(key_id)).data)

    @extend_schema(
        operation_id="management_keys_destroy",
        summary="Revoke a management key (owners, signed in)",
        tags=["management keys"],
        responses={204: OpenApiResponse(description="Revoked.")},
    )
    def delete(self, request: Request, org_id: int, key_id: int) -> Response:
        self._revoke(request, self.get_key(key_id))
        return Response(status=status.HTTP_204_NO_CONTENT)

    def _revoke(self, request: Request, key: ManagementKey) -> ManagementKey:
        key = account_services.revoke_management_key(key=key)
        logger.info(
            "management key revoked",
            extra={"org_id": self.org.pk, "key_id": key.pk, "actor": actor(request)},
        )
        return key


class ManagementKeyRevokeView(ManagementKeyDetailView):
    """Revoke a management key: for signed-in owners only."""

    serializer_class = serializers.Serializer  # no body; OPTIONS introspects one

    http_method_names = ["post", "options"]

    @extend_schema(
        operation_id="management_keys_revoke",
        summary="Revoke a management key (owners, signed in)",
        tags=["management keys"],
        request=None,
        responses=ManagementKeySerializer,
    )
    def post(self, request: Request, org_id: int, key_id: int) -> Response:
        self._revoke(request, self.get_key(key_id))
        return Response(ManagementKeySerializer(self.get_key(key_id)).data)
