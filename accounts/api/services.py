"""Writes the management API needs beyond `accounts.services`.

`patch_api_key` and `revoke_management_key` are general enough to move into
`accounts.services`; they live here so this API ships without editing a shared module.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from accounts.models import ApiKey, ManagementKey
from accounts.services import update_api_key_limits

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
