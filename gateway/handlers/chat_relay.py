"""POST /openai/v1/chat/completions on OpenAI-kind models: the request relayed, not translated.

The body goes to the provider as the client sent it, with three changes: the model renamed to
the server's name, `stream_options.include_usage` always asked for (EZAT bills from it; without
it no usage arrives at all), and `prompt_cache_key` derived from the session when absent. Every
field the provider supports (temperature, seed, stop, logprobs, n, tools, response_format,
reasoning_effort, …) reaches it, and the provider is the one to refuse what it does not take:
the seed's refusals are Claude's limits and stay on Claude models (gateway/handlers/chat.py).

The answer comes back as the provider sent it, with the model renamed; a client that did not
ask for the usage chunk does not get it. An error mid-stream is `data: {"error": …}` then
`data: [DONE]`, and it is not billed (the provider does not bill a failed generation either).

Admission, holds, caps, routing, failover before the first chunk, the request log and billing
are the exchange's, as for Claude: the provider's chunks are read in the internal dialect by
gateway/providers/openai/relay.py, which keeps each chunk's bytes for the client.
"""

from __future__ import annotations

from typing import Any

import orjson

from accounts.keycache import KeyInfo
from catalog.platform_config import OPENAI_KINDS
from catalog.snapshot import ModelInfo
from gateway.chain import Candidate, ModelChain
from gateway.errors import GatewayError, openai_error_object
from gateway.exchange import Exchange, OpenStream
from gateway.handlers.common import RequestScope, input_estimate
from gateway.handlers.pump import After
from gateway.handlers.relay_base import (
    # The same names as the other relay imports (`duplicates` pairs the two lists): both
    # relays plug into this one base.
    RelayBody,
    RelayStream,
    RelaySurface,
    relay_context,
    serve_relayed,
    tally_media,
)
from gateway.http import ApiRequest, Send
from gateway.protocols.anthropic.sse import SSEEvent
from gateway.protocols.media import MediaTally
from gateway.providers.openai.cache_key import tenant_cache_key
from gateway.providers.openai.mapping import anthropic_usage
from gateway.providers.openai.relay import DONE
from gateway.routing import session_key

API = "chat"  # the usage record's label, as on the translated path
CHAT_PATH = "/chat/completions"
MAX_CHOICES = (
    128  # OpenAI's limit on `n` (https://platform.openai.com/docs/api-reference/chat/create)
)


def relays(models: ModelChain) -> bool:
    """Whether every model that may answer is served over Chat Completions only: then the
    request is relayed. A chain that mixes in Claude models goes the translated way
    (gateway/handlers/chat.py), whose translation serves both."""
    for m in models.models:  # loops, not all() over generators: it runs on every chat request
        if not m.routes:
            return False
        for r in m.routes:
            if r.deployment.kind not in OPENAI_KINDS:
                return False
    return True


def _positive(body: dict[str, Any], name: str, limit: int | None = None) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if type(value) is not int or value < 1 or (limit is not None and value > limit):
        bound = f" of at most {limit}" if limit is not None else ""
        raise GatewayError(400, f"{name}: must be a positive integer{bound}", param=name)
    return value


def _checked(body: dict[str, Any], model: ModelInfo) -> tuple[int, int]:
    """What EZAT itself needs of the body (the provider checks the rest): the messages, and the
    output limit and choice count the hold is sized by."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise GatewayError(400, "messages: required, a non-empty array", param="messages")
    for m in messages:
        if type(m) is not dict:
            raise GatewayError(400, "messages: each message must be an object", param="messages")
    if "stream" in body and not isinstance(body["stream"], bool):
        raise GatewayError(400, "stream: must be true or false", param="stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise GatewayError(400, "stream_options: must be an object", param="stream_options")
    # Absent fields are the common case: looked up here before a call is paid for.
    n = _positive(body, "n", MAX_CHOICES) if body.get("n") is not None else 1
    limit = None
    for name in ("max_completion_tokens", "max_tokens"):
        if body.get(name) is not None:
            limit = _positive(body, name)
            break
    return min(limit or model.max_output_tokens, model.max_output_tokens), n


def _media(body: dict[str, Any], model: ModelInfo) -> MediaTally:
    """The images and files of the messages, for the hold."""
    return tally_media(
        (message.get("content") for message in body["messages"]),
        model,
        image="image_url",
        image_url=_image_url,
        file="file",
    )


def _image_url(part: dict[str, Any]) -> object:
    image = part.get("image_url")
    return image.get("url") if isinstance(image, dict) else None


class _Body(RelayBody):
    """The relayed body, and whether the client asked for the usage chunk."""

    __slots__ = ("include_usage",)

    def __init__(self, body: dict[str, Any], cache_key: str) -> None:
        super().__init__(body, cache_key)
        options = body.get("stream_options") if self.stream else None
        self.include_usage = bool(options.get("include_usage")) if options else False

    def extend(self, sent: dict[str, Any]) -> None:
        if self.stream:  # EZAT bills from the usage chunk: always asked for
            sent["stream_options"] = {**(sent.get("stream_options") or {}), "include_usage": True}


class _Surface(RelaySurface[_Body]):
    """Chat Completions relayed: the usage chunk's figures read by the Chat usage mapping, an
    error as `data: {"error": …}` then `[DONE]`."""

    __slots__ = ()

    path = CHAT_PATH
    usage = staticmethod(anthropic_usage)

    def finish(self, reply: dict[str, Any]) -> str:
        choices = reply.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            finish = choices[0].get("finish_reason")
            return finish if isinstance(finish, str) else ""
        return ""

    def open_error(self, exchange: Exchange, err: GatewayError) -> bytes:
        return _error_chunk(err)

    def stream_hooks(self, exchange: Exchange, opened: OpenStream) -> _Stream:
        return _Stream(exchange, self.relayed.include_usage)


class _Stream(RelayStream):
    """The provider's chunks passed on; `[DONE]` only after the usage is recorded."""

    __slots__ = ("include_usage",)

    def __init__(self, exchange: Exchange, include_usage: bool) -> None:
        super().__init__(exchange)
        self.include_usage = include_usage

    def feed(self, event: SSEEvent, data: dict[str, Any]) -> bytes:
        name = event.name
        if name == "message_stop" or (name == "message_delta" and not self.include_usage):
            return b""  # [DONE] after the cost comment; the usage chunk only when asked for
        return event.raw

    def told(self, err: GatewayError) -> bytes:
        return _error_chunk(err)

    async def end(self, event: SSEEvent, data: dict[str, Any]) -> tuple[bytes, bytes, After]:
        return b"", DONE, None


async def relay(
    request: ApiRequest,
    send: Send,
    scope: RequestScope,
    key: KeyInfo,
    body: dict[str, Any],
    models: ModelChain,
) -> int:
    model = models.primary
    max_tokens, n = _checked(body, model)
    media = _media(body, model)
    size = len(request.body)
    estimate = input_estimate(size, media, model)
    session = session_key(
        request.headers.get("x-ezat-session"), _str(body.get("prompt_cache_key")), body
    )
    effort = body.get("reasoning_effort")
    candidates = [
        Candidate(
            m,
            models.response_name(m),
            estimate=estimate if m is model else input_estimate(size, media, m),
            max_tokens=min(max_tokens, m.max_output_tokens) * n,
        )
        for m in models.models
    ]
    relayed = _Body(body, tenant_cache_key(key.org_id, session))
    context = relay_context(
        API, request, key, models, candidates, stream=relayed.stream, session=session, effort=effort
    )
    return await serve_relayed(
        request,
        send,
        scope,
        _Surface(relayed),
        context,
        relayed,
        effort=effort,
        input_estimate=estimate,
        max_tokens=max_tokens * n,
    )


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _error_chunk(err: GatewayError) -> bytes:
    """`data: {"error": …}` then `data: [DONE]`: openai-python raises APIError on the first."""
    return b"data: " + orjson.dumps({"error": openai_error_object(err)}) + b"\n\n" + DONE
