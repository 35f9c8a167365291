"""Management API for invitations: owners (and management keys) invite by e-mail and withdraw;
members read. There is no call that adds a member directly: people join by accepting.

- `GET  /orgs/{org_id}/invitations`: pending invitations.
- `POST /orgs/{org_id}/invitations`: invite `email` as `role`. 202, and the same answer for every
  valid address (an account, nobody, a member already, a staff account): no enumeration.
- `DELETE /orgs/{org_id}/invitations/{id}`: withdraw (idempotent).
"""

from __future__ import annotations

import logging

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from accounts import selectors, services
from accounts.api.base import OrgScopedAPIView, actor, parse_body, service_errors
from accounts.api.serializers import StrictInputSerializer
from accounts.invitations import public_base_url
from accounts.models import Invitation, Membership

logger = logging.getLogger(__name__)

INVITATION_NOT_FOUND = "invitation not found"


class InvitationSerializer(serializers.Serializer):
    id = serializers.IntegerField(read_only=True)
    email = serializers.EmailField(read_only=True)
    role = serializers.ChoiceField(choices=Membership.Role.values, read_only=True)
    status = serializers.SerializerMethodField()
    invited_by = serializers.CharField(read_only=True)
    created_at = serializers.DateTimeField(read_only=True)
    expires_at = serializers.DateTimeField(read_only=True)

    def get_status(self, invitation: Invitation) -> str:
        if invitation.accepted_at is not None:
            return "accepted"
        if invitation.revoked_at is not None:
            return "revoked"
        return "pending"


class InvitationCreateSerializer(StrictInputSerializer):
    email = serializers.EmailField(max_length=254)
    role = serializers.ChoiceField(choices=Membership.Role.values, default=Membership.Role.MEMBER)


class InvitationListView(OrgScopedAPIView):
    """Pending invitations of the organization. Members read; owners invite."""

    serializer_class = InvitationCreateSerializer  # describes POST in OPTIONS responses

    @extend_schema(
        operation_id="invitations_list",
        summary="Pending invitations",
        tags=["members"],
        responses=InvitationSerializer(many=True),
    )
    def get(self, request: Request, org_id: int) -> Response:
        return self.paginated(selectors.org_pending_invitations(self.org), InvitationSerializer)

    @extend_schema(
        operation_id="invitations_create",
        summary="Invite someone by e-mail (owners)",
        description=(
            "The invitee gets an e-mail with a link valid for 7 days and joins only by accepting "
            "it. The answer is the same for every valid address."
        ),
        tags=["members"],
        request=InvitationCreateSerializer,
        responses={202: InvitationSerializer},
    )
    def post(self, request: Request, org_id: int) -> Response:
        data = parse_body(InvitationCreateSerializer, request)
        with service_errors():
            invitation = services.invite_member(
                org=self.org,
                email=data["email"],
                role=data["role"],
                invited_by=actor(request),
                base_url=public_base_url(request),
            )
        logger.info(
            "invitation created",
            extra={"org_id": self.org.pk, "invitation_id": invitation.pk, "actor": actor(request)},
        )
        return Response(InvitationSerializer(invitation).data, status=status.HTTP_202_ACCEPTED)


class InvitationDetailView(OrgScopedAPIView):
    """One invitation: read, or withdraw (owners)."""

    def get_invitation(self, invitation_id: int) -> Invitation:
        invitation = selectors.org_invitation(self.org, invitation_id)
        if invitation is None:
            raise NotFound(INVITATION_NOT_FOUND)
        return invitation

    @extend_schema(
        operation_id="invitations_retrieve",
        summary="One invitation",
        tags=["members"],
        responses=InvitationSerializer,
    )
    def get(self, request: Request, org_id: int, invitation_id: int) -> Response:
        return Response(InvitationSerializer(self.get_invitation(invitation_id)).data)

    @extend_schema(
        operation_id="invitations_destroy",
        summary="Withdraw an invitation (owners)",
        description="Its link stops working. Idempotent; an accepted invitation stays accepted.",
        tags=["members"],
        responses={204: OpenApiResponse(description="Withdrawn.")},
    )
    def delete(self, request: Request, org_id: int, invitation_id: int) -> Response:
        invitation = services.revoke_invitation(invitation=self.get_invitation(invitation_id))
        logger.info(
            "invitation withdrawn",
            extra={"org_id": self.org.pk, "invitation_id": invitation.pk, "actor": actor(request)},
        )
        return Response(status=status.HTTP_204_NO_CONTENT)
