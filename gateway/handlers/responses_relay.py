"""POST /openai/v1/responses on OpenAI-kind models whose deployments have `/responses`: the
request relayed, not translated (issue 30 item 5).

Relayed when every model of the chain is OpenAI-kind and every route's deployment says it has
the Responses API (`"responses_api": true` in Deployment.options; catalog/platform_config.py).
The body goes to `{base}/responses` as the client sent it, with the model renamed to the
server's name, EZAT's own `models` list left out, `prompt_cache_key` derived from the session
when absent (as on the Chat relay), and the hosted tools the provider runs and bills per call
(web search, file search, code interpreter, image generation: https://openai.com/api/pricing/)
left out and named in `x-ezat-dropped-tools`, as on the translated path: EZAT has no price for
them, and file search and code interpreter would reach the gateway's own provider account's
vector stores and containers. The answer comes back as the provider sent it, model renamed.

State (docs/providers.md, "Relayed Responses"):
- a response the relay answered with `store` not false is recorded as a stored response of the
  org (gateway/stored_responses.py) with the deployment that answered; a `previous_response_id`
  naming it is relayed to that deployment only (the provider keeps the conversation), and is a
  clear 400 when the deployment does not serve the chain with `/responses` (any more);
- a `previous_response_id` EZAT stored itself, or one this org does not have, goes the
  translated way as before (gateway/handlers/responses.py: continued, or 404);
- requests naming other state of the provider's (`conversation`, `item_reference` items,
  reasoning items by id, `background`) go the translated way too, which serves or refuses
  them: the provider's store is shared by every org behind one key, so an id is only followed
  where EZAT knows it is this org's.

Usage is the provider's (gateway/providers/openai/responses_relay.py `usage_of`), billed once,
when the final event arrives and before it goes out. A `response.failed` is passed on, billed
only for the usage it reports (none, usually: the provider bills a failed generation no more).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from accounts.keycache import KeyInfo
from catalog.platform_config import OPENAI_KINDS
from catalog.snapshot import ModelInfo, Route
from gateway import stored_responses
from gateway.chain import Candidate, ModelChain
from gateway.errors import GatewayError
from gateway.exchange import Exchange, OpenStream
from gateway.handlers.common import RequestScope, input_estimate
from gateway.handlers.pump import After, Billed, Failure
from gateway.handlers.relay_base import (
    # The same names as the other relay imports (`duplicates` pairs the two lists): both
    # relays plug into this one base.
    FMT,
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
from gateway.protocols.openai_responses.inbound import references
from gateway.protocols.openai_responses.outbound import error_code
from gateway.providers.openai.cache_key import tenant_cache_key
from gateway.providers.openai.responses_relay import (
    FINISH,
    RESPONSES_PATH,
    ResponsesRelayDecoder,
    failure_events,
    usage_of,
)
from gateway.routing import session_key

API = "responses"
OPTION = "responses_api"
# Hosted tools the provider runs and bills per call or per container (https://openai.com/api/
# pricing/, "Built-in tools"): left out of the relayed body, named in x-ezat-dropped-tools.
HOSTED_TOOLS = frozenset(
    {
        "web_search",
        "web_search_preview",
        "web_search_2025_08_26",
        "web_search_preview_2025_03_11",
        "file_search",
        "code_interpreter",
        "image_generation",
    }
)
# Provider state EZAT cannot check belongs to this org: these requests are not relayed.
_STATEFUL = ("background", "conversation")


def relay_route(route: Route) -> bool:
    deployment = route.deployment
    return deployment.kind in OPENAI_KINDS and deployment.options.get(OPTION) is True


@dataclasses.dataclass(slots=True)
class RelayPlan:
    """The models that may answer a relayed request, and what a continuation adds to it."""

    models: list[ModelInfo]
    context_tokens: int = 0  # the provider-kept conversation a previous_response_id expands to


async def plan(key: KeyInfo, body: dict[str, Any], chain: ModelChain) -> RelayPlan | None:
    """The relay's plan for this request, or None: translate it (gateway/handlers/responses.py).
    Raises the 4xx of a relayed conversation that cannot be continued here."""
    if not any(relay_route(r) for m in chain.models for r in m.routes):
        return None  # nothing relays; a relayed previous_response_id is refused when looked up
    previous = body.get("previous_response_id")
    if isinstance(previous, str) and previous:
        found = await stored_responses.contexts(key.org_id, [previous])
        pin = (found.get(previous) or {}).get("relayed")
        if not isinstance(pin, dict):
            return None  # EZAT's own stored response, or none of this org's: translated
        if references(body):
            # The provider would resolve them from a store every org shares.
            raise GatewayError(
                400,
                "input: items named by id (item_reference, reasoning without "
                "encrypted_content) are not followed in a relayed conversation; send them in "
                "full, or rely on previous_response_id",
                param="input",
            )
        return _pinned(chain, previous, pin)
    if any(body.get(name) for name in _STATEFUL) or references(body):
        return None
    if all(m.routes and all(relay_route(r) for r in m.routes) for m in chain.models):
        return RelayPlan(list(chain.models))
    return None


def _pinned(chain: ModelChain, previous: str, pin: dict[str, Any]) -> RelayPlan:
    """The chain's models on the deployment that keeps the conversation, and nowhere else."""
    deployment_id = pin.get("deployment_id")
    models = []
    for model in chain.models:
        routes = tuple(
            r for r in model.routes if r.deployment.id == deployment_id and relay_route(r)
        )
        if routes:
            models.append(dataclasses.replace(model, routes=routes))
    if not models:
        raise GatewayError(
            400,
            f"previous_response_id: response {previous!r} is kept by the provider behind "
            f"deployment {pin.get('deployment')!r}, which does not serve {chain.name!r} with the "
            "Responses API; send the conversation as input",
            param="previous_response_id",
        )
    tokens = pin.get("tokens")
    return RelayPlan(models, tokens if type(tokens) is int and tokens > 0 else 0)


# -- the request ---------------------------------------------------------------------------------


def _checked(body: dict[str, Any], model: ModelInfo, continued: bool) -> int:
    """What EZAT itself needs of the body (the provider checks the rest): the output limit the
    hold is sized by."""
    raw = body.get("input")
    if raw is None and not continued:
        raise GatewayError(400, "input: required", param="input")
    if raw is not None and not isinstance(raw, str | list):
        raise GatewayError(400, "input: must be a string or an array", param="input")
    if "stream" in body and not isinstance(body["stream"], bool):
        raise GatewayError(400, "stream: must be true or false", param="stream")
    limit = body.get("max_output_tokens")
    if limit is not None and (type(limit) is not int or limit < 1):
        raise GatewayError(
            400, "max_output_tokens: must be a positive integer", param="max_output_tokens"
        )
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise GatewayError(400, "tools: must be an array", param="tools")
    return min(limit or model.max_output_tokens, model.max_output_tokens)


def _media(body: dict[str, Any], model: ModelInfo) -> MediaTally:
    """The images and files of the input, for the hold."""
    raw = body.get("input")
    return tally_media(
        (item.get("content") if isinstance(item, dict) else None for item in raw)
        if isinstance(raw, list)
        else (),
        model,
        image="input_image",
        image_url=_image_url,
        file="input_file",
        file_data=_file_data,
    )


def _image_url(part: dict[str, Any]) -> object:
    return part.get("image_url")


def _file_data(part: dict[str, Any]) -> object:
    return part.get("file_data")


def _session(request: ApiRequest, body: dict[str, Any]) -> str:
    """`x-ezat-session` › `prompt_cache_key` › the instructions and the first input item."""
    key = body.get("prompt_cache_key")
    raw = body.get("input")
    first = raw[0] if isinstance(raw, list) and raw else raw
    if isinstance(first, str):
        first = {"role": "user", "content": first}
    identity = {"system": body.get("instructions"), "messages": [first] if first else []}
    return session_key(
        request.headers.get("x-ezat-session"), key if isinstance(key, str) else None, identity
    )


def _dropped(body: dict[str, Any]) -> list[str]:
    kinds = [t.get("type") for t in body.get("tools") or () if isinstance(t, dict)]
    return sorted({str(k) for k in kinds if k in HOSTED_TOOLS})


class _Body(RelayBody):
    """The relayed body (the hosted tools left out), and whether the answer is to be kept."""

    __slots__ = ("store",)

    def __init__(self, body: dict[str, Any], cache_key: str) -> None:
        super().__init__(body, cache_key)
        tools = self.base.get("tools")
        if tools:
            kept = [t for t in tools if not (isinstance(t, dict) and t.get("type") in HOSTED_TOOLS)]
            self.base = {**self.base, "tools": kept}
        self.store = body.get("store") is not False  # OpenAI stores unless told not to


async def relay(
    request: ApiRequest,
    send: Send,
    scope: RequestScope,
    key: KeyInfo,
    body: dict[str, Any],
    chain: ModelChain,
    relayed_plan: RelayPlan,
) -> int:
    models = relayed_plan.models
    continued = bool(body.get("previous_response_id"))
    max_tokens = _checked(body, models[0], continued)
    size = len(request.body)
    context = relayed_plan.context_tokens

    def estimate(model: ModelInfo) -> int:
        return input_estimate(size, _media(body, model), model) + context

    reasoning = body.get("reasoning")
    effort = reasoning.get("effort") if isinstance(reasoning, dict) else None
    candidates = [
        Candidate(
            m,
            chain.response_name(m),
            estimate=estimate(m),
            max_tokens=min(max_tokens, m.max_output_tokens),
        )
        for m in models
    ]
    session = _session(request, body)
    relayed = _Body(body, tenant_cache_key(key.org_id, session))
    ctx = relay_context(
        API, request, key, chain, candidates, stream=relayed.stream, session=session, effort=effort
    )
    dropped = _dropped(body)
    return await serve_relayed(
        request,
        send,
        scope,
        _Surface(relayed),
        ctx,
        relayed,
        effort=effort,
        input_estimate=candidates[0].estimate,
        max_tokens=max_tokens,
        headers=[(b"x-ezat-dropped-tools", ",".join(dropped).encode())] if dropped else None,
    )


def _pin(exchange: Exchange, relayed: _Body, response: dict[str, Any]) -> Any:
    """Record a stored response as this org's, with the deployment that keeps it (the future
    of its write, or None when nothing is to be kept)."""
    response_id = response.get("id")
    route = exchange.route
    if not relayed.store or route is None or not isinstance(response_id, str):
        return None
    if response.get("status") == "failed" or not stored_responses.storable_id(response_id):
        return None
    tokens = exchange.tokens
    context = (
        tokens.input + tokens.cache_read + tokens.cache_write_5m + tokens.cache_write_1h
        if tokens is not None
        else 0
    ) + (tokens.output if tokens is not None else 0)
    pin = {"deployment_id": route.deployment.id, "deployment": route.deployment.name}
    return stored_responses.writer.save(
        org_id=exchange.key.org_id,
        response_id=response_id,
        model_id=exchange.model.id,
        response=response,
        context={"relayed": {**pin, "tokens": context}},
    )


def _started_response(exchange: Exchange, decoder: Any) -> dict[str, Any]:
    """The response as the provider's `response.created` gave it, or, when the stream failed
    before that, the fields the response object requires (openai-python `Response`)."""
    response = getattr(decoder, "response", None) or {
        "id": "resp_" + exchange.request_id,
        "object": "response",
        "created_at": int(exchange.started_at.timestamp()),
        "status": "in_progress",
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "metadata": {},
        "output": [],
        "parallel_tool_calls": True,
        "temperature": None,
        "tool_choice": "auto",
        "tools": [],
        "top_p": None,
    }
    return {**response, "model": exchange.model_name}


def _failure(exchange: Exchange, decoder: Any, err: GatewayError) -> bytes:
    sequence = decoder.sequence if isinstance(decoder, ResponsesRelayDecoder) else -1
    code = error_code(FMT.error_status(err), err.code)
    return failure_events(_started_response(exchange, decoder), sequence, err.message, code)


def _failed(data: dict[str, Any]) -> GatewayError:
    """The error of a `response.failed` (or of a terminal error event)."""
    response = data.get("response") or {}
    error = response.get("error") if isinstance(response, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return GatewayError(502, str(message or "the provider failed the response"), type_="api_error")


class _Surface(RelaySurface[_Body]):
    """Responses relayed: the usage renamed for the Chat usage mapping, the answer kept as a
    stored response of the org, an error as a `response.failed`."""

    __slots__ = ()

    path = RESPONSES_PATH
    usage = staticmethod(usage_of)

    def finish(self, reply: dict[str, Any]) -> str:
        status = reply.get("status")
        return FINISH.get(status, "") if isinstance(status, str) else ""

    def after(self, exchange: Exchange, reply: dict[str, Any]) -> After:
        return _kept(exchange, self.relayed, reply)

    def open_error(self, exchange: Exchange, err: GatewayError) -> bytes:
        return _failure(exchange, None, err)

    def stream_hooks(self, exchange: Exchange, opened: OpenStream) -> _Stream:
        return _Stream(exchange, self.relayed, opened.parser)


def _kept(exchange: Exchange, relayed: _Body, response: dict[str, Any]) -> After:
    """Once the usage is recorded (the pin keeps its tokens): the stored response's pin written."""

    async def pin() -> None:
        stored = _pin(exchange, relayed, response)
        if stored is not None:
            await stored_responses.writer.wait(stored)

    return pin if relayed.store else None


class _Stream(RelayStream):
    """The provider's events passed on; the final one only after the usage is recorded (and the
    stored response's pin is written)."""

    __slots__ = ("decoder", "relayed", "told_already")

    def __init__(self, exchange: Exchange, relayed: _Body, decoder: Any) -> None:
        super().__init__(exchange)
        self.relayed = relayed
        self.decoder = decoder
        self.told_already = False  # the provider's own error event went out: nothing more to tell

    def error(self, event: SSEEvent, data: dict[str, Any]) -> Failure | None:
        self.told_already = True
        if not data.get("terminal"):
            return None  # passed on; the stream goes on
        return Failure(self.rename(event.raw), _failed(data), Billed.REPORTED)

    def told(self, err: GatewayError) -> bytes:
        return b"" if self.told_already else _failure(self.exchange, self.decoder, err)

    async def end(
        self, event: SSEEvent, data: dict[str, Any]
    ) -> tuple[bytes, bytes, After] | Failure:
        final = self.rename(event.raw) if event.raw else b""
        if data.get("status") == "failed":
            # Passed on, billed only for the usage the provider reported.
            return Failure(final, _failed(data), Billed.REPORTED)
        exchange = self.exchange
        response = {**data.get("response", {}), "model": exchange.model_name}
        return b"", final, _kept(exchange, self.relayed, response)
