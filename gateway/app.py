"""The gateway's ASGI application (placeholder until the handlers land)."""

from __future__ import annotations


class GatewayApp:
    async def __call__(self, scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def lifespan(self, scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
