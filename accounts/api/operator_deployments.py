"""Operator API for provider deployments (issue 30, contract item 2): what `manage.py
add_deployment` / `set_deployment` and the admin's Deployment page do, over HTTP.

- `GET  /operator/deployments`: every deployment (paginated);
- `POST /operator/deployments`: create one (201);
- `GET|PATCH|DELETE /operator/deployments/{name}`: read, change some fields (absent ones keep
  their value; `{"enabled": false}` disables), remove (204).

Deployments are global, not one organization's, so these endpoints are for operators: a signed-in
staff user (the same session + CSRF the rest of the API accepts) holding the Django permission
the operator console asks for (`catalog.view_deployment` / `add_` / `change_` / `delete_`).
Management keys act within one organization and are refused (403), customers' inference keys are
401. Writes go through catalog/deployment_services.py, shared with the command: the same checks,
the same audit lines, and routing follows within EZAT_CATALOG_POLL_INTERVAL seconds.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.api.base import ManagementAPIView, parse_body
from accounts.api.deployment_serializers import (
    CREDENTIAL_FIELDS,
    DeploymentSerializer,
    DeploymentUpdateSerializer,
    DeploymentWriteSerializer,
    credentials_from,
)
from accounts.api.permissions import OperatorModelPermission
from catalog import deployment_services
from catalog.deployment_services import DeploymentInput, DeploymentInputError
from catalog.models import Deployment

NOT_FOUND = "deployment not found"
# Only the session is an operator's credential here (see the module's docstring).
SESSION_ONLY: list[dict[str, list[str]]] = [{"cookieAuth": []}]


@contextmanager
def input_errors() -> Iterator[None]:
    """A refusal of the deployment service is a 400 naming the field."""
    try:
        yield
    except DeploymentInputError as exc:
        raise ValidationError({exc.field: [exc.message]}) from exc


class OperatorAPIView(ManagementAPIView):
    permission_classes = [IsAuthenticated, OperatorModelPermission]
    operator_model = "catalog.deployment"

    def deployments(self) -> Any:
        return Deployment.objects.prefetch_related("models").order_by("name")

    def get_deployment(self, name: str) -> Deployment:
        deployment = self.deployments().filter(name=name).first()
        if deployment is None:
            raise NotFound(NOT_FOUND)
        return deployment


def _shown(deployment: Deployment) -> dict[str, Any]:
    fresh = Deployment.objects.prefetch_related("models").get(pk=deployment.pk)
    return DeploymentSerializer(fresh).data


class DeploymentListView(OperatorAPIView):
    """Every provider deployment. Operators (staff with catalog permissions) only."""

    serializer_class = DeploymentWriteSerializer  # describes POST in OPTIONS responses

    @extend_schema(
        operation_id="operator_deployments_list",
        summary="List provider deployments (operators)",
        tags=["operator"],
        auth=SESSION_ONLY,
        responses=DeploymentSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        return self.paginated(self.deployments(), DeploymentSerializer)

    @extend_schema(
        operation_id="operator_deployments_create",
        summary="Create a provider deployment (operators)",
        description=(
            "The same checks as `manage.py add_deployment`; a refusal is a 400 naming the "
            "field. Credentials are write-only. New requests are routed to it within "
            "EZAT_CATALOG_POLL_INTERVAL seconds."
        ),
        tags=["operator"],
        auth=SESSION_ONLY,
        request=DeploymentWriteSerializer,
        responses={201: DeploymentSerializer},
    )
    def post(self, request: Request) -> Response:
        data = parse_body(DeploymentWriteSerializer, request)
        spec = DeploymentInput(
            credentials=credentials_from(data),
            **{k: v for k, v in data.items() if k not in CREDENTIAL_FIELDS},
        )
        with input_errors():
            deployment = deployment_services.create_deployment(spec)
        return Response(_shown(deployment), status=status.HTTP_201_CREATED)


class DeploymentDetailView(OperatorAPIView):
    """One deployment, by name."""

    serializer_class = DeploymentUpdateSerializer  # describes PATCH in OPTIONS responses

    @extend_schema(
        operation_id="operator_deployments_retrieve",
        summary="One provider deployment (operators)",
        tags=["operator"],
        auth=SESSION_ONLY,
        responses=DeploymentSerializer,
    )
    def get(self, request: Request, name: str) -> Response:
        return Response(DeploymentSerializer(self.get_deployment(name)).data)

    @extend_schema(
        operation_id="operator_deployments_update",
        summary="Change a provider deployment (operators)",
        description=(
            'Absent fields keep their value; `{"enabled": false}` disables it. Sending any '
            "credential replaces them all; changing `kind` needs the new kind's credentials."
        ),
        tags=["operator"],
        auth=SESSION_ONLY,
        request=DeploymentUpdateSerializer,
        responses=DeploymentSerializer,
    )
    def patch(self, request: Request, name: str) -> Response:
        deployment = self.get_deployment(name)
        data = parse_body(DeploymentUpdateSerializer, request)
        changes = {k: v for k, v in data.items() if k not in CREDENTIAL_FIELDS}
        credentials = credentials_from(data)
        if credentials is not None:
            changes["credentials"] = credentials
        with input_errors():
            if set(changes) == {"enabled"}:
                # On or off without re-checking the rest: a row that no longer passes the checks
                # (a URL written by hand) can still be switched off.
                deployment_services.set_deployment_enabled(deployment, enabled=changes["enabled"])
            elif changes:
                deployment, _ = deployment_services.update_deployment(deployment, **changes)
        return Response(_shown(deployment))

    @extend_schema(
        operation_id="operator_deployments_destroy",
        summary="Remove a provider deployment (operators)",
        description="Its usage records keep its name. To stop routing to it but keep it, "
        'PATCH `{"enabled": false}`.',
        tags=["operator"],
        auth=SESSION_ONLY,
        responses={204: OpenApiResponse(description="Removed.")},
    )
    def delete(self, request: Request, name: str) -> Response:
        deployment_services.delete_deployment(self.get_deployment(name))
        return Response(status=status.HTTP_204_NO_CONTENT)
