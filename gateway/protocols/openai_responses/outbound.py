"""Anthropic Messages reply -> OpenAI Responses `response` object (pure: dict in, dict out).

Shapes: platforms-and-responses.md §4.3 (openai-python v3.3.1 `types/responses/response.py`,
the OpenAI OpenAPI spec `Response`). Each Anthropic content block becomes one output item:
thinking -> `reasoning` (summary only when asked for, the signed block sealed into
`encrypted_content`), text -> `message` with one `output_text` part, tool_use -> `function_call`
(with its `namespace` for a namespaced tool) or `custom_tool_call` for a custom tool (tools.py).
Item ids carry the response's request id and their output index, so a stored item can be found
again from its id alone (`item_reference`).
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.protocols.openai.outbound import thinking_input_block

from .tools import CUSTOM_INPUT
from .types import Rendering, Seal, ToolMap

__all__ = [
    "RESPONSE_ERROR_CODES",
    "client_output",
    "custom_tool_call_item",
    "error_code",
    "item_id",
    "locate_item",
    "reasoning_item",
    "response_object",
    "responses_usage",
    "status_of",
    "tool_call_item",
    "translate_response",
]

_PREFIXES = {
    "message": "msg",
    "reasoning": "rs",
    "function_call": "fc",
    "custom_tool_call": "ctc",
}

# `Response.error.code` is an enum (openai-python `types/responses/response_error.py`, the
# openai-openapi `ResponseErrorCode`): strict clients (generated Go/Java/.NET, zod) reject any
# other value, so gateway codes such as "overloaded" or "timeout" are mapped onto it.
RESPONSE_ERROR_CODES = frozenset(
    {
        "server_error",
        "rate_limit_exceeded",
        "invalid_prompt",
        "data_residency_mismatch",
        "bio_policy",
        "misalignment_policy_violation",
        "vector_store_timeout",
        "invalid_image",
        "invalid_image_format",
        "invalid_base64_image",
        "invalid_image_url",
        "image_too_large",
        "image_too_small",
        "image_parse_error",
        "image_content_policy_violation",
        "invalid_image_mode",
        "image_file_too_large",
        "unsupported_image_media_type",
        "empty_image_file",
        "failed_to_download_image",
        "image_file_not_found",
    }
)


def error_code(status: int, code: str | None) -> str:
    """The schema's code for a failure with this HTTP status and gateway code: the code itself
    when the enum has it, rate_limit_exceeded for a 429, otherwise server_error (the failure
    happened after the request was accepted, so it is the server's, as OpenAI reports it)."""
    if code in RESPONSE_ERROR_CODES:
        return code
    if status == 429:
        return "rate_limit_exceeded"
    return "server_error"


def item_id(kind: str, request_id: str, index: int) -> str:
    return f"{_PREFIXES[kind]}_{request_id}_{index}"


def locate_item(value: str) -> tuple[str, int] | None:
    """(request id, output index) of an item id this gateway made, else None."""
    prefix, sep, rest = value.partition("_")
    if not sep or prefix not in _PREFIXES.values():
        return None
    request_id, sep, index = rest.rpartition("_")
    if not sep or not request_id or not index.isdigit() or len(index) > 6:
        return None
    return request_id, int(index)


def _count(value: object) -> int:
    return value if type(value) is int else 0


def responses_usage(u: dict[str, Any]) -> dict[str, Any]:
    """Anthropic usage -> Responses usage. OpenAI counts cached tokens inside input_tokens,
    Anthropic's input_tokens is only the uncached remainder: both cache counters are added."""
    cache_read = _count(u.get("cache_read_input_tokens"))
    cache_write = _count(u.get("cache_creation_input_tokens"))
    input_tokens = _count(u.get("input_tokens")) + cache_read + cache_write
    output_tokens = _count(u.get("output_tokens"))
    details = u.get("output_tokens_details")
    thinking = _count(details.get("thinking_tokens")) if isinstance(details, dict) else 0
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cache_read, "cache_write_tokens": cache_write},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": min(thinking, output_tokens)},
        "total_tokens": input_tokens + output_tokens,
    }


def status_of(stop_reason: object) -> tuple[str, dict[str, str] | None]:
    """(status, incomplete_details) for an Anthropic stop_reason."""
    if stop_reason in ("max_tokens", "model_context_window_exceeded"):
        return "incomplete", {"reason": "max_output_tokens"}
    if stop_reason == "refusal":
        return "incomplete", {"reason": "content_filter"}
    return "completed", None


def reasoning_item(
    block: dict[str, Any], item: str, seal: Seal | None, summary: bool, status: str = "completed"
) -> dict[str, Any]:
    """A thinking or redacted_thinking block as a `reasoning` output item."""
    text = block.get("thinking") if block.get("type") == "thinking" else None
    replay = thinking_input_block(block)
    return {
        "id": item,
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": text}] if summary and text else [],
        "encrypted_content": seal(replay) if seal is not None and replay is not None else None,
        "status": status,
    }


def message_item(item: str, text: str, status: str = "completed") -> dict[str, Any]:
    return {
        "id": item,
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
    }


def function_call_item(
    item: str,
    call_id: str,
    name: str,
    arguments: str,
    status: str = "completed",
    namespace: str | None = None,
) -> dict[str, Any]:
    out = {
        "id": item,
        "type": "function_call",
        "status": status,
        "call_id": call_id,
        "name": name,
        # parse() and strict tools json.loads() this: an argument-less call is "{}", never "".
        "arguments": arguments or "{}",
    }
    if namespace is not None:
        out["namespace"] = namespace
    return out


def custom_tool_call_item(
    item: str,
    call_id: str,
    name: str,
    text: str,
    status: str = "completed",
    namespace: str | None = None,
) -> dict[str, Any]:
    """A call to a custom tool (openai-python `ResponseCustomToolCall`)."""
    out = {
        "id": item,
        "type": "custom_tool_call",
        "status": status,
        "call_id": call_id,
        "name": name,
        "input": text,
    }
    if namespace is not None:
        out["namespace"] = namespace
    return out


def custom_input(tool_input: object) -> str:
    """A custom tool's free-form input, from the one-string object it has upstream. A model
    that sent something else still gets its input through, as JSON text."""
    if isinstance(tool_input, dict):
        text = tool_input.get(CUSTOM_INPUT)
        if isinstance(text, str):
            return text
    return orjson.dumps(tool_input if tool_input is not None else {}).decode()


def tool_call_item(
    upstream_name: str,
    call_id: str,
    tool_input: object,
    request_id: str,
    index: int,
    tools: ToolMap | None,
) -> dict[str, Any]:
    """A finished tool_use block as the item its tool's kind calls for."""
    known = tools.get(upstream_name) if tools else None
    if known is not None and known.custom:
        return custom_tool_call_item(
            item_id("custom_tool_call", request_id, index),
            call_id,
            known.name,
            custom_input(tool_input),
            namespace=known.namespace,
        )
    return function_call_item(
        item_id("function_call", request_id, index),
        call_id,
        known.name if known is not None else upstream_name,
        orjson.dumps(tool_input if tool_input is not None else {}).decode(),
        namespace=known.namespace if known is not None else None,
    )


def output_items(
    content: list[dict[str, Any]],
    request_id: str,
    seal: Seal | None,
    summary: bool,
    tools: ToolMap | None = None,
) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for block in content:
        kind = block.get("type")
        index = len(items)
        if kind in ("thinking", "redacted_thinking"):
            items.append(
                reasoning_item(block, item_id("reasoning", request_id, index), seal, summary)
            )
        elif kind == "text":
            items.append(
                message_item(item_id("message", request_id, index), block.get("text") or "")
            )
        elif kind == "tool_use":
            items.append(
                tool_call_item(
                    str(block.get("name") or ""),
                    str(block.get("id") or ""),
                    block.get("input"),
                    request_id,
                    index,
                    tools,
                )
            )
    return items


def client_output(items: list[dict[str, Any]], include_encrypted: bool) -> list[dict[str, Any]]:
    """The output as the client sees it: sealed reasoning only when it asked for it."""
    if include_encrypted:
        return items
    return [
        {**item, "encrypted_content": None} if item["type"] == "reasoning" else item
        for item in items
    ]


def response_object(
    *,
    request_id: str,
    created_at: int,
    model_name: str,
    echo: dict[str, Any],
    status: str,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None,
    incomplete_details: dict[str, str] | None = None,
    error: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "id": "resp_" + request_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "background": False,
        "error": error,
        "incomplete_details": incomplete_details,
        **echo,
        "model": model_name,
        "output": output,
        "service_tier": "default",
        "usage": usage,
    }


def translate_response(
    msg: dict[str, Any], rendering: Rendering
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(the response object for the client, the output items with sealed reasoning to store)."""
    r = rendering
    content = msg.get("content")
    items = output_items(
        content if isinstance(content, list) else [], r.request_id, r.seal, r.summary, r.tools
    )
    status, incomplete = status_of(msg.get("stop_reason"))
    usage = msg.get("usage")
    response = response_object(
        request_id=r.request_id,
        created_at=r.created_at,
        model_name=r.model_name,
        echo=r.echo,
        status=status,
        output=client_output(items, r.include_encrypted),
        usage=responses_usage(usage if isinstance(usage, dict) else {}),
        incomplete_details=incomplete,
    )
    return response, items
