"""What the Claude platforms (Amazon Bedrock, Google Vertex AI) share: the Messages body as they
take it, and how their own error envelopes map to the gateway's errors.

Apart from the two providers so that each keeps only what is its own (URL, auth, envelope
parsing); apart from gateway/providers/__init__.py, which is every provider's interface.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.errors import GatewayError


def platform_body(body: bytes, version: str, *, keep_model: bool, keep_stream: bool) -> Any:
    """The Messages body as Bedrock and Vertex take it: `anthropic_version` in the body, no
    `model` (the URL names it) unless kept, `stream` only where the platform reads it."""
    data = orjson.loads(body)
    stream = bool(data.get("stream"))
    model = data.get("model") if keep_model else data.pop("model", None)
    if not keep_stream:
        data.pop("stream", None)
    data["anthropic_version"] = version
    return data, stream, model


class Status:
    """What a platform's own error names map to: (the status the gateway reports, Anthropic's
    error type)."""

    RATE_LIMITED = (429, "rate_limit_error")
    OVERLOADED = (529, "overloaded_error")
    TIMED_OUT = (504, "timeout_error")
    SERVER_ERROR = (500, "api_error")
    INVALID_REQUEST = (400, "invalid_request_error")
    NOT_FOUND = (404, "not_found_error")


def platform_error(mapped: tuple[int, str] | None, status: int, message: str) -> GatewayError:
    """A platform's error (Bedrock's, Google's) by its name's mapping; unmapped, by the HTTP
    status it came with, a 503 reported as overloaded (529, retried elsewhere)."""
    if mapped is None:
        return GatewayError(529 if status == 503 else status, message)
    return GatewayError(mapped[0], message, type_=mapped[1])


def credentials_refused(platform: str, why: str, detail: str | None = None) -> GatewayError:
    """The platform refused the deployment's own credentials: its fault, not the caller's; a 502
    fails over to another deployment and counts toward this one's cooldown."""
    message = f"{platform} refused this deployment's credentials ({why})"
    return GatewayError(502, message if detail is None else f"{message}: {detail}")
