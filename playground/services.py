"""Playground writes: the session's short-lived key, and the expiry sweep.

The key is an ordinary key of the org (so a Playground request is authenticated, limited and
billed like any other), named "Playground · <user>", minted on first use in a session and
revoked EZAT_PLAYGROUND_KEY_TTL_SECONDS later by beat. Its secret is never sent to the browser:
it lives only in the server-side session, and the dashboard relays the browser's prompt to the
gateway with it (playground/relay.py).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from accounts.models import Organization
from accounts.services import create_api_key, revoke_api_key
from playground.models import PlaygroundKey

SESSION_KEYS = "ezat_playground_keys"
KEY_NAME_PREFIX = "Playground"
# A key this close to its expiry is replaced rather than used for one more run.
RENEW_MARGIN = timedelta(minutes=2)


def key_name(user: AbstractBaseUser) -> str:
    return f"{KEY_NAME_PREFIX} · {user.get_username()}"[:100]


def session_secret(session: Any, org: Organization, user: AbstractBaseUser) -> str:
    """The secret of this session's live Playground key for `org`, minting one if needed."""
    stored = dict(session.get(SESSION_KEYS) or {})
    entry = stored.get(str(org.pk))
    now = timezone.now()
    if (
        entry
        and PlaygroundKey.objects.filter(
            api_key_id=entry["id"],
            user=user,
            api_key__org=org,
            api_key__revoked_at__isnull=True,
            expires_at__gt=now + RENEW_MARGIN,
        ).exists()
    ):
        return str(entry["secret"])
    with transaction.atomic():
        new = create_api_key(org=org, name=key_name(user), created_by=user)
        PlaygroundKey.objects.create(
            api_key=new.key,
            user=user,
            expires_at=now + timedelta(seconds=settings.EZAT_PLAYGROUND_KEY_TTL_SECONDS),
        )
    stored[str(org.pk)] = {"id": new.key.pk, "secret": new.secret}
    session[SESSION_KEYS] = stored
    return new.secret


def revoke_expired_keys(now: datetime | None = None) -> int:
    """Revoke Playground keys past their expiry (idempotent; beat)."""
    now = now or timezone.now()
    count = 0
    expired = PlaygroundKey.objects.filter(
        expires_at__lte=now, api_key__revoked_at__isnull=True
    ).select_related("api_key")
    for row in expired:
        with transaction.atomic():
            revoke_api_key(key=row.api_key)
        count += 1
    return count
