"""Reads for the dashboard: which orgs a user belongs to, and an org's keys and members.

Every dashboard read starts from a `Membership`, never from a bare org id, so a page cannot
show another tenant's rows by forgetting a filter.
"""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import QuerySet

from accounts import invitations
from accounts.models import ApiKey, FallbackPolicy, Invitation, Membership, Organization


def memberships_for_user(user: AbstractBaseUser | AnonymousUser) -> QuerySet[Membership]:
    if not user.is_authenticated:
        return Membership.objects.none()
    return Membership.objects.filter(user=user).select_related("org").order_by("org__name")


def membership_for(
    user: AbstractBaseUser | AnonymousUser, org_id: int | str | None
) -> Membership | None:
    """The user's membership in `org_id`, or None (not a member, bad id, anonymous)."""
    if not user.is_authenticated or org_id is None:
        return None
    try:
        org_pk = int(org_id)
    except (TypeError, ValueError):
        return None
    return Membership.objects.filter(user=user, org_id=org_pk).select_related("org").first()


def is_member(user_id: int, org_id: int) -> bool:
    return Membership.objects.filter(user_id=user_id, org_id=org_id).exists()


def org_key(org: Organization, key_id: int) -> ApiKey | None:
    return ApiKey.objects.filter(org=org, pk=key_id).defer("key_hash").first()


def org_members(org: Organization) -> QuerySet[Membership]:
    return (
        Membership.objects.filter(org=org).select_related("user").order_by("role", "user__username")
    )


def owner_count(org: Organization) -> int:
    return Membership.objects.filter(org=org, role=Membership.Role.OWNER).count()


def org_pending_invitations(org: Organization) -> QuerySet[Invitation]:
    """Invitations of the org not yet accepted, withdrawn or expired: newest first."""
    return Invitation.objects.filter(
        org=org,
        accepted_at__isnull=True,
        revoked_at__isnull=True,
        expires_at__gt=invitations.now(),
    ).order_by("-created_at")


def org_invitation(org: Organization, invitation_id: int) -> Invitation | None:
    return Invitation.objects.filter(org=org, pk=invitation_id).first()


def pending_invitations_for_user(user: AbstractBaseUser | AnonymousUser) -> QuerySet[Invitation]:
    """Invitations the signed-in account may accept from its dashboard: to its own address,
    pending, and never for staff accounts (they cannot join customer orgs)."""
    email = (getattr(user, "email", "") or "").strip().lower()
    if (
        not user.is_authenticated
        or not email
        or getattr(user, "is_staff", False)
        or getattr(user, "is_superuser", False)
    ):
        return Invitation.objects.none()
    return (
        Invitation.objects.filter(
            email=email,
            accepted_at__isnull=True,
            revoked_at__isnull=True,
            expires_at__gt=invitations.now(),
        )
        .exclude(org__memberships__user=user)
        .select_related("org")
        .order_by("-created_at")
    )


def org_fallbacks(org: Organization) -> QuerySet[FallbackPolicy]:
    """The org's fallback chains, one per model that has one."""
    return FallbackPolicy.objects.filter(org=org).order_by("model_id")


def org_fallback(org: Organization, model_id: str) -> FallbackPolicy | None:
    return FallbackPolicy.objects.filter(org=org, model_id=model_id).first()


def catalog_model_names() -> dict[str, str]:
    """Every catalog name (id and aliases, lower case) → canonical id, enabled or not: what a
    fallback chain may name."""
    from catalog.models import Model, ModelAlias

    names = {model_id.lower(): model_id for model_id in Model.objects.values_list("id", flat=True)}
    for alias, model_id in ModelAlias.objects.values_list("alias", "model_id"):
        names.setdefault(alias, model_id)
    return names
