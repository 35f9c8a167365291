"""One error type for the whole gateway, rendered in the caller's API format.

Both SDKs pick exception classes and retry behaviour from the HTTP status, so statuses follow
Anthropic's API on /v1 and the same statuses on /openai/v1 except 529 → 503 (not a standard
status; both SDKs retry either).
"""

from __future__ import annotations

import orjson

ANTHROPIC_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}

# status → (OpenAI error type, default code)
OPENAI_TYPES: dict[int, tuple[str, str | None]] = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    402: ("insufficient_quota", "insufficient_quota"),
    403: ("permission_error", None),
    404: ("invalid_request_error", None),
    413: ("invalid_request_error", "request_too_large"),
    429: ("rate_limit_error", "rate_limit_exceeded"),
    500: ("server_error", None),
    502: ("server_error", None),
    503: ("service_unavailable_error", "overloaded"),
    504: ("server_error", "timeout"),
}


# The code of a provider's "this account is out of quota" answer (OpenAI's 429
# insufficient_quota): the deployment cools down for EZAT_QUOTA_COOLDOWN_SECONDS
# (gateway/exchange.py) and the caller, who cannot fix it, is told not to retry.
QUOTA_EXHAUSTED = "upstream_quota_exhausted"


class GatewayError(Exception):
    """An error answer. `headers` are extra response headers (retry-after, x-should-retry)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type_: str | None = None,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
        reason: str = "",
    ) -> None:
        super().__init__(message)
        # For the operator only (the request log's attempt, the log): never rendered to clients.
        self.reason = reason
        self.status = status
        self.message = message
        self.type = type_ or ANTHROPIC_TYPES.get(
            status, "api_error" if status >= 500 else "invalid_request_error"
        )
        self.param = param
        self.code = code
        self.headers = headers or {}

    @property
    def retryable_upstream(self) -> bool:
        return self.status in (408, 429) or self.status >= 500


def database_unavailable(what: str) -> GatewayError:
    """A database failure on an inference path: not the caller's fault and not a bug, and
    likely brief, so a 503 that both SDKs retry (they honour x-should-retry and retry-after)."""
    return GatewayError(
        503,
        f"{what} cannot be done right now: the gateway's database is unavailable; retry shortly",
        type_="api_error",
        headers={"x-should-retry": "true", "retry-after": "1"},
    )


def usage_unrecordable() -> GatewayError:
    """Usage cannot be recorded (the database is down and the usage spool cannot write): a
    request is refused before any upstream work rather than served unbilled."""
    return GatewayError(
        503,
        "the gateway cannot record usage right now (its database and its usage spool are both "
        "unavailable); the request was not started; retry shortly",
        type_="api_error",
        headers={"x-should-retry": "true", "retry-after": "1"},
    )


def invalid(message: str, param: str | None = None) -> GatewayError:
    return GatewayError(400, message, param=param)


def anthropic_body(err: GatewayError, request_id: str) -> bytes:
    return orjson.dumps(
        {
            "type": "error",
            "error": {"type": err.type, "message": err.message},
            "request_id": request_id,
        }
    )


def openai_status(status: int) -> int:
    return 503 if status == 529 else status


def openai_error_object(err: GatewayError) -> dict[str, object]:
    status = openai_status(err.status)
    default_type, default_code = OPENAI_TYPES.get(
        status, ("server_error" if status >= 500 else "invalid_request_error", None)
    )
    return {
        "message": err.message,
        "type": default_type,
        "param": err.param,
        "code": err.code or default_code,
    }


def openai_body(err: GatewayError) -> bytes:
    return orjson.dumps({"error": openai_error_object(err)})


def from_upstream(status: int, body: bytes) -> GatewayError:
    """An upstream error answer as a GatewayError, keeping its status, type and message."""
    try:
        error = orjson.loads(body).get("error") or {}
        message = str(error.get("message") or "upstream error")
        type_ = error.get("type")
    except (orjson.JSONDecodeError, AttributeError):
        message, type_ = f"upstream answered HTTP {status}", None
    return GatewayError(status, message, type_=type_ if isinstance(type_, str) else None)
