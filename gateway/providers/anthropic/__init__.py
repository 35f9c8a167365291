"""Claude on Anthropic's own API: the request as the client's body, with EZAT's key.

Anthropic's API is EZAT's internal dialect, so nothing is translated: the body goes as it is,
the stream is split into events by the SSE parser, the reply passes as it came.
"""

from __future__ import annotations

from typing import Any

from catalog.snapshot import DeploymentInfo
from gateway.errors import GatewayError, from_upstream
from gateway.protocols.anthropic.sse import SSEParser
from gateway.providers import ProviderRequest

ANTHROPIC_VERSION = "2023-06-01"


class AnthropicProvider:
    async def prepare(
        self,
        deployment: DeploymentInfo,
        target: Any,
        path: str,
        body: bytes,
        beta: str | None,
        **call: Any,
    ) -> ProviderRequest:
        headers = (
            f"x-api-key: {deployment.api_key}\r\n"
            f"anthropic-version: {ANTHROPIC_VERSION}\r\n"
            "content-type: application/json\r\n"
        )
        if beta:
            headers += f"anthropic-beta: {beta}\r\n"
        return ProviderRequest(path, headers, body)

    def error(self, status: int, headers: dict[str, str], payload: bytes) -> GatewayError:
        return from_upstream(status, payload)

    def decoder(self, state: Any) -> SSEParser:
        return SSEParser()

    def json_reply(self, path: str, payload: bytes, state: Any) -> bytes:
        return payload


PROVIDER = AnthropicProvider()
