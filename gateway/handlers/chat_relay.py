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

from contextlib import aclosing
from typing import Any

import orjson

from accounts.keycache import KeyInfo
from catalog.platform_config import OPENAI_KINDS
from catalog.snapshot import ModelInfo, Route
from gateway.chain import Candidate, ModelChain, Prepared
from gateway.context import RequestContext
from gateway.errors import GatewayError, openai_error_object
from gateway.exchange import STREAM_FAILURES, AttemptFailed, ClientGone, Exchange, OpenStream
from gateway.handlers.common import (
    HIGH_EFFORTS,
    OPENAI,
    RequestScope,
    answer_headers,
    committed_headers,
    input_estimate,
    stream_headers,
)
from gateway.handlers.translated import error_from_event
from gateway.http import (
    JSON_CT,
    SSE_HEADERS,
    ApiRequest,
    Headers,
    Send,
    StreamWriter,
    base_headers,
    send_response,
)
from gateway.protocols.media import MediaTally
from gateway.providers.openai.cache_key import derives_cache_key, tenant_cache_key
from gateway.providers.openai.mapping import anthropic_usage
from gateway.providers.openai.relay import DONE, ModelRename
from gateway.routing import session_key
from gateway.usage import UsageTracker

FMT = OPENAI
API = "chat"  # the usage record's label, as on the translated path
CHAT_PATH = "/chat/completions"
EZAT_FIELDS = frozenset({"models"})  # the gateway's own body fields, never relayed
PING = b": ping\n\n"
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
    """The images and files of the messages, for the hold: each at its worst case (the provider
    downloads image URLs itself; EZAT does not fetch them on this path)."""
    media = MediaTally()
    for message in body["messages"]:
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for part in content:
            if not isinstance(part, dict):
                continue
            kind = part.get("type")
            if kind == "image_url":
                media.add_image(model.media, None)
                image = part.get("image_url")
                url = image.get("url") if isinstance(image, dict) else None
                if isinstance(url, str) and url.startswith("data:"):
                    media.payload_chars += len(url)
            elif kind == "file":
                media.unsized_documents += 1
    return media


class _Relay:
    """The relayed body per route, and what the answer needs of the request."""

    __slots__ = ("body", "cache_key", "include_usage", "stream")

    def __init__(self, body: dict[str, Any], cache_key: str) -> None:
        self.body = body
        self.stream = stream = bool(body.get("stream"))
        options = body.get("stream_options") if stream else None
        self.include_usage = bool(options.get("include_usage")) if options else False
        self.cache_key = cache_key

    def body_for(self, route: Route) -> bytes:
        # Serialised again, not spliced into the client's bytes: orjson.dumps of the copied
        # dict cost 0.7 µs (100-token prompt) to 14 µs (100k tokens), a byte splice of the same
        # changes 4 to 195 µs (bench/README.md, "OpenAI-kind paths beside the Claude path").
        # `models` is EZAT's fallback list (docs/api.md), not an OpenAI parameter: a strict
        # provider answers an unknown one with a 400.
        sent = dict(self.body)  # a C-level copy: cheaper than filtering in a comprehension
        for name in EZAT_FIELDS:
            sent.pop(name, None)
        sent["model"] = route.upstream_model_id
        if self.stream:
            sent["stream_options"] = {
                **(self.body.get("stream_options") or {}),
                "include_usage": True,
            }
        if "prompt_cache_key" not in sent and derives_cache_key(route.deployment):
            sent["prompt_cache_key"] = self.cache_key
        return orjson.dumps(sent)


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
        )
        for m in models.models
    ]
    exchange = Exchange(
        RequestContext(
            api=API,
            request_id=request.request_id,
            key=key,
            model_name=models.name,
            stream=bool(body.get("stream")),
            session=session,
            high_effort=effort in HIGH_EFFORTS,
            candidates=candidates,
            requested_id=models.requested_id,
            skipped=models.skipped,
        )
    )
    exchange.upstream_path = CHAT_PATH
    relayed = _Relay(body, tenant_cache_key(key.org_id, session))
    for candidate in candidates:
        candidate.max_tokens = min(max_tokens, candidate.model.max_output_tokens) * n
        candidate.prepared = Prepared(relayed.body_for, effort if isinstance(effort, str) else None)
    await scope.admit(exchange, input_estimate=estimate, max_tokens=max_tokens * n)
    extra = FMT.rate_headers(scope.rate)
    if relayed.stream:
        return await _stream(request, send, exchange, relayed, extra)
    return await _json(request, send, exchange, extra)


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


async def _json(request: ApiRequest, send: Send, exchange: Exchange, extra: Headers) -> int:
    reply = await exchange.call(exchange.body_for, None)
    usage = reply.get("usage")
    tracker = UsageTracker(exact=isinstance(usage, dict))
    if isinstance(usage, dict):
        tracker.usage = anthropic_usage(usage)
    choices = reply.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        finish = choices[0].get("finish_reason")
        exchange.finish_reason = finish if isinstance(finish, str) else ""
    reply["model"] = exchange.model_name
    await exchange.record(tracker)
    headers = base_headers(request.request_id) + [JSON_CT] + extra + answer_headers(exchange)
    await send_response(send, 200, orjson.dumps(reply), headers)
    exchange.log(200)
    return 200


async def _stream(
    request: ApiRequest, send: Send, exchange: Exchange, relayed: _Relay, extra: Headers
) -> int:
    writer = StreamWriter(
        send, base_headers(request.request_id) + SSE_HEADERS + extra + stream_headers(exchange)
    )
    try:
        opened = await exchange.open_committed(exchange.body_for, None, writer, PING)
    except GatewayError as err:
        if not writer.opened:
            raise
        status = FMT.error_status(err)
        await exchange.fail_stream(writer, _error_chunk(err), status, err=err)
        return status
    committed_headers(writer, exchange)
    return await _pump(request, exchange, opened, writer, relayed)


def _error_chunk(err: GatewayError) -> bytes:
    """`data: {"error": …}` then `data: [DONE]`: openai-python raises APIError on the first."""
    return b"data: " + orjson.dumps({"error": openai_error_object(err)}) + b"\n\n" + DONE


async def _pump(
    request: ApiRequest,
    exchange: Exchange,
    opened: OpenStream,
    writer: StreamWriter,
    relayed: _Relay,
) -> int:
    """Pass the provider's chunks on; `[DONE]` only after the usage is recorded."""
    tracker = UsageTracker()
    exchange.checkpoint(tracker)
    rename = ModelRename(
        exchange.route.upstream_model_id if exchange.route else "", exchange.model_name
    )
    disconnected = request.watch_disconnect()
    batches = exchange.event_batches(opened, writer, PING, disconnected)
    try:
        async with aclosing(batches):
            async for batch in batches:
                # The events of one read go out in one write, renamed in one pass (the model
                # name never spans two chunks: each ends with a blank line).
                out: list[bytes] = []
                for event, data in batch:
                    name = event.name
                    if name == "error":
                        if out:
                            await writer.write(rename(b"".join(out)))
                        raise AttemptFailed(error_from_event(data), "error_event", retryable=False)
                    tracker.absorb(name, data)
                    if name == "message_stop":
                        if out:
                            await writer.write(rename(b"".join(out)))
                        exchange.finish_reason = tracker.stop_reason
                        await exchange.record(tracker)
                        await writer.write(exchange.cost_comment() + DONE)
                        await writer.close()
                        exchange.log(200)
                        return 200
                    if event.raw and (name != "message_delta" or relayed.include_usage):
                        out.append(event.raw)
                if out:
                    await writer.write(rename(b"".join(out)))
    except ClientGone:
        return await exchange.drain_after_disconnect(opened, tracker)
    except STREAM_FAILURES as exc:
        err = exchange.stream_failure(exc)
        # Not billed: the provider does not bill a generation that failed either (issue 30).
        await exchange.fail_stream(
            writer, _error_chunk(err), 502, client_gone=request.disconnected, err=err
        )
        return 200
    finally:
        opened.response.close()
    raise AssertionError("event_batches ends only by return or raise")
