from __future__ import annotations

import secrets

import orjson
from aiohttp import web

# HTTP status -> Anthropic `error.type` (protocol.md 1.8). Unlisted 4xx fall back to
# invalid_request_error and unlisted 5xx to api_error, as the real API does.
ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}

DEFAULT_MESSAGES: dict[str, str] = {
    "invalid_request_error": "Invalid request",
    "authentication_error": "invalid x-api-key",
    "billing_error": "Your credit balance is too low to access the Anthropic API.",
    "permission_error": "Your API key does not have permission to use the specified resource.",
    "not_found_error": "Not found",
    "request_too_large": "Request exceeds the maximum allowed number of bytes.",
    "rate_limit_error": "Number of request tokens has exceeded your per-minute rate limit",
    "api_error": "Internal server error",
    "timeout_error": "Request timed out",
    "overloaded_error": "Overloaded",
}


def new_request_id() -> str:
    return "req_011C" + secrets.token_hex(10)


def error_type_for(status: int) -> str:
    if status in ERROR_TYPES:
        return ERROR_TYPES[status]
    return "api_error" if status >= 500 else "invalid_request_error"


def status_for(error_type: str) -> int:
    """The HTTP status the real API uses for an error type (500 if unknown)."""
    return next((s for s, t in ERROR_TYPES.items() if t == error_type), 500)


def error_body(error_type: str, message: str, request_id: str | None) -> dict[str, object]:
    body: dict[str, object] = {
        "type": "error",
        "error": {"type": error_type, "message": message},
    }
    if request_id is not None:
        body["request_id"] = request_id
    return body


def error_response(
    status: int,
    message: str | None,
    request_id: str,
    *,
    error_type: str | None = None,
    headers: dict[str, str] | None = None,
) -> web.Response:
    """An Anthropic error envelope with the matching HTTP status."""
    etype = error_type or error_type_for(status)
    text = message if message is not None else DEFAULT_MESSAGES.get(etype, "Error")
    hdrs = dict(headers or {})
    if status == 429 and not any(k.lower() == "retry-after" for k in hdrs):
        # The SDKs honour retry-after in (0, 60] seconds; 1 keeps retrying tests quick.
        hdrs["retry-after"] = "1"
    return json_response(error_body(etype, text, request_id), status=status, headers=hdrs)


def json_response(
    data: object, *, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    # orjson is several times faster than json.dumps; the simulator also serves benchmarks.
    return web.Response(
        body=orjson.dumps(data),
        status=status,
        content_type="application/json",
        headers=headers,
    )
