"""WebSocket consumer for the dashboard's live request log (`/ws/requests/?org=<id>`)."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from accounts.selectors import is_member
from billing.live import group_name

# Close codes in the 4000–4999 application range; before accept() they reject the handshake.
CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403


class RequestFeedConsumer(AsyncJsonWebsocketConsumer):
    """Joins `org.<id>.requests` if, and only if, the signed-in user is a member of that org."""

    group: str | None = None

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        org_id = _org_id(self.scope.get("query_string", b""))
        # Membership is checked once, at connect: a removed member keeps a feed open until the
        # tab closes, which shows them nothing they could not have seen a moment before.
        if org_id is None or not await database_sync_to_async(is_member)(user.pk, org_id):
            await self.close(code=CLOSE_FORBIDDEN)
            return
        self.group = group_name(org_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if self.group is not None:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        """The feed is one-way; anything the browser sends is ignored."""

    async def request_row(self, event: dict[str, Any]) -> None:
        await self.send_json(event["row"])

    async def request_rows(self, event: dict[str, Any]) -> None:
        """Rows coalesced by the gateway's LiveFeed; the page takes them one message each."""
        for row in event["rows"]:
            await self.send_json(row)


def _org_id(query_string: bytes) -> int | None:
    values = parse_qs(query_string.decode("latin-1")).get("org", [])
    try:
        return int(values[0]) if values else None
    except ValueError:
        return None
