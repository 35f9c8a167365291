"""Platform adapters: how a Messages request reaches Claude on each deployment kind.

docs/design.md "Platforms": each adapter has the URL of a request for a model, a pure rewrite of the
Messages body and headers into the platform's form, its authentication (a signer or a token
source, refreshed off the request path) and a decoder from the platform's framing to Anthropic
stream events. The exchange stays platform-blind: it sees Anthropic events, replies and errors
whatever the platform.

The Anthropic kind is not here: the upstream client writes its head inline (the hot path as it
was). Bedrock's module imports botocore and Vertex's google-auth, each only when a deployment of
that kind is first used, so a process without them never loads either (idle RSS unchanged).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import orjson

from gateway.errors import GatewayError, from_upstream
from gateway.protocols.anthropic.sse import SSEEvent, SSEParser

if TYPE_CHECKING:
    from catalog.snapshot import DeploymentInfo

MESSAGES_PATH = "/v1/messages"
COUNT_PATH = "/v1/messages/count_tokens"


class StreamDecoder(Protocol):
    def feed(self, chunk: bytes, limit: int | None = None) -> list[SSEEvent]:
        """The events completed by `chunk`. `limit` may cap how many are returned now; the
        others come from the next call (`feed(b"")`). A decoder may ignore it."""
        ...


class Platform(Protocol):
    async def prepare(
        self, deployment: DeploymentInfo, target: Any, path: str, body: bytes, beta: str | None
    ) -> tuple[str, str, bytes]:
        """(path, extra header lines, body) of the platform's request for a Messages call;
        `target` is where it goes (scheme in origin[0], host_header, path_prefix)."""
        ...

    def error(self, status: int, headers: dict[str, str], payload: bytes) -> GatewayError: ...

    def decoder(self) -> StreamDecoder: ...

    def json_reply(self, path: str, payload: bytes) -> bytes: ...


class PlatformAuthError(ConnectionError):
    """The platform's credentials could not be obtained (token refresh, credential chain):
    the attempt fails like an unreachable provider, and another deployment is tried."""


_adapters: dict[str, Any] = {}


def adapter(kind: str) -> Platform:
    found = _adapters.get(kind)
    if found is None:
        if kind == "bedrock":
            from gateway.platforms.bedrock import BedrockPlatform

            found = BedrockPlatform()
        elif kind == "vertex":
            from gateway.platforms.vertex import VertexPlatform

            found = VertexPlatform()
        else:
            raise ValueError(f"no platform adapter for deployment kind {kind!r}")
        _adapters[kind] = found
    return found


def upstream_error(kind: str, status: int, headers: dict[str, str], payload: bytes) -> GatewayError:
    """A provider's error answer as a GatewayError, whatever the platform's envelope."""
    if kind == "anthropic":
        return from_upstream(status, payload)
    return adapter(kind).error(status, headers, payload)


def stream_decoder(kind: str) -> StreamDecoder:
    if kind == "anthropic":
        return SSEParser()
    return adapter(kind).decoder()


def json_reply(kind: str, path: str, payload: bytes) -> bytes:
    if kind == "anthropic":
        return payload
    return adapter(kind).json_reply(path, payload)


def platform_body(body: bytes, version: str, *, keep_model: bool, keep_stream: bool) -> Any:
    """The Messages body as a platform takes it: `anthropic_version` in the body, no `model`
    (the URL names it) unless kept, `stream` only where the platform reads it."""
    data = orjson.loads(body)
    stream = bool(data.get("stream"))
    model = data.get("model") if keep_model else data.pop("model", None)
    if not keep_stream:
        data.pop("stream", None)
    data["anthropic_version"] = version
    return data, stream, model
