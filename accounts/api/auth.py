"""Authentication for the management API: management keys (`ezat_mk_…`) as bearer tokens.

A management key belongs to one organisation and acts as its owner there and nowhere else.
Inference keys (`ezat_sk_…`) are refused outright: a key leaked from an application's config
must not be able to mint more keys or raise spend caps.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db.models import Q
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.request import Request

from accounts import keys
from accounts.models import ManagementKey

# Writing last_used_at on every call would turn every read into a write; a minute is plenty
# for "is this key still used?".
LAST_USED_RESOLUTION = timedelta(minutes=1)


class ManagementKeyPrincipal:
    """`request.user` for a management-key request: not a person, but authenticated.

    It quacks enough like a user for DRF (`is_authenticated`) and throttling (`pk`) while
    making it impossible to mistake for a session user (`is_management_key`).
    """

    is_authenticated = True
    is_anonymous = False
    is_active = True
    is_staff = False
    is_superuser = False
    is_management_key = True

    def __init__(self, key: ManagementKey) -> None:
        self.key = key
        self.pk = None
        self.id = None
        self.username = f"management-key:{key.prefix}"

    def __str__(self) -> str:
        return self.username


class ManagementKeyAuthentication(BaseAuthentication):
    """`Authorization: Bearer ezat_mk_…`. Without a bearer header, later classes get a turn."""

    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[ManagementKeyPrincipal, ManagementKey] | None:
        header = get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("expected `Authorization: Bearer ezat_mk_…`")
        try:
            token = header[1].decode()
        except UnicodeDecodeError as exc:
            raise exceptions.AuthenticationFailed("invalid management key") from exc
        return self.authenticate_token(token)

    def authenticate_token(self, token: str) -> tuple[ManagementKeyPrincipal, ManagementKey]:
        if token.startswith(keys.PREFIX):
            raise exceptions.AuthenticationFailed(
                "inference keys (ezat_sk_…) cannot use the management API; "
                "create a management key (ezat_mk_…)"
            )
        # The checksum rejects typos and junk without touching the database.
        if not keys.is_well_formed(token, keys.MANAGEMENT_PREFIX):
            raise exceptions.AuthenticationFailed("invalid management key")
        key = (
            ManagementKey.objects.select_related("org")
            .filter(key_hash=keys.hash_key(token))
            .first()
        )
        if key is None:
            raise exceptions.AuthenticationFailed("invalid management key")
        if key.revoked_at is not None:
            raise exceptions.AuthenticationFailed("management key revoked")
        self._touch(key)
        return ManagementKeyPrincipal(key), key

    @staticmethod
    def _touch(key: ManagementKey) -> None:
        now = timezone.now()
        stale = now - LAST_USED_RESOLUTION
        # Conditional UPDATE: concurrent requests don't pile up writes on the same row.
        ManagementKey.objects.filter(pk=key.pk).filter(
            Q(last_used_at__isnull=True) | Q(last_used_at__lt=stale)
        ).update(last_used_at=now)

    def authenticate_header(self, request: Request) -> str:
        # Makes DRF answer 401 (not 403) to unauthenticated requests.
        return f'{self.keyword} realm="management-api"'


class ManagementKeyScheme(OpenApiAuthenticationExtension):
    """Documents the bearer scheme in the OpenAPI schema."""

    target_class = "accounts.api.auth.ManagementKeyAuthentication"
    name = "managementKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "ezat_mk_…",
            "description": "A management key; acts as an owner of the organisation it belongs to.",
        }
