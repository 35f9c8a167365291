"""OAuth2 access tokens for Vertex deployments (google-auth), refreshed off the request path.

A deployment's first request waits for its first token (there is nothing to send without one);
after that, requests only read the cached token. A refresh starts in the background once the
token is within EZAT_VERTEX_TOKEN_REFRESH_MARGIN seconds of expiring (a timer, and any request
that sees it due); it runs google-auth's blocking refresh in a worker thread. When a refresh fails
the deployment is cooled down (routing prefers the others) and the failure counted; requests keep
using the old token while it is valid, and a deployment left with no valid token fails its
attempts as unreachable, so they fail over.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from catalog.snapshot import DeploymentInfo
from gateway.metrics import SIDE_EFFECT_FAILURES
from gateway.providers import PlatformAuthError

logger = logging.getLogger(__name__)

SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)


def _credentials(deployment: DeploymentInfo) -> Any:
    import google.auth
    from google.oauth2 import service_account

    text = deployment.secrets.get("service_account_json")
    if text:
        return service_account.Credentials.from_service_account_info(
            json.loads(text), scopes=list(SCOPES)
        )
    credentials, _ = google.auth.default(scopes=list(SCOPES))
    return credentials


def _refresh_blocking(credentials: Any) -> tuple[str, float]:
    import google.auth.transport.urllib3
    import urllib3

    credentials.refresh(google.auth.transport.urllib3.Request(urllib3.PoolManager()))
    expiry = credentials.expiry  # naive UTC (google-auth's convention)
    expires_at = time.time() + 3600 if expiry is None else expiry.replace(tzinfo=dt.UTC).timestamp()
    return str(credentials.token), expires_at


@dataclass(slots=True)
class _Source:
    deployment_id: int
    credentials: Any
    token: str = ""
    expires_at: float = 0.0
    refreshing: asyncio.Task[None] | None = None
    timer: asyncio.TimerHandle | None = None
    failures: int = field(default=0)


class TokenCache:
    def __init__(self) -> None:
        self._sources: dict[tuple[int, int], _Source] = {}

    async def _source(self, deployment: DeploymentInfo) -> _Source:
        # Keyed by the key file too: a new one (rotated in the admin) gets its own tokens.
        key = (deployment.id, hash(deployment.secrets.get("service_account_json", "")))
        source = self._sources.get(key)
        if source is None:
            from google.auth.exceptions import GoogleAuthError

            try:
                # In a worker thread: Application Default Credentials read files and, on a
                # Google Cloud host, probe the metadata server; the event loop must not wait.
                credentials = await asyncio.to_thread(_credentials, deployment)
            except (GoogleAuthError, ValueError, KeyError) as exc:  # no ADC, a bad key
                SIDE_EFFECT_FAILURES.labels("vertex_credentials").inc()
                _cool_down(deployment.id)
                raise PlatformAuthError(f"no Google credentials ({type(exc).__name__})") from None
            # Another request may have resolved it meanwhile: keep the first.
            source = self._sources.setdefault(key, _Source(deployment.id, credentials))
        return source

    async def token(self, deployment: DeploymentInfo) -> str:
        source = await self._source(deployment)
        now = time.time()
        margin = settings.EZAT_VERTEX_TOKEN_REFRESH_MARGIN
        if source.token and now < source.expires_at - margin:
            return source.token
        self._start_refresh(source)
        if source.token and now < source.expires_at:
            return source.token  # due for refresh, still valid: the refresh runs aside
        assert source.refreshing is not None
        await asyncio.shield(source.refreshing)
        if not source.token or time.time() >= source.expires_at:
            raise PlatformAuthError("could not obtain a Google access token")
        return source.token

    def _start_refresh(self, source: _Source) -> None:
        loop = asyncio.get_running_loop()
        stale = source.refreshing is not None and source.refreshing.get_loop() is not loop
        if stale or source.refreshing is None or source.refreshing.done():
            source.refreshing = asyncio.get_running_loop().create_task(self._refresh(source))

    async def _refresh(self, source: _Source) -> None:
        try:
            token, expires_at = await asyncio.to_thread(_refresh_blocking, source.credentials)
        except Exception:  # RefreshError, transport errors: counted, cooled down
            source.failures += 1
            SIDE_EFFECT_FAILURES.labels("vertex_token_refresh").inc()
            logger.warning(
                "vertex token refresh failed",
                extra={"deployment_id": source.deployment_id},
                exc_info=True,
            )
            _cool_down(source.deployment_id)
            self._schedule(source, settings.EZAT_VERTEX_TOKEN_RETRY_SECONDS)
            return
        source.token, source.expires_at, source.failures = token, expires_at, 0
        margin = settings.EZAT_VERTEX_TOKEN_REFRESH_MARGIN
        self._schedule(source, max(expires_at - margin - time.time(), 1.0))

    def _schedule(self, source: _Source, delay: float) -> None:
        if source.timer is not None:
            source.timer.cancel()
        source.timer = asyncio.get_running_loop().call_later(delay, self._start_refresh, source)

    def clear(self) -> None:
        for source in self._sources.values():
            if source.timer is not None:
                source.timer.cancel()
            if source.refreshing is not None:
                source.refreshing.cancel()
        self._sources.clear()


def _cool_down(deployment_id: int) -> None:
    from gateway.routing import health

    health.cool_down(deployment_id)


tokens = TokenCache()
