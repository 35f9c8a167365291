"""WebSocket routes (the dashboard's live request feed).

The origin check matters: the feed authenticates with the session cookie, so without it any
site a signed-in user visits could open the feed in their name (cross-site WebSocket hijacking).
"""

from __future__ import annotations

from channels.security.websocket import AllowedHostsOriginValidator
from django.urls import path

from billing.consumers import RequestFeedConsumer

websocket_urlpatterns: list = [
    path("ws/requests/", AllowedHostsOriginValidator(RequestFeedConsumer.as_asgi())),
]
