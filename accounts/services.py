"""Writes for orgs, memberships and keys."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from accounts import keys, selectors
from accounts.models import ApiKey, FallbackPolicy, ManagementKey, Membership, Organization
from catalog.chains import AUTO_MODEL_ID, ChainError, check_chain, is_auto


class AccountsError(ValueError):
    """Bad input to an accounts operation; the message is shown to the user."""


@dataclass(frozen=True, slots=True)
class NewKey:
    """A key right after creation: the only time the secret exists in clear."""

    key: ApiKey
    secret: str


def create_org(*, name: str) -> Organization:
    name = name.strip()
    if not name:
        raise AccountsError("organization name must not be empty")
    if Organization.objects.filter(name=name).exists():
        raise AccountsError(f"organization {name!r} already exists")
    return Organization.objects.create(name=name)


def add_member(*, org: Organization, user: AbstractBaseUser, role: str) -> Membership:
    if role not in Membership.Role.values:
        raise AccountsError(f"role must be one of {', '.join(Membership.Role.values)}")
    membership, _ = Membership.objects.update_or_create(user=user, org=org, defaults={"role": role})
    return membership


@transaction.atomic
def remove_member(*, membership: Membership) -> None:
    """Remove a user from an org. The last owner cannot leave: someone must manage the org."""
    org_memberships = Membership.objects.select_for_update().filter(org_id=membership.org_id)
    owners = [m for m in org_memberships if m.role == Membership.Role.OWNER]
    if membership.role == Membership.Role.OWNER and len(owners) <= 1:
        raise AccountsError("the last owner cannot be removed; make someone else owner first")
    Membership.objects.filter(pk=membership.pk).delete()


def create_api_key(
    *,
    org: Organization,
    name: str = "",
    rpm_limit: int | None = None,
    spend_cap_nano: int | None = None,
    created_by: AbstractBaseUser | None = None,
) -> NewKey:
    if rpm_limit is not None and rpm_limit < 1:
        raise AccountsError("rpm must be a positive integer")
    if spend_cap_nano is not None and spend_cap_nano < 0:
        raise AccountsError("spend cap must not be negative")
    secret = keys.generate()
    key = ApiKey.objects.create(
        org=org,
        name=name.strip(),
        prefix=keys.display_prefix(secret),
        key_hash=keys.hash_key(secret),
        rpm_limit=rpm_limit,
        spend_cap_nano=spend_cap_nano,
        created_by=created_by,
    )
    return NewKey(key=key, secret=secret)


def update_api_key_limits(
    *, key: ApiKey, rpm_limit: int | None, spend_cap_nano: int | None, name: str | None = None
) -> ApiKey:
    if rpm_limit is not None and rpm_limit < 1:
        raise AccountsError("rpm must be a positive integer")
    if spend_cap_nano is not None and spend_cap_nano < 0:
        raise AccountsError("spend cap must not be negative")
    key.rpm_limit = rpm_limit
    key.spend_cap_nano = spend_cap_nano
    fields = ["rpm_limit", "spend_cap_nano"]
    if name is not None:
        key.name = name.strip()
        fields.append("name")
    key.save(update_fields=fields)
    return key


@transaction.atomic
def revoke_api_key(*, key: ApiKey) -> ApiKey:
    """Idempotent. Every gateway process stops accepting the key within EZAT_KEY_CACHE_TTL."""
    key = ApiKey.objects.select_for_update().get(pk=key.pk)
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
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
    return key, secret


_UNSET: Any = object()


@transaction.atomic
def patch_api_key(
    *,
    key: ApiKey,
    name: str | None = None,
    rpm_limit: int | None = _UNSET,
    spend_cap_nano: int | None = _UNSET,
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
    )


@transaction.atomic
def revoke_management_key(*, key: ManagementKey) -> ManagementKey:
    """Idempotent: revoking twice keeps the first revocation time."""
    key = ManagementKey.objects.select_for_update().get(pk=key.pk)
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
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
