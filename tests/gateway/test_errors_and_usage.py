"""Error rendering per API, and how upstream usage becomes billed token counts."""

from __future__ import annotations

from decimal import Decimal

import orjson
import pytest

from catalog.pricing import Prices, PriceSchedule
from catalog.snapshot import ModelInfo
from gateway.errors import GatewayError, anthropic_body, from_upstream, openai_body, openai_status
from gateway.usage import UsageTracker


@pytest.mark.parametrize(
    ("status", "anthropic_type", "openai_status_", "openai_type"),
    [
        (400, "invalid_request_error", 400, "invalid_request_error"),
        (401, "authentication_error", 401, "invalid_request_error"),
        (402, "billing_error", 402, "insufficient_quota"),
        (403, "permission_error", 403, "permission_error"),
        (404, "not_found_error", 404, "invalid_request_error"),
        (413, "request_too_large", 413, "invalid_request_error"),
        (429, "rate_limit_error", 429, "rate_limit_error"),
        (500, "api_error", 500, "server_error"),
        (504, "timeout_error", 504, "server_error"),
        (529, "overloaded_error", 503, "service_unavailable_error"),
    ],
)
def test_status_and_type_per_api(
    status: int, anthropic_type: str, openai_status_: int, openai_type: str
) -> None:
    err = GatewayError(status, "boom", param="field")
    assert orjson.loads(anthropic_body(err, "req_1")) == {
        "type": "error",
        "error": {"type": anthropic_type, "message": "boom"},
        "request_id": "req_1",
    }
    assert openai_status(status) == openai_status_
    body = orjson.loads(openai_body(err))["error"]
    assert body["type"] == openai_type and body["message"] == "boom" and body["param"] == "field"
    assert set(body) == {"message", "type", "param", "code"}


def test_retryable_statuses() -> None:
    assert [
        s
        for s in (400, 401, 404, 408, 413, 429, 500, 502, 529)
        if GatewayError(s, "x").retryable_upstream
    ] == [
        408,
        429,
        500,
        502,
        529,
    ]


def test_upstream_error_keeps_status_type_and_message() -> None:
    err = from_upstream(
        529, b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'
    )
    assert (err.status, err.type, err.message) == (529, "overloaded_error", "Overloaded")
    garbled = from_upstream(502, b"<html>bad gateway</html>")
    assert garbled.status == 502 and "502" in garbled.message


def _model(prompt_caching: bool = True) -> ModelInfo:
    return ModelInfo(
        id="m",
        name="m",
        aliases=(),
        sampling=False,
        prompt_caching=prompt_caching,
        vision=True,
        pdf=True,
        tools=True,
        structured_outputs=True,
        reasoning_efforts=(),
        max_output_tokens=100,
        context_window=1000,
        pricing=PriceSchedule.flat(Prices.from_decimals(*(Decimal(1),) * 5)),
        routes=(),
        created_at="",
    )


def test_stream_usage_accumulates_and_splits_cache_writes() -> None:
    tracker = UsageTracker()
    tracker.absorb(
        "message_start",
        {
            "message": {
                "usage": {
                    "input_tokens": 10,
                    "cache_read_input_tokens": 100,
                    "cache_creation_input_tokens": 30,
                    "cache_creation": {
                        "ephemeral_5m_input_tokens": 20,
                        "ephemeral_1h_input_tokens": 10,
                    },
                    "output_tokens": 1,
                }
            }
        },
    )
    tracker.absorb("content_block_delta", {"delta": {"type": "text_delta", "text": "hello"}})
    tracker.absorb(
        "message_delta",
        {"usage": {"output_tokens": 42, "output_tokens_details": {"thinking_tokens": 7}}},
    )
    tokens = tracker.tokens(_model())
    assert (tokens.input, tokens.cache_read, tokens.cache_write_5m, tokens.cache_write_1h) == (
        10,
        100,
        20,
        10,
    )
    assert (tokens.output, tokens.reasoning) == (42, 7)
    assert tracker.exact is True


def test_without_message_delta_output_is_estimated_from_text() -> None:
    tracker = UsageTracker()
    tracker.absorb("message_start", {"message": {"usage": {"input_tokens": 5, "output_tokens": 1}}})
    tracker.absorb("content_block_delta", {"delta": {"type": "text_delta", "text": "x" * 41}})
    tracker.absorb(
        "content_block_delta", {"delta": {"type": "input_json_delta", "partial_json": "{}"}}
    )
    assert tracker.exact is False
    assert tracker.tokens(_model()).output == 11  # ceil(43 / 4)


def test_models_without_caching_bill_cache_tokens_as_input() -> None:
    tracker = UsageTracker(
        usage={"input_tokens": 10, "cache_read_input_tokens": 5, "cache_creation_input_tokens": 3},
        exact=True,
    )
    tokens = tracker.tokens(_model(prompt_caching=False))
    assert (tokens.input, tokens.cache_read, tokens.cache_write_5m) == (18, 0, 0)


@pytest.mark.parametrize("payload", [b"<html>bad gateway</html>", b"[1, 2]", b""])
async def test_a_200_with_an_unusable_body_is_a_502_not_a_500(payload: bytes) -> None:
    from accounts.keycache import KeyInfo
    from gateway.context import RequestContext, sole
    from gateway.exchange import Exchange

    exchange = Exchange(
        RequestContext(
            api="messages",
            request_id="req_1",
            key=KeyInfo(1, 1, "ezat_sk_x", 10, None),
            model_name="m",
            stream=False,
            session="s",
            candidates=sole(_model(), "m"),
        )
    )

    async def run(attempt: object) -> bytes:
        return payload

    exchange.run = run  # type: ignore[method-assign]
    with pytest.raises(GatewayError) as raised:
        await exchange.call(lambda route: b"{}", None)
    assert raised.value.status == 502
