"""A provider's error answers -> GatewayError (gateway/providers/openai/errors.py)."""

from __future__ import annotations

import orjson
import pytest

from gateway.errors import QUOTA_EXHAUSTED, openai_body, openai_status
from gateway.providers.openai.errors import parse_duration, provider_error, redact, retry_after


def body(
    message: str = "m",
    type_: str = "invalid_request_error",
    code: str | None = None,
    param: str | None = None,
) -> bytes:
    return orjson.dumps(
        {"error": {"message": message, "type": type_, "param": param, "code": code}}
    )


# (rule, status, headers, payload, expected status, type, message contains)
CASES = [
    (
        "429 stays 429",
        429,
        {},
        body("Rate limit reached", "requests", "rate_limit_exceeded"),
        429,
        "rate_limit_error",
        "Rate limit reached",
    ),
    (
        "500 -> 529 overloaded",
        500,
        {},
        body("boom", "server_error"),
        529,
        "overloaded_error",
        "boom",
    ),
    (
        "503 -> 529 overloaded",
        503,
        {},
        b"upstream connect error",
        529,
        "overloaded_error",
        "upstream connect error",
    ),
    (
        "502 non-JSON -> 529",
        502,
        {},
        b"<html>bad gateway</html>",
        529,
        "overloaded_error",
        "HTTP 502",
    ),
    (
        "context_length_exceeded -> 400 with the provider's message",
        400,
        {},
        body(
            "This model's maximum context length is 128000 tokens.",
            code="context_length_exceeded",
            param="messages",
        ),
        400,
        "invalid_request_error",
        "maximum context length is 128000",
    ),
    ("vLLM 422 -> 400", 422, {}, body("bad field"), 400, "invalid_request_error", "bad field"),
    (
        "older vLLM top-level error",
        400,
        {},
        orjson.dumps({"object": "error", "message": "too long", "type": "BadRequestError"}),
        400,
        "invalid_request_error",
        "too long",
    ),
    (
        "Gemini's list form",
        400,
        {},
        orjson.dumps(
            [{"error": {"code": 400, "message": "bad arg", "status": "INVALID_ARGUMENT"}}]
        ),
        400,
        "invalid_request_error",
        "bad arg",
    ),
    (
        "404 model_not_found -> 404",
        404,
        {},
        body("The model `gpt-9` does not exist", code="model_not_found"),
        404,
        "not_found_error",
        "gpt-9",
    ),
    (
        "404 without a body -> 502 (wrong base URL)",
        404,
        {},
        b"404 page not found",
        502,
        "api_error",
        "base URL",
    ),
    (
        "401 -> 502 without the provider's text",
        401,
        {},
        body("Incorrect API key provided: sk-abc...wxyz", code="invalid_api_key"),
        502,
        "api_error",
        "credentials",
    ),
    ("403 -> 502", 403, {}, body("forbidden"), 502, "api_error", "credentials"),
    ("408 -> 504", 408, {}, b"", 504, "timeout_error", "timed out"),
    ("other 4xx -> 502", 409, {}, body("conflict"), 502, "api_error", "conflict"),
]


@pytest.mark.parametrize(
    ("rule", "status", "headers", "payload", "expected", "kind", "text"),
    CASES,
    ids=[c[0] for c in CASES],
)
def test_mapping(
    rule: str,
    status: int,
    headers: dict[str, str],
    payload: bytes,
    expected: int,
    kind: str,
    text: str,
) -> None:
    err = provider_error(status, headers, payload)
    assert (err.status, err.type) == (expected, kind)
    assert text in err.message
    assert err.status != 500 and openai_status(err.status) != 500


def test_the_provider_text_is_never_passed_on_for_credentials() -> None:
    err = provider_error(401, {}, body("Incorrect API key provided: sk-proj-abcd1234"))
    assert "sk-" not in err.message and "Incorrect" not in err.message


def test_context_length_keeps_param_and_code() -> None:
    err = provider_error(
        400, {}, body("too long", code="context_length_exceeded", param="messages")
    )
    assert (err.param, err.code) == ("messages", "context_length_exceeded")
    assert orjson.loads(openai_body(err))["error"]["code"] == "context_length_exceeded"


def test_insufficient_quota_hides_the_operators_billing_text() -> None:
    err = provider_error(
        429,
        {"retry-after": "20"},
        body(
            "You exceeded your current quota, please check your plan and billing details",
            "insufficient_quota",
            "insufficient_quota",
        ),
    )
    assert "billing details" not in err.message and "retry-after" not in err.headers
    # Not a rate limit: a 503 the SDKs are told not to retry, that the exchange fails over on
    # and cools the deployment down for (providers.md §7 item 14, docs/providers.md).
    assert (err.status, err.code, err.type) == (503, QUOTA_EXHAUSTED, "api_error")
    assert err.headers == {"x-should-retry": "false"}
    assert err.retryable_upstream
    rendered = orjson.loads(openai_body(err))["error"]
    assert rendered["code"] == QUOTA_EXHAUSTED


def test_only_insufficient_quota_is_a_quota_error() -> None:
    err = provider_error(
        429, {"retry-after": "3"}, body("slow down", "requests", "rate_limit_exceeded")
    )
    assert (err.status, err.code, err.headers) == (429, "rate_limit_exceeded", {"retry-after": "3"})


RETRY = [
    ("retry-after seconds", {"Retry-After": "7"}, "7"),
    ("retry-after 0 -> 1", {"retry-after": "0"}, "1"),
    (
        "retry-after date passed on",
        {"retry-after": "Wed, 21 Oct 2026 07:28:00 GMT"},
        "Wed, 21 Oct 2026 07:28:00 GMT",
    ),
    ("retry-after-ms rounded up", {"retry-after-ms": "1500"}, "2"),
    (
        "reset of the exhausted limit",
        {
            "x-ratelimit-reset-requests": "6m0s",
            "x-ratelimit-remaining-requests": "0",
            "x-ratelimit-reset-tokens": "1.5s",
            "x-ratelimit-remaining-tokens": "100",
        },
        "360",
    ),
    (
        "reset of tokens",
        {
            "x-ratelimit-reset-requests": "1s",
            "x-ratelimit-remaining-requests": "5",
            "x-ratelimit-reset-tokens": "1.5s",
            "x-ratelimit-remaining-tokens": "0",
        },
        "2",
    ),
    (
        "neither exhausted: the longer",
        {"x-ratelimit-reset-requests": "12ms", "x-ratelimit-reset-tokens": "3s"},
        "3",
    ),
    ("nothing", {}, None),
    ("unreadable reset", {"x-ratelimit-reset-tokens": "soon"}, None),
]


@pytest.mark.parametrize(("rule", "headers", "expected"), RETRY, ids=[r[0] for r in RETRY])
def test_retry_after(rule: str, headers: dict[str, str], expected: str | None) -> None:
    assert retry_after(headers) == expected
    err = provider_error(429, headers, body("slow down", code="rate_limit_exceeded"))
    assert err.headers.get("retry-after") == expected


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("6m0s", 360),
        ("1.5s", 1.5),
        ("12ms", 0.012),
        ("1h2m3s", 3723),
        ("2", 2),
        ("", None),
        ("5x", None),
        ("s", None),
    ],
)
def test_parse_duration(value: str, seconds: float | None) -> None:
    assert parse_duration(value) == (pytest.approx(seconds) if seconds is not None else None)


@pytest.mark.parametrize(
    "secret",
    [
        "sk-proj-AbCdEf0123456789",
        "Bearer eyJhbGciOi.abc.def",
        "AIzaSyA1234567890abcdefghijk",
        "api_key=abc123",
        "0123456789abcdef0123456789abcdef",
    ],
)
def test_secrets_are_redacted(secret: str) -> None:
    text = redact(f"The request failed for {secret} today")
    assert secret not in text and "[redacted]" in text and text.startswith("The request failed")
    assert secret not in provider_error(400, {}, body(f"bad {secret}")).message
    assert secret not in provider_error(503, {}, f"down {secret}".encode()).message


def test_ordinary_text_is_kept() -> None:
    message = "This model's maximum context length is 128000 tokens. See https://platform.openai.com/docs/guides/error-codes"
    assert redact(message) == message
