"""ASGI entry point: `ezat.asgi:application`.

The two inference APIs (`/v1/…`, `/openai/v1/…`) go straight to the gateway's ASGI handlers;
everything else (admin, dashboard, management API, /api/models, health) is served by Django
with its full middleware stack, and websockets by Channels.

Why a dispatcher in front of Django: measured on this machine (docs/design.md), Django's request
path costs ~0.55 ms of CPU per request with no middleware and ~1.2 ms more with the default
synchronous stack — the whole per-request budget of the gateway is 1 ms. The gateway handlers
still use Django's ORM, settings and apps; they just skip the request/response machinery.
"""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ezat.settings")

from channels.auth import AuthMiddlewareStack
from channels.routing import ProtocolTypeRouter, URLRouter
from django.core.asgi import get_asgi_application

django_app = get_asgi_application()

from django.conf import settings  # noqa: E402

if settings.EZAT_SERVE_STATIC:
    from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

    django_app = ASGIStaticFilesHandler(django_app)

from core import draining  # noqa: E402
from ezat.routing import websocket_urlpatterns  # noqa: E402
from gateway.app import GatewayApp  # noqa: E402

gateway_app = GatewayApp()
channels_app = ProtocolTypeRouter(
    {"http": django_app, "websocket": AuthMiddlewareStack(URLRouter(websocket_urlpatterns))}
)

_API_PREFIXES = ("/v1/", "/openai/v1/")
_HEALTHZ_BODY = b'{"status": "ok"}'


async def _healthz(send) -> None:  # type: ignore[no-untyped-def]
    """Liveness, answered here: a probe every few seconds should neither cost Django's request
    path nor load its URLconf (admin, dashboard, DRF: ~15 MB) into an API-only worker."""
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": _HEALTHZ_BODY})


async def _draining(path: str, send) -> None:  # type: ignore[no-untyped-def]
    """This node is shutting down (core/draining.py): /readyz says so, anything else is
    refused with a retryable 503 on a connection that is then closed."""
    body = b'{"status": "draining"}' if path == "/readyz" else _DRAINING_BODY
    await send(
        {
            "type": "http.response.start",
            "status": 503,
            "headers": [
                (b"content-type", b"application/json"),
                (b"retry-after", b"1"),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


_DRAINING_BODY = b'{"error": "this gateway node is shutting down; retry"}'


async def application(scope: dict, receive, send) -> None:  # type: ignore[no-untyped-def]
    kind = scope["type"]
    if kind != "http":
        if kind == "lifespan":
            await gateway_app.lifespan(scope, receive, send)
        else:
            await channels_app(scope, receive, send)
        return
    path = scope["path"]
    if draining.draining_since is not None and path not in draining.PASSTHROUGH_PATHS:
        if path.startswith(_API_PREFIXES):
            await gateway_app.refuse_draining(scope, receive, send)
        else:
            await _draining(path, send)
        return
    draining.inflight += 1
    try:
        if path.startswith(_API_PREFIXES):
            await gateway_app(scope, receive, send)
        elif path == "/healthz" and scope["method"] in ("GET", "HEAD"):
            await _healthz(send)
        else:
            await channels_app(scope, receive, send)
    finally:
        draining.inflight -= 1
