"""Routes of the management API, included by `ezat.urls` at `api/v1/`."""

from __future__ import annotations

from typing import Any

from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView
from rest_framework.permissions import AllowAny

from accounts.api import fallbacks, invitations, operator_deployments
from accounts.api import views as accounts
from billing.api import views as billing
from billing.models import RequestLog
from catalog.platform_config import KINDS
from ezat.api_docs import ApiDocsView

ORG = "orgs/<int:org_id>"

api_patterns = [
    path("orgs/", accounts.OrgListView.as_view(), name="api-orgs"),
    path(f"{ORG}", accounts.OrgDetailView.as_view(), name="api-org"),
    path(f"{ORG}/keys", accounts.ApiKeyListView.as_view(), name="api-keys"),
    path(f"{ORG}/keys/<int:key_id>", accounts.ApiKeyDetailView.as_view(), name="api-key"),
    path(
        f"{ORG}/keys/<int:key_id>/revoke",
        accounts.ApiKeyRevokeView.as_view(),
        name="api-key-revoke",
    ),
    path(
        f"{ORG}/keys/<int:key_id>/disable",
        accounts.ApiKeyDisableView.as_view(),
        name="api-key-disable",
    ),
    path(
        f"{ORG}/keys/<int:key_id>/enable",
        accounts.ApiKeyEnableView.as_view(),
        name="api-key-enable",
    ),
    path(f"{ORG}/invitations", invitations.InvitationListView.as_view(), name="api-invitations"),
    path(
        f"{ORG}/invitations/<int:invitation_id>",
        invitations.InvitationDetailView.as_view(),
        name="api-invitation",
    ),
    path(f"{ORG}/fallbacks", fallbacks.FallbackListView.as_view(), name="api-fallbacks"),
    path(
        f"{ORG}/fallbacks/<path:model>",
        fallbacks.FallbackDetailView.as_view(),
        name="api-fallback",
    ),
    path(f"{ORG}/usage", billing.UsageSummaryView.as_view(), name="api-usage"),
    path(f"{ORG}/usage/cache", billing.PromptCacheView.as_view(), name="api-usage-cache"),
    path(f"{ORG}/requests", billing.RequestLogView.as_view(), name="api-requests"),
    path(f"{ORG}/requests.csv", billing.RequestExportView.as_view(), name="api-requests-csv"),
    path(
        f"{ORG}/requests/<str:request_id>",
        billing.RequestDetailView.as_view(),
        name="api-request",
    ),
    path(f"{ORG}/balance", billing.BalanceView.as_view(), name="api-balance"),
    path(f"{ORG}/ledger", billing.LedgerView.as_view(), name="api-ledger"),
    path(
        f"{ORG}/management-keys",
        accounts.ManagementKeyListView.as_view(),
        name="api-management-keys",
    ),
    path(
        f"{ORG}/management-keys/<int:key_id>",
        accounts.ManagementKeyDetailView.as_view(),
        name="api-management-key",
    ),
    path(
        f"{ORG}/management-keys/<int:key_id>/revoke",
        accounts.ManagementKeyRevokeView.as_view(),
        name="api-management-key-revoke",
    ),
    # Operators (staff with the catalog permissions), not one organization's: global objects.
    path(
        "operator/deployments",
        operator_deployments.DeploymentListView.as_view(),
        name="api-operator-deployments",
    ),
    path(
        "operator/deployments/<str:name>",
        operator_deployments.DeploymentDetailView.as_view(),
        name="api-operator-deployment",
    ),
]

# The schema covers this API only (not other DRF views of the project), under its real prefix.
SCHEMA_PATTERNS = [path("api/v1/", include(api_patterns))]
SCHEMA_SETTINGS: dict[str, Any] = {
    "COMPONENT_SPLIT_REQUEST": True,
    "SCHEMA_PATH_PREFIX": r"/api/v1",
    # Keys and requests both have a `status`; name the two enums instead of hashing a name.
    "ENUM_NAME_OVERRIDES": {
        "KeyStatusEnum": ["active", "revoked"],
        "ApiKeyStatusEnum": ["active", "disabled", "expired", "revoked"],
        "SpendCapPeriodEnum": ["month", "day", "total"],
        "RequestStatusEnum": RequestLog.Status.values,
        "DeploymentKindEnum": list(KINDS),
    },
    "DESCRIPTION": (
        "Manage an organization's inference keys, invitations and model fallback chains, and "
        "read its usage, request log, balance and ledger. Money is USD as decimal strings. An "
        "organization you cannot access is a 404. Operators (signed-in staff users with the "
        "catalog permissions) also manage the provider deployments under /operator/."
    ),
}


class SchemaView(SpectacularAPIView):
    """`/api/v1/schema` (YAML) or `?format=json`: public, it holds no data."""

    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]
    patterns = SCHEMA_PATTERNS
    custom_settings = SCHEMA_SETTINGS


urlpatterns = [
    *api_patterns,
    path("schema", SchemaView.as_view(), name="api-schema"),
    path(
        "docs",
        ApiDocsView.as_view(patterns=SCHEMA_PATTERNS, custom_settings=SCHEMA_SETTINGS),
        name="api-docs",
    ),
]
