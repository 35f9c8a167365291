"""The invitee's side of invitations: the dashboard list and the e-mailed link.

Neither needs a membership (an invitee may have no org yet), so these pages use the plain
layout, not the org dashboard's. Accepting is always a POST (a link scanner fetching the
e-mail's URL accepts nothing).
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from accounts import invitations, selectors
from accounts.models import Invitation
from accounts.services import InvitationError, accept_invitation, invitation_refusal
from accounts.web import SESSION_ORG

# Status of the page explaining why an invitation cannot be accepted.
_STATUS = {
    "invalid": 400,
    "expired": 410,
    "revoked": 410,
    "used": 410,
    "staff": 403,
    "not_yours": 404,
}


def _refused(request: HttpRequest, error: InvitationError) -> HttpResponse:
    context = {"reason": error.reason, "message": error.message}
    return render(
        request, "dashboard/invitation_invalid.html", context, status=_STATUS[error.reason]
    )


def _joined(request: HttpRequest, org_id: int, org_name: str) -> HttpResponse:
    request.session[SESSION_ORG] = org_id
    messages.success(request, f"You are a member of {org_name}.")
    return redirect("dashboard:home")


@login_required
@require_http_methods(["GET"])
def my_invitations(request: HttpRequest) -> HttpResponse:
    pending = selectors.pending_invitations_for_user(request.user)
    return render(request, "dashboard/invitations.html", {"invitations": pending})


@login_required
@require_POST
def accept_mine(request: HttpRequest, invitation_id: int) -> HttpResponse:
    try:
        membership = accept_invitation(
            invitation_id=invitation_id, user=request.user, require_email_match=True
        )
    except InvitationError as exc:
        return _refused(request, exc)
    return _joined(request, membership.org_id, membership.org.name)


@login_required
@require_http_methods(["GET", "POST"])
def invitation_link(request: HttpRequest, token: str) -> HttpResponse:
    try:
        invitation_id = invitations.read_token(token)
    except invitations.ExpiredLink:
        return _refused(request, InvitationError("expired"))
    except invitations.InvalidLink:
        return _refused(request, InvitationError("invalid"))
    if request.method == "POST":
        try:
            membership = accept_invitation(
                invitation_id=invitation_id, user=request.user, require_email_match=False
            )
        except InvitationError as exc:
            return _refused(request, exc)
        return _joined(request, membership.org_id, membership.org.name)
    invitation = Invitation.objects.select_related("org").filter(pk=invitation_id).first()
    refusal = invitation_refusal(invitation, request.user, require_email_match=False)
    if refusal is not None:
        return _refused(request, refusal)
    return render(request, "dashboard/invitation_link.html", {"invitation": invitation})
