"""Who may do what in an organisation, resolved from the URL's `org_id`.

Tenancy rule: an organisation the caller has no access to answers 404, exactly like one that
does not exist, so ids cannot be probed. Roles: members read, owners (and management keys,
which act as owners of their one organisation) write.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rest_framework.exceptions import NotFound
from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from accounts.models import ManagementKey, Membership, Organization

if TYPE_CHECKING:
    from rest_framework.views import APIView

ORG_NOT_FOUND = "organization not found"


@dataclass(frozen=True, slots=True)
class OrgAccess:
    org: Organization
    role: str
    management_key: ManagementKey | None  # set when the caller is a management key

    @property
    def is_owner(self) -> bool:
        return self.role == Membership.Role.OWNER

    @property
    def via_management_key(self) -> bool:
        return self.management_key is not None


def caller_management_key(request: Request) -> ManagementKey | None:
    return request.auth if isinstance(request.auth, ManagementKey) else None


def resolve_org_access(request: Request, org_id: int) -> OrgAccess:
    """The caller's access to `org_id`, or NotFound (never PermissionDenied: don't leak)."""
    key = caller_management_key(request)
    if key is not None:
        if key.org_id != org_id:
            raise NotFound(ORG_NOT_FOUND)
        return OrgAccess(org=key.org, role=Membership.Role.OWNER, management_key=key)
    user = request.user
    if not user or not user.is_authenticated:
        raise NotFound(ORG_NOT_FOUND)
    membership = Membership.objects.select_related("org").filter(user=user, org_id=org_id).first()
    if membership is None:
        raise NotFound(ORG_NOT_FOUND)
    return OrgAccess(org=membership.org, role=membership.role, management_key=None)


class OrgMemberReadOwnerWrite(BasePermission):
    """Members (and management keys) read; owners (and management keys) write."""

    message = "only owners of this organization can make changes"

    def has_permission(self, request: Request, view: APIView) -> bool:
        access = view.get_org_access()  # type: ignore[attr-defined]
        return request.method in SAFE_METHODS or access.is_owner


class SessionOwnerOnly(BasePermission):
    """Management keys are managed by signed-in owners only.

    A management key that could mint management keys could never be fully revoked: whoever
    held it could have made a successor.
    """

    message = "only owners of this organization can manage management keys"

    def has_permission(self, request: Request, view: APIView) -> bool:
        access: OrgAccess = view.get_org_access()  # type: ignore[attr-defined]
        if access.via_management_key:
            self.message = "management keys cannot manage management keys; sign in as an owner"
            return False
        return access.is_owner


# The Django model permission each method needs, as the admin asks for it.
_OPERATOR_ACTIONS = {
    "GET": "view",
    "HEAD": "view",
    "OPTIONS": "view",
    "POST": "add",
    "PUT": "change",
    "PATCH": "change",
    "DELETE": "delete",
}


class OperatorModelPermission(BasePermission):
    """Operator endpoints (global objects such as deployments, not one org's): a signed-in,
    active staff user holding the model permission the operator console would ask for
    (`catalog.view_deployment` to read, `add_`, `change_`, `delete_` to write; superusers hold
    every one). The view names the model in `operator_model` ("catalog.deployment").

    A management key is refused: it acts as an owner of one organization, and an operator's
    rights are over every organization's traffic. Customers' inference keys never get this far
    (ManagementKeyAuthentication answers them 401).
    """

    message = "operator endpoints need a signed-in staff user with the model permission"

    def has_permission(self, request: Request, view: APIView) -> bool:
        app_label, model = view.operator_model.split(".")  # type: ignore[attr-defined]
        action = _OPERATOR_ACTIONS.get(request.method or "", "change")
        needed = f"{app_label}.{action}_{model}"
        if caller_management_key(request) is not None:
            self.message = (
                "management keys act within one organization; operator endpoints need a "
                f"signed-in staff user with {needed}"
            )
            return False
        user = request.user
        if not (user.is_active and user.is_staff):
            self.message = f"operator endpoints need a signed-in staff user with {needed}"
            return False
        if not user.has_perm(needed):
            self.message = f"this needs the {needed} permission"
            return False
        return True
