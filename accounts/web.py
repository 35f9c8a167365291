"""The customer web layer's shared pieces: the tenancy guard and the layout context of every page.

Every dashboard page (accounts, billing, alerts, playground) is wrapped in `org_view` and renders
with `page(...)`. They live here, not in `accounts/views.py`, so the apps above accounts import
this small module instead of account pages (see "Dependencies between the apps" in docs/design.md).

Tenancy: a page never takes an org id it has not checked. `org_view` resolves the current org
from the session (or `?org=<id>`), verifies the signed-in user is a member — 404 otherwise, so
other tenants' org ids are not even confirmed to exist — and hands the view a `Membership`.
Everything the view reads is then filtered by `membership.org`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from accounts import selectors
from accounts.models import Membership

SESSION_ORG = "ezat_org_id"
OrgViewFunc = Callable[..., HttpResponse]


def current_membership(request: HttpRequest) -> Membership | None:
    """The membership for this request's org; `?org=<id>` switches (and must be a member's)."""
    user = request.user
    requested = request.GET.get("org")
    if requested is not None:
        membership = selectors.membership_for(user, requested)
        if membership is None:
            raise Http404("No such organization.")
        request.session[SESSION_ORG] = membership.org_id
        return membership
    membership = selectors.membership_for(user, request.session.get(SESSION_ORG))
    if membership is None:
        # First visit, or removed from the org in the session: fall back to the first org.
        membership = selectors.memberships_for_user(user).first()
        if membership is not None:
            request.session[SESSION_ORG] = membership.org_id
    return membership


def org_view(*, owner_only: bool = False) -> Callable[[OrgViewFunc], OrgViewFunc]:
    """Sign-in required, current org resolved and checked; the view gets `membership` next."""

    def decorator(view: OrgViewFunc) -> OrgViewFunc:
        @wraps(view)
        @login_required
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            membership = current_membership(request)
            if membership is None:
                return render(request, "dashboard/no_org.html", status=403)
            if owner_only and membership.role != Membership.Role.OWNER:
                raise PermissionDenied("Only owners of this organization can do that.")
            return view(request, membership, *args, **kwargs)

        return wrapper

    return decorator


def page(request: HttpRequest, membership: Membership, **extra: Any) -> dict[str, Any]:
    """The context every dashboard page's layout needs (nav, org switcher, role)."""
    return {
        "membership": membership,
        "org": membership.org,
        "is_owner": membership.role == Membership.Role.OWNER,
        "memberships": selectors.memberships_for_user(request.user),
        "invitation_count": selectors.pending_invitations_for_user(request.user).count(),
        **extra,
    }
