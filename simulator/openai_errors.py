"""OpenAI's error envelope, and the simulator's scripted faults mapped onto it.

Shape (reference/protocol.md 2.6): `{"error": {"message", "type", "param", "code"}}`, every key
present, `param`/`code` null when they do not apply. Azure OpenAI answers its own auth refusals in
a shorter envelope (`{"error": {"code": "401", "message"}}`), as the real service does.

Faults (simulator/faults.py) are scripted with Anthropic error types, because the Messages
front came first and one script vocabulary serves every front. Here they become OpenAI's: a
fault's `type` that is an Anthropic type is translated (`rate_limit_error` → 429
`rate_limit_exceeded`), any other `type` is used verbatim as `error.type`, and `code` (OpenAI front
only) sets `error.code`. `{"status": 400, "code": "context_length_exceeded"}` is the context-length
fault.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from simulator.errors import json_response
from simulator.faults import Fault

SERVER_ERROR_TEXT = "The server had an error while processing your request. Sorry about that!"
CONTEXT_CODE = "context_length_exceeded"


@dataclass(frozen=True, slots=True)
class OpenAIError(Exception):
    """An OpenAI-shaped refusal: status, message, type, param, code."""

    status: int
    message: str
    param: str | None = None
    code: str | None = None
    type: str = "invalid_request_error"

    def body(self) -> dict[str, object]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


# status -> (error.type, error.code, message) when a fault names only its status. Observed
# values (protocol.md 2.6; providers.md §1.5): 429 is type "requests"/"tokens" with code
# rate_limit_exceeded; 500 is server_error; 503 is the overload answer.
_BY_STATUS: dict[int, tuple[str, str | None, str]] = {
    400: ("invalid_request_error", None, "Invalid request."),
    401: ("invalid_request_error", "invalid_api_key", "Incorrect API key provided."),
    403: (
        "invalid_request_error",
        "unsupported_country_region_territory",
        "Country, region, or territory not supported",
    ),
    404: ("invalid_request_error", "not_found", "Not found."),
    408: ("server_error", "timeout", "Request timed out."),
    409: ("invalid_request_error", "conflict", "Conflict."),
    413: ("invalid_request_error", "request_too_large", "Request too large."),
    422: ("invalid_request_error", None, "Unprocessable entity."),
    429: (
        "requests",
        "rate_limit_exceeded",
        "Rate limit reached for requests per min (RPM): Limit 3, Used 3, Requested 1. "
        "Please try again in 1s.",
    ),
    500: ("server_error", None, SERVER_ERROR_TEXT),
    502: ("server_error", "bad_gateway", "Bad gateway."),
    503: (
        "service_unavailable_error",
        "server_is_overloaded",
        "The server is overloaded or not ready yet.",
    ),
    504: ("server_error", "timeout", "Gateway timeout."),
}

# Anthropic error type (the fault script's vocabulary) -> OpenAI (type, code).
_FROM_ANTHROPIC: dict[str, tuple[str, str | None]] = {
    "invalid_request_error": ("invalid_request_error", None),
    "authentication_error": ("invalid_request_error", "invalid_api_key"),
    "permission_error": ("invalid_request_error", "unsupported_country_region_territory"),
    "not_found_error": ("invalid_request_error", "not_found"),
    "request_too_large": ("invalid_request_error", "request_too_large"),
    "rate_limit_error": ("requests", "rate_limit_exceeded"),
    "billing_error": ("insufficient_quota", "insufficient_quota"),
    "api_error": ("server_error", None),
    "overloaded_error": ("service_unavailable_error", "server_is_overloaded"),
    "timeout_error": ("server_error", "timeout"),
}

_CODE_TEXT: dict[str, str] = {
    CONTEXT_CODE: (
        "This model's maximum context length is 128000 tokens. However, your messages resulted"
        " in 130000 tokens. Please reduce the length of the messages."
    ),
    "insufficient_quota": (
        "You exceeded your current quota, please check your plan and billing details."
    ),
}


def _classify(status: int, fault: Fault) -> tuple[str, str | None, str]:
    default_type, default_code, text = _BY_STATUS.get(
        status,
        ("server_error", None, SERVER_ERROR_TEXT)
        if status >= 500
        else ("invalid_request_error", None, "Invalid request."),
    )
    etype, code = default_type, default_code
    if fault.error_type in _FROM_ANTHROPIC:
        etype, code = _FROM_ANTHROPIC[fault.error_type]
    elif fault.error_type in _CODE_TEXT:
        # `"type": "context_length_exceeded"` reads as naturally as the code; both work.
        code = fault.error_type
        etype = "insufficient_quota" if code == "insufficient_quota" else default_type
    elif fault.error_type:
        etype = fault.error_type
    scripted_code = fault.spec.get("code")
    if scripted_code is not None:
        code = scripted_code
    if fault.message is None and code in _CODE_TEXT:
        text = _CODE_TEXT[code]
    return etype, code, fault.message or text


def fault_error(fault: Fault, status: int | None = None) -> OpenAIError:
    """The OpenAI error a fault scripts (its status, or `status` for mid-stream errors)."""
    status = status or fault.status or 500
    etype, code, text = _classify(status, fault)
    return OpenAIError(status, text, None, code, etype)


def stream_error(fault: Fault) -> dict[str, object]:
    """A mid-stream error as OpenAI sends it: type server_error unless scripted otherwise
    (protocol.md 2.6, the coder/aibridge recording of a real stream)."""
    error = fault_error(fault, 500)
    body = error.body()
    inner = body["error"]
    assert isinstance(inner, dict)
    if fault.error_type is None:
        inner["type"] = "server_error"
    return body


def error_response(
    error: OpenAIError, request_id: str, headers: dict[str, str] | None = None
) -> web.Response:
    hdrs = dict(headers or {})
    if error.status == 429:
        # The SDKs honour retry-after; 1 s keeps retrying tests quick. OpenAI also sends the
        # x-ratelimit-* family (providers.md §1.5).
        hdrs.setdefault("retry-after", "1")
        hdrs.setdefault("x-ratelimit-remaining-requests", "0")
        hdrs.setdefault("x-ratelimit-reset-requests", "1s")
    hdrs["x-request-id"] = request_id
    return json_response(error.body(), status=error.status, headers=hdrs)


def azure_auth_error(request_id: str) -> web.Response:
    """Azure OpenAI's own 401 envelope for a missing or wrong key."""
    body = {
        "error": {
            "code": "401",
            "message": (
                "Access denied due to invalid subscription key or wrong API endpoint. Make sure"
                " to provide a valid key for an active subscription and use a correct regional"
                " API endpoint for your resource."
            ),
        }
    }
    return json_response(body, status=401, headers={"x-request-id": request_id})
