"""GET /v1/models (Anthropic's list shape) and GET /openai/v1/models (OpenAI's)."""

from __future__ import annotations

import orjson

from gateway.errors import GatewayError
from gateway.handlers.common import ANTHROPIC, OPENAI, ApiFormat, authenticate, snapshot
from gateway.http import JSON_CT, ApiRequest, Send, base_headers, send_response


async def list_models(request: ApiRequest, send: Send, fmt: ApiFormat) -> int:
    try:
        await authenticate(request, fmt)
    except GatewayError as err:
        return await fmt.send_error(send, request, err)
    models = (await snapshot()).models
    if fmt.is_openai:
        payload = {
            "object": "list",
            "data": [
                {"id": m.id, "object": "model", "created": 0, "owned_by": m.id.split("/", 1)[0]}
                for m in models
            ],
        }
    else:
        data = [
            {
                "type": "model",
                "id": m.id,
                "display_name": m.name,
                "created_at": m.created_at,
                "max_input_tokens": m.context_window,
                "max_tokens": m.max_output_tokens,
            }
            for m in models
        ]
        payload = {
            "data": data,
            "has_more": False,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
        }
    await send_response(
        send, 200, orjson.dumps(payload), base_headers(request.request_id) + [JSON_CT]
    )
    return 200


async def anthropic_models(request: ApiRequest, send: Send) -> int:
    return await list_models(request, send, ANTHROPIC)


async def openai_models(request: ApiRequest, send: Send) -> int:
    return await list_models(request, send, OPENAI)
