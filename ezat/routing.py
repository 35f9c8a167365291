"""WebSocket routes (the dashboard's live request feed)."""

from __future__ import annotations

websocket_urlpatterns: list = []
