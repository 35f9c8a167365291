"""The model list and model lookup, in Anthropic's shape on /v1 and OpenAI's on /openai/v1.

- `GET /v1/models` pages like Anthropic's: `limit` (1–1000, default 20), `after_id` or
  `before_id`, answering `data`, `first_id`, `last_id`, `has_more` (reference/protocol.md 1.11;
  the A-SDK pages on with `after_id=last_id`, or `before_id=first_id` when paging backwards).
- `GET /v1/models/{id}` and `GET /openai/v1/models/{id}`: one model, by canonical id or alias,
  any case. Ids contain a `/`; the SDKs send it percent-encoded (`anthropic%2Fclaude-…`), and
  the ASGI server hands us the decoded `scope["path"]`, so the raw and encoded forms arrive
  alike.
- `ezat/auto` is listed last, with what every model of the caller's org's chain for it shares
  (the catalog's suggested chain unless the org set its own).
- A key with a model allow-list (issue 19) sees only the models on it (and ezat/auto made of
  the chain's models on it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

import orjson

from accounts.fallbackcache import cache as fallback_cache
from accounts.keycache import KeyInfo
from catalog.chains import AUTO_MODEL_ID, is_auto
from catalog.snapshot import CatalogSnapshot, ModelInfo
from gateway.chain import key_allows, key_may_use
from gateway.errors import GatewayError, invalid
from gateway.handlers.common import (
    ANTHROPIC,
    OPENAI,
    ApiFormat,
    authenticate,
    resolve_model,
    snapshot,
)
from gateway.http import JSON_CT, ApiRequest, Send, base_headers, send_response

DEFAULT_LIMIT = 20
MAX_LIMIT = 1000
ANTHROPIC_PREFIX = "/v1/models/"
OPENAI_PREFIX = "/openai/v1/models/"


def _support(value: bool) -> dict[str, bool]:
    return {"supported": value}


def anthropic_capabilities(m: ModelInfo) -> dict[str, Any]:
    """Anthropic's ModelCapabilities (A-SDK `types/model_capabilities.py`; every key present),
    as served through this gateway: what the catalog says the model does, and false for what
    the gateway does not offer whatever the model (the Batch API, server tools: EZAT has no
    price for web search or code execution, context management, citations it does not check)."""
    efforts = set(m.reasoning_efforts)
    levels = {level: _support(level in efforts) for level in ("low", "medium", "high", "max")}
    return {
        "batch": _support(False),
        "citations": _support(False),
        "code_execution": _support(False),
        "context_management": {"supported": False},
        "effort": {"supported": bool(efforts), **levels, "xhigh": _support("xhigh" in efforts)},
        "image_input": _support(m.vision),
        "pdf_input": _support(m.pdf),
        "server_tools": {
            "supported": False,
            "code_execution": _support(False),
            "web_search": _support(False),
        },
        "structured_outputs": _support(m.structured_outputs),
        "thinking": {
            "supported": m.thinking != "none",
            "types": {
                "adaptive": _support(m.thinking == "adaptive"),
                "between_tools": _support(False),
                "disabled": _support(m.thinking_can_be_disabled or m.thinking == "none"),
                "enabled": _support(m.thinking == "extended"),
            },
        },
    }


def anthropic_model(m: ModelInfo) -> dict[str, Any]:
    """Anthropic's ModelInfo (A-SDK `types/model_info.py`). The TypeScript SDK declares
    `capabilities` always present (null allowed), so it is always sent."""
    return {
        "type": "model",
        "id": m.id,
        "display_name": m.name,
        "created_at": m.created_at,
        "capabilities": anthropic_capabilities(m),
        "lifecycle": "active",
        "deprecated_at": None,
        "retires_at": None,
        "max_input_tokens": m.context_window,
        "max_tokens": m.max_output_tokens,
    }


def openai_model(m: ModelInfo) -> dict[str, Any]:
    """OpenAI's Model object (O-SPEC `Model`)."""
    return {"id": m.id, "object": "model", "created": 0, "owned_by": m.id.split("/", 1)[0]}


def _one_param(params: dict[str, list[str]], name: str) -> str | None:
    values = params.get(name)
    if not values:
        return None
    if len(values) > 1:
        raise invalid(f"{name}: give it once", name)
    return values[0]


def _cursor(
    snap: CatalogSnapshot,
    params: dict[str, list[str]],
    name: str,
    listed: tuple[ModelInfo, ...],
    chain: tuple[str, ...] | None,
) -> int | None:
    value = _one_param(params, name)
    if value is None:
        return None
    model = snap.lookup(value, chain)
    if model is None or model not in listed:
        raise invalid(f"{name}: no model with id {value!r}", name)
    return listed.index(model)


def page(
    snap: CatalogSnapshot,
    query: bytes,
    chain: tuple[str, ...] | None = None,
    keep: Callable[[ModelInfo], bool] | None = None,
) -> dict[str, Any]:
    """One page of the Anthropic-shaped list, or a 400 naming the bad parameter."""
    try:
        params = parse_qs(query.decode("latin-1"), keep_blank_values=True, strict_parsing=False)
    except ValueError:
        raise invalid("the query string cannot be parsed") from None
    raw_limit = _one_param(params, "limit")
    limit = DEFAULT_LIMIT
    if raw_limit is not None:
        if not raw_limit.isdigit() or not 1 <= int(raw_limit) <= MAX_LIMIT:
            raise invalid(f"limit: must be an integer between 1 and {MAX_LIMIT}", "limit")
        limit = int(raw_limit)
    models = snap.listed(chain)
    if keep is not None:
        models = tuple(m for m in models if keep(m))
    after = _cursor(snap, params, "after_id", models, chain)
    before = _cursor(snap, params, "before_id", models, chain)
    if after is not None and before is not None:
        raise invalid("before_id, after_id: give at most one of them", "before_id")
    if before is not None:
        start = max(before - limit, 0)
        chosen, has_more = models[start:before], start > 0
    else:
        start = 0 if after is None else after + 1
        chosen, has_more = models[start : start + limit], start + limit < len(models)
    data = [anthropic_model(m) for m in chosen]
    return {
        "data": data,
        "has_more": has_more,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
    }


async def _answer(request: ApiRequest, send: Send, payload: dict[str, Any]) -> int:
    headers = base_headers(request.request_id) + [JSON_CT]
    await send_response(send, 200, orjson.dumps(payload), headers)
    return 200


async def _auto_chain(key: KeyInfo) -> tuple[str, ...] | None:
    """The org's chain for ezat/auto; None: the catalog's."""
    return (await fallback_cache.chains(key.org_id)).get(AUTO_MODEL_ID)


def _for_key(
    snap: CatalogSnapshot, key: KeyInfo, chain: tuple[str, ...] | None
) -> tuple[tuple[str, ...] | None, Callable[[ModelInfo], bool] | None]:
    """What a key with a model allow-list sees: the models on it, and ezat/auto made of the
    chain's models on it (none: no ezat/auto). A key without one sees everything."""
    if key.allowed_models is None:
        return chain, None
    own = tuple(m for m in (snap.auto_chain if chain is None else chain) if key_allows(key, m))
    return own, lambda m: m.id == AUTO_MODEL_ID or key_may_use(key, m)


async def list_models(request: ApiRequest, send: Send, fmt: ApiFormat) -> int:
    try:
        key = await authenticate(request, fmt)
        snap = await snapshot()
        chain, keep = _for_key(snap, key, await _auto_chain(key))
        if fmt.is_openai:
            listed = [m for m in snap.listed(chain) if keep is None or keep(m)]
            payload = {"object": "list", "data": [openai_model(m) for m in listed]}
        else:
            payload = page(snap, request.query, chain, keep)
    except GatewayError as err:
        return await fmt.send_error(send, request, err)
    return await _answer(request, send, payload)


async def get_model(request: ApiRequest, send: Send, fmt: ApiFormat, name: str) -> int:
    try:
        key = await authenticate(request, fmt)
        snap = await snapshot()
        auto = snap.auto(await _auto_chain(key)) if is_auto(name) else None
        # ezat/auto with no model able to serve is unknown, like any model that cannot.
        model = auto if auto is not None else resolve_model(snap, name, fmt)
    except GatewayError as err:
        return await fmt.send_error(send, request, err)
    shape = openai_model if fmt.is_openai else anthropic_model
    return await _answer(request, send, shape(model))


async def anthropic_models(request: ApiRequest, send: Send) -> int:
    return await list_models(request, send, ANTHROPIC)


async def openai_models(request: ApiRequest, send: Send) -> int:
    return await list_models(request, send, OPENAI)


async def anthropic_model_lookup(request: ApiRequest, send: Send) -> int:
    return await get_model(request, send, ANTHROPIC, _model_id(request.path, ANTHROPIC_PREFIX))


async def openai_model_lookup(request: ApiRequest, send: Send) -> int:
    return await get_model(request, send, OPENAI, _model_id(request.path, OPENAI_PREFIX))


def _model_id(path: str, prefix: str) -> str:
    return path.rstrip("/")[len(prefix) :]
