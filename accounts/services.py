"""Writes for orgs, memberships and keys."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from accounts import invitations, ip_allow, keys, selectors
from accounts.models import (
    ApiKey,
    FallbackPolicy,
    Invitation,
    ManagementKey,
    Membership,
    Organization,
)
from catalog.chains import AUTO_MODEL_ID, ChainError, check_chain, is_auto
from core.audit import audit


class AccountsError(ValueError):
    """Bad input to an accounts operation; the message is shown to the user. `field` names the
    input at fault when there is one (the API answers {field: [message]}, forms attach it)."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True, slots=True)
class NewKey:
    """A key right after creation: the only time the secret exists in clear."""

    key: ApiKey
    secret: str


def create_org(*, name: str) -> Organization:
    name = name.strip()
    if not name:
        raise AccountsError("organization name must not be empty")
    # Ignoring case, as the database's constraint does: `Acme` is the tenant `acme` already is.
    existing = Organization.objects.filter(name__iexact=name).values_list("name", flat=True).first()
    if existing is not None:
        raise AccountsError(
            f"organization {name!r} already exists"
            + (f" as {existing!r} (names are compared ignoring case)" if existing != name else "")
        )
    return Organization.objects.create(name=name)


def add_member(*, org: Organization, user: AbstractBaseUser, role: str) -> Membership:
    """Operators only (admin, CLI, fixtures): customers invite (`invite_member`), never add."""
    _check_role(role)
    membership, _ = Membership.objects.update_or_create(user=user, org=org, defaults={"role": role})
    audit("member.set", org_id=org.pk, member=user.get_username(), role=role)
    return membership


def _check_role(role: str) -> None:
    if role not in Membership.Role.values:
        raise AccountsError(f"role must be one of {', '.join(Membership.Role.values)}")


@transaction.atomic
def set_member_role(*, membership: Membership, role: str) -> Membership:
    """Change a member's role. The last owner stays owner: someone must manage the org."""
    _check_role(role)
    org_memberships = list(
        Membership.objects.select_for_update().filter(org_id=membership.org_id).order_by("pk")
    )
    target = next((m for m in org_memberships if m.pk == membership.pk), None)
    if target is None:
        raise AccountsError("no such member")
    owners = [m for m in org_memberships if m.role == Membership.Role.OWNER]
    if target.role == Membership.Role.OWNER and role != Membership.Role.OWNER and len(owners) <= 1:
        raise AccountsError("an organization needs at least one owner")
    if target.role != role:
        target.role = role
        target.save(update_fields=["role"])
        audit("member.role", org_id=target.org_id, member_id=target.user_id, role=role)
    return target


@transaction.atomic
def remove_member(*, membership: Membership) -> None:
    """Remove a user from an org. The last owner cannot leave: someone must manage the org."""
    org_memberships = Membership.objects.select_for_update().filter(org_id=membership.org_id)
    owners = [m for m in org_memberships if m.role == Membership.Role.OWNER]
    if membership.role == Membership.Role.OWNER and len(owners) <= 1:
        raise AccountsError("the last owner cannot be removed; make someone else owner first")
    Membership.objects.filter(pk=membership.pk).delete()
    audit("member.remove", org_id=membership.org_id, member_id=membership.user_id)


# --- Invitations ------------------------------------------------------------------------------


class InvitationError(Exception):
    """An invitation that cannot be accepted; `reason` picks the page or status shown."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        self.message = INVITATION_REFUSALS[reason]
        super().__init__(self.message)


INVITATION_REFUSALS = {
    "invalid": "This invitation link is not valid. Check that you copied all of it.",
    "expired": "This invitation has expired. Ask an owner of the organization for a new one.",
    "revoked": "This invitation was withdrawn by the organization.",
    "used": "This invitation has already been used.",
    "staff": "Operator (staff) accounts cannot join customer organizations.",
    "not_yours": "This invitation is for another e-mail address.",
}


def invitation_refusal(
    invitation: Invitation | None, user: AbstractBaseUser, *, require_email_match: bool
) -> InvitationError | None:
    """Why `user` cannot accept `invitation` now, or None (also None when they already did:
    accepting twice is idempotent)."""
    if invitation is None:
        return InvitationError("invalid")
    if require_email_match and invitation.email != (getattr(user, "email", "") or "").lower():
        return InvitationError("not_yours")
    if getattr(user, "is_staff", False) or getattr(user, "is_superuser", False):
        return InvitationError("staff")
    if invitation.accepted_at is not None:
        return None if invitation.accepted_by_id == user.pk else InvitationError("used")
    if invitation.revoked_at is not None:
        return InvitationError("revoked")
    if invitations.now() >= invitation.expires_at:
        return InvitationError("expired")
    return None


def normalize_email(email: str) -> str:
    email = (email or "").strip().lower()
    try:
        validate_email(email)
    except ValidationError:
        raise AccountsError("email: enter a valid e-mail address") from None
    return email


def invite_member(
    *, org: Organization, email: str, role: str, invited_by: str, base_url: str
) -> Invitation:
    """Invite an address into `org`; the e-mail goes out off the request path.

    The same work and the same result whoever the address belongs to (an account, nobody, a
    member already, a staff account), so the answer cannot enumerate accounts. A staff
    address's invitation is recorded and composed like any other but not sent, and a staff
    account can never accept one. An earlier pending invitation of the address is replaced.
    """
    email = normalize_email(email)
    _check_role(role)
    # One query, always made: whether the invitation may be delivered at all.
    deliverable = not (
        get_user_model()
        .objects.filter(Q(is_staff=True) | Q(is_superuser=True), email__iexact=email)
        .exists()
    )
    now = invitations.now()
    with transaction.atomic():
        Invitation.objects.filter(
            org=org, email=email, accepted_at__isnull=True, revoked_at__isnull=True
        ).update(revoked_at=now)
        invitation = Invitation.objects.create(
            org=org,
            email=email,
            role=role,
            invited_by=invited_by[:150],
            created_at=now,
            expires_at=now + invitations.INVITATION_TTL,
        )
    link = base_url.rstrip("/") + invitation_path(invitation)
    message = invitations.compose(
        to=email,
        org_name=org.name,
        role=role,
        inviter=invited_by,
        link=link,
        expires_at=invitation.expires_at,
    )
    invitations.deliver(message, deliverable=deliverable)
    return invitation


def invitation_path(invitation: Invitation) -> str:
    from django.urls import reverse

    return reverse("dashboard:invitation-link", args=[invitations.make_token(invitation.pk)])


@transaction.atomic
def revoke_invitation(*, invitation: Invitation) -> Invitation:
    """Withdraw a pending invitation. Idempotent; an accepted one stays accepted."""
    invitation = Invitation.objects.select_for_update().get(pk=invitation.pk)
    if invitation.revoked_at is None and invitation.accepted_at is None:
        invitation.revoked_at = invitations.now()
        invitation.save(update_fields=["revoked_at"])
    return invitation


@transaction.atomic
def accept_invitation(
    *, invitation_id: int, user: AbstractBaseUser, require_email_match: bool
) -> Membership:
    """Join the org as the invited role. Accepting twice is idempotent (the membership is
    returned); an existing membership keeps its role. Raises InvitationError.

    `require_email_match`: from the dashboard list, the account's address must be the invited
    one; from the e-mailed link, holding the link is the proof.
    """
    invitation = (
        Invitation.objects.select_for_update()
        .select_related("org")
        .filter(pk=invitation_id)
        .first()
    )
    refusal = invitation_refusal(invitation, user, require_email_match=require_email_match)
    if refusal is not None:
        raise refusal
    assert invitation is not None  # invitation_refusal said "invalid" otherwise
    if invitation.accepted_at is not None:  # accepted by this user before: idempotent
        membership = Membership.objects.filter(user=user, org=invitation.org).first()
        if membership is None:  # removed since: the used invitation does not bring them back
            raise InvitationError("used")
        return membership
    membership, _ = Membership.objects.get_or_create(
        user=user, org=invitation.org, defaults={"role": invitation.role}
    )
    invitation.accepted_at = invitations.now()
    invitation.accepted_by = user
    invitation.save(update_fields=["accepted_at", "accepted_by"])
    audit(
        "member.join",
        org_id=invitation.org_id,
        member=user.get_username(),
        role=membership.role,
        invitation_id=invitation.pk,
    )
    return membership


def _check_concurrency(value: int | None, what: str = "max concurrency") -> None:
    if value is not None and value < 1:
        raise AccountsError(f"{what} must be a positive integer", "max_concurrency")


CAP_PERIODS = tuple(ApiKey.CapPeriod.values)
MAX_ALLOWED_MODELS = 100


def _check_period(period: str) -> str:
    if period not in CAP_PERIODS:
        raise AccountsError(
            f"spend cap period must be one of {', '.join(CAP_PERIODS)}", "spend_cap_period"
        )
    return period


def _check_expiry(expires_at: datetime | None) -> datetime | None:
    if expires_at is None:
        return None
    if timezone.is_naive(expires_at):
        raise AccountsError("expiry needs a time zone (e.g. 2027-01-31T00:00:00Z)", "expires_at")
    if expires_at <= timezone.now():
        raise AccountsError("expiry must be in the future", "expires_at")
    return expires_at


def clean_allowed_models(raw: object) -> list[str]:
    """An allow-list as canonical catalog ids, in the order given, each once. Names may be ids
    or aliases in any case; an unknown one raises AccountsError naming its position."""
    if raw is None:
        return []
    if not isinstance(raw, list | tuple):
        raise AccountsError("allowed models must be a list of model ids", "allowed_models")
    if len(raw) > MAX_ALLOWED_MODELS:
        raise AccountsError(
            f"allowed models: at most {MAX_ALLOWED_MODELS} entries", "allowed_models"
        )
    names = selectors.catalog_model_names()
    out: list[str] = []
    for i, entry in enumerate(raw):
        where = f"allowed_models[{i}]"
        if not isinstance(entry, str) or not entry.strip():
            raise AccountsError(f"{where}: must be a model id", "allowed_models")
        if is_auto(entry):
            raise AccountsError(
                f"{where}: {AUTO_MODEL_ID} is a chain, not a model; list the models it may use",
                "allowed_models",
            )
        canonical = names.get(entry.strip().lower())
        if canonical is None:
            raise AccountsError(f"{where}: unknown model {entry.strip()[:128]!r}", "allowed_models")
        if canonical not in out:
            out.append(canonical)
    return out


def clean_allowed_ips(raw: object) -> list[str]:
    """An IP allow-list as canonical CIDRs; a bad entry raises AccountsError naming it."""
    if raw is None:
        return []
    if isinstance(raw, str):
        raw = ip_allow.split_text(raw)
    if not isinstance(raw, list | tuple):
        raise AccountsError("allowed IPs must be a list of CIDRs", "allowed_ips")
    try:
        return ip_allow.clean_networks(raw)
    except ip_allow.InvalidNetwork as exc:
        raise AccountsError(f"allowed IPs: {exc}", "allowed_ips") from None


def create_api_key(
    *,
    org: Organization,
    name: str = "",
    rpm_limit: int | None = None,
    spend_cap_nano: int | None = None,
    created_by: AbstractBaseUser | None = None,
    max_concurrency: int | None = None,
    spend_cap_period: str = ApiKey.CapPeriod.MONTH,
    allowed_models: list[str] | None = None,
    expires_at: datetime | None = None,
    allowed_ips: list[str] | None = None,
) -> NewKey:
    if rpm_limit is not None and rpm_limit < 1:
        raise AccountsError("rpm must be a positive integer", "rpm_limit")
    _check_concurrency(max_concurrency)
    if spend_cap_nano is not None and spend_cap_nano < 0:
        raise AccountsError("spend cap must not be negative", "spend_cap_usd")
    _check_period(spend_cap_period)
    _check_expiry(expires_at)
    allowed = clean_allowed_models(allowed_models)
    ips = clean_allowed_ips(allowed_ips)
    secret = keys.generate()
    key = ApiKey.objects.create(
        org=org,
        name=name.strip(),
        prefix=keys.display_prefix(secret),
        key_hash=keys.hash_key(secret),
        rpm_limit=rpm_limit,
        max_concurrency=max_concurrency,
        spend_cap_nano=spend_cap_nano,
        spend_cap_period=spend_cap_period,
        allowed_models=allowed,
        allowed_ips=ips,
        expires_at=expires_at,
        created_by=created_by,
    )
    audit("api_key.create", org_id=org.pk, key_prefix=key.prefix, key_id=key.pk)
    return NewKey(key=key, secret=secret)


_KEEP: Any = object()


def update_api_key_limits(
    *,
    key: ApiKey,
    rpm_limit: int | None,
    spend_cap_nano: int | None,
    name: str | None = None,
    max_concurrency: int | None = _KEEP,
    spend_cap_period: str = _KEEP,
    allowed_models: list[str] | None = _KEEP,
    expires_at: datetime | None = _KEEP,
    allowed_ips: list[str] | None = _KEEP,
) -> ApiKey:
    """Writes both money/rate limits; the other fields only when given (None clears a limit,
    the allow-list or the expiry). Every gateway process applies it within EZAT_KEY_CACHE_TTL."""
    if rpm_limit is not None and rpm_limit < 1:
        raise AccountsError("rpm must be a positive integer", "rpm_limit")
    if spend_cap_nano is not None and spend_cap_nano < 0:
        raise AccountsError("spend cap must not be negative", "spend_cap_usd")
    if key.revoked_at is not None:
        raise AccountsError("a revoked key cannot be changed")
    key.rpm_limit = rpm_limit
    key.spend_cap_nano = spend_cap_nano
    fields = ["rpm_limit", "spend_cap_nano"]
    if max_concurrency is not _KEEP:
        _check_concurrency(max_concurrency)
        key.max_concurrency = max_concurrency
        fields.append("max_concurrency")
    if spend_cap_period is not _KEEP:
        key.spend_cap_period = _check_period(spend_cap_period)
        fields.append("spend_cap_period")
    if allowed_models is not _KEEP:
        key.allowed_models = clean_allowed_models(allowed_models)
        fields.append("allowed_models")
    if allowed_ips is not _KEEP:
        key.allowed_ips = clean_allowed_ips(allowed_ips)
        fields.append("allowed_ips")
    if expires_at is not _KEEP and expires_at != key.expires_at:
        key.expires_at = _check_expiry(expires_at)
        fields.append("expires_at")
    if name is not None:
        key.name = name.strip()
        fields.append("name")
    key.save(update_fields=fields)
    audit(
        "api_key.update",
        org_id=key.org_id,
        key_prefix=key.prefix,
        rpm_limit=rpm_limit,
        spend_cap_nano=spend_cap_nano,
        spend_cap_period=key.spend_cap_period,
        allowed_models=key.allowed_models,
        allowed_ips=key.allowed_ips,
        expires_at=None if key.expires_at is None else key.expires_at.isoformat(),
    )
    return key


@transaction.atomic
def set_api_key_disabled(*, key: ApiKey, disabled: bool) -> ApiKey:
    """Disable (refused with a 401 saying so) or enable again. Idempotent; reversible, unlike
    revoking. Every gateway process applies it within EZAT_KEY_CACHE_TTL."""
    key = ApiKey.objects.select_for_update().get(pk=key.pk)
    if key.revoked_at is not None:
        raise AccountsError("a revoked key cannot be enabled or disabled")
    if disabled == (key.disabled_at is not None):
        return key
    key.disabled_at = timezone.now() if disabled else None
    key.save(update_fields=["disabled_at"])
    audit(
        "api_key.disable" if disabled else "api_key.enable",
        org_id=key.org_id,
        key_prefix=key.prefix,
        key_id=key.pk,
    )
    return key


@transaction.atomic
def revoke_api_key(*, key: ApiKey) -> ApiKey:
    """Idempotent. Every gateway process stops accepting the key within EZAT_KEY_CACHE_TTL."""
    key = ApiKey.objects.select_for_update().get(pk=key.pk)
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
        audit("api_key.revoke", org_id=key.org_id, key_prefix=key.prefix, key_id=key.pk)
    return key


def create_management_key(
    *, org: Organization, name: str = "", created_by: AbstractBaseUser | None = None
) -> tuple[ManagementKey, str]:
    secret = keys.generate(keys.MANAGEMENT_PREFIX)
    key = ManagementKey.objects.create(
        org=org,
        name=name.strip(),
        prefix=keys.display_prefix(secret),
        key_hash=keys.hash_key(secret),
        created_by=created_by,
    )
    audit("management_key.create", org_id=org.pk, key_prefix=key.prefix, key_id=key.pk)
    return key, secret


_UNSET: Any = object()


@transaction.atomic
def patch_api_key(
    *,
    key: ApiKey,
    name: str | None = None,
    rpm_limit: int | None = _UNSET,
    spend_cap_nano: int | None = _UNSET,
    max_concurrency: int | None = _UNSET,
    spend_cap_period: str = _UNSET,
    allowed_models: list[str] | None = _UNSET,
    expires_at: datetime | None = _UNSET,
    allowed_ips: list[str] | None = _UNSET,
) -> ApiKey:
    """Change only what was given (None clears a limit), under a row lock.

    `update_api_key_limits` writes both limits at once; reading the current values and writing
    them back unlocked would let two concurrent PATCHes of different fields undo each other.
    """
    locked = ApiKey.objects.select_for_update().get(pk=key.pk)
    return update_api_key_limits(
        key=locked,
        rpm_limit=locked.rpm_limit if rpm_limit is _UNSET else rpm_limit,
        spend_cap_nano=locked.spend_cap_nano if spend_cap_nano is _UNSET else spend_cap_nano,
        name=name,
        max_concurrency=_KEEP if max_concurrency is _UNSET else max_concurrency,
        spend_cap_period=_KEEP if spend_cap_period is _UNSET else spend_cap_period,
        allowed_models=_KEEP if allowed_models is _UNSET else allowed_models,
        expires_at=_KEEP if expires_at is _UNSET else expires_at,
        allowed_ips=_KEEP if allowed_ips is _UNSET else allowed_ips,
    )


def set_org_concurrency(*, org: Organization, max_concurrency: int | None) -> Organization:
    """The org's limit of requests in flight across its keys (None = the default)."""
    _check_concurrency(max_concurrency)
    org.max_concurrency = max_concurrency
    org.save(update_fields=["max_concurrency"])
    return org


@transaction.atomic
def revoke_management_key(*, key: ManagementKey) -> ManagementKey:
    """Idempotent: revoking twice keeps the first revocation time."""
    key = ManagementKey.objects.select_for_update().get(pk=key.pk)
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
        audit("management_key.revoke", org_id=key.org_id, key_prefix=key.prefix, key_id=key.pk)
    return key


# --- Fallback policies ----------------------------------------------------------------------------


@transaction.atomic
def set_fallbacks(
    *, org: Organization, model: str, fallbacks: list[object], actor: str = ""
) -> FallbackPolicy | None:
    """The org's chain for `model` (a catalog id or alias, or ezat/auto), replacing any it had.
    An empty list turns fallbacks off for that model (ezat/auto: back to the catalog's chain).

    Every gateway process applies it within EZAT_KEY_CACHE_TTL seconds. Raises AccountsError
    naming the bad entry (`fallbacks[2]`).
    """
    names = selectors.catalog_model_names()
    owner = AUTO_MODEL_ID if is_auto(model) else names.get(model.strip().lower())
    if owner is None:
        raise AccountsError(f"model: unknown model {model.strip()[:128]!r}")
    try:
        chain = check_chain(
            fallbacks,
            param="fallbacks",
            canonical=lambda name: names.get(name.strip().lower()),
            owner=None if owner == AUTO_MODEL_ID else owner,
        )
    except ChainError as exc:
        raise AccountsError(exc.message) from None
    if not chain:
        FallbackPolicy.objects.filter(org=org, model_id=owner).delete()
        return None
    policy, _ = FallbackPolicy.objects.update_or_create(
        org=org, model_id=owner, defaults={"fallbacks": list(chain), "updated_by": actor[:150]}
    )
    return policy


def clear_fallbacks(*, org: Organization, model: str) -> bool:
    """Turn fallbacks off for one model (ezat/auto: back to the catalog's chain). Idempotent;
    returns whether there was a chain."""
    names = selectors.catalog_model_names()
    owner = AUTO_MODEL_ID if is_auto(model) else names.get(model.strip().lower(), model.strip())
    deleted, _ = FallbackPolicy.objects.filter(org=org, model_id=owner).delete()
    return bool(deleted)
