"""Providers: how a Messages call reaches a model on each deployment kind.

docs/design.md "Platforms" and docs/providers.md: each provider is a package here with its
address and auth, a pure rewrite of the Messages body and headers into its own request, a decoder
from its framing to Anthropic stream events, its reply reader and its error mapping. The exchange
stays provider-blind: it sees Anthropic events, replies and errors whatever answered. That
Anthropic-shaped middle is EZAT's internal dialect (gateway/dialect.py names it).

Each provider module is imported when a deployment of its kind is first used, so a process that
serves only Claude on Anthropic never loads botocore, google-auth or the OpenAI translators (idle
RSS unchanged).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from gateway.errors import GatewayError, from_upstream
from gateway.protocols.anthropic.sse import SSEParser

if TYPE_CHECKING:
    from catalog.snapshot import DeploymentInfo, Route
    from gateway.protocols.anthropic.sse import SSEEvent

MESSAGES_PATH = "/v1/messages"
COUNT_PATH = "/v1/messages/count_tokens"

# Deployment kind → the module holding its provider, and the provider's name there.
_MODULES = {
    "anthropic": ("gateway.providers.anthropic", "PROVIDER"),
    "bedrock": ("gateway.providers.bedrock", "PROVIDER"),
    "vertex": ("gateway.providers.vertex", "PROVIDER"),
    "openai": ("gateway.providers.openai.provider", "OPENAI"),
    "azure-openai": ("gateway.providers.openai.provider", "OPENAI"),
}


class StreamDecoder(Protocol):
    def feed(self, chunk: bytes, limit: int | None = None) -> list[SSEEvent]:
        """The events completed by `chunk`. `limit` may cap how many are returned now; the
        others come from the next call (`feed(b"")`). A decoder may ignore it."""
        ...


@dataclass(slots=True)
class ProviderRequest:
    """One call as the provider takes it."""

    path: str  # appended to the deployment's base path
    headers: str  # the provider's header lines (auth, content type, versions), each ending CRLF
    body: bytes
    # What the decoder and the reply reader need to know of this call (a translator's tool-name
    # map, say); None for providers whose answers need no context.
    state: Any = None


class ProviderCall(NamedTuple):
    """One Messages call as the upstream client hands it to a provider (a tuple: built once
    per attempt, on every request's path)."""

    deployment: DeploymentInfo
    target: Any  # where it goes: scheme in origin[0], host_header, path_prefix
    path: str  # MESSAGES_PATH or COUNT_PATH (or a relayed API's path, for OpenAI)
    body: bytes  # the Messages body with the provider's model id
    beta: str | None  # the caller's anthropic-beta header
    route: Route | None = None  # what the catalog says of the model there
    tenant: tuple[int, str] | None = None  # org and session, for providers keying a cache by them


class Provider(Protocol):
    async def prepare(self, call: ProviderCall) -> ProviderRequest:
        """The provider's request for a Messages call."""
        ...

    def error(self, status: int, headers: dict[str, str], payload: bytes) -> GatewayError: ...

    def decoder(self, state: Any) -> StreamDecoder: ...

    def json_reply(self, path: str, payload: bytes, state: Any) -> bytes:
        """The provider's JSON answer as Anthropic's (a Message, or count_tokens' answer)."""
        ...


class AnthropicAnswers:
    """The answering half of a provider whose answers are Anthropic's own (Anthropic's API, and
    Claude on Vertex): errors in Anthropic's envelope, a stream of its SSE events, replies as
    they came. Such a provider writes only its `prepare` (and `error`, where its platform has
    an envelope of its own)."""

    def error(self, status: int, headers: dict[str, str], payload: bytes) -> GatewayError:
        return from_upstream(status, payload)

    def decoder(self, state: Any) -> SSEParser:
        return SSEParser()

    def json_reply(self, path: str, payload: bytes, state: Any) -> bytes:
        return payload


class PlatformAuthError(ConnectionError):
    """The provider's credentials could not be obtained (token refresh, credential chain):
    the attempt fails like an unreachable provider, and another deployment is tried."""


_providers: dict[str, Provider] = {}


def provider(kind: str) -> Provider:
    found = _providers.get(kind)
    if found is None:
        where = _MODULES.get(kind)
        if where is None:
            raise ValueError(f"no provider for deployment kind {kind!r}")
        found = getattr(importlib.import_module(where[0]), where[1])
        _providers[kind] = found
    return found


def upstream_error(kind: str, status: int, headers: dict[str, str], payload: bytes) -> GatewayError:
    """A provider's error answer as a GatewayError, whatever its envelope."""
    return provider(kind).error(status, headers, payload)


def stream_decoder(kind: str, state: Any = None) -> StreamDecoder:
    return provider(kind).decoder(state)


def json_reply(kind: str, path: str, payload: bytes, state: Any = None) -> bytes:
    return provider(kind).json_reply(path, payload, state)


def local_reply(kind: str, path: str, body: bytes) -> bytes | None:
    """The answer a provider gives without a call (count_tokens where the provider has no such
    endpoint), or None: call it."""
    answer = getattr(provider(kind), "local_reply", None)
    return answer(path, body) if answer is not None else None
