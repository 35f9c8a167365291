"""Platform adapters, pure parts: request shapes and the mapping of each platform's errors."""

from __future__ import annotations

import base64

import orjson
import pytest

from catalog.snapshot import DeploymentInfo
from gateway.providers import COUNT_PATH, MESSAGES_PATH, ProviderCall
from gateway.providers.bedrock import BedrockProvider, model_path
from gateway.providers.vertex import VertexProvider
from gateway.upstream import UpstreamClient

BODY = {
    "model": "anthropic.claude-haiku-4-5-20251001-v1:0",
    "max_tokens": 16,
    "messages": [{"role": "user", "content": "hi"}],
    "stream": True,
}


def bedrock(api_key: str = "ABSKbedrockapikey0123456789") -> DeploymentInfo:
    return DeploymentInfo(
        id=7,
        name="b",
        kind="bedrock",
        base_url="http://127.0.0.1:9",
        api_key=api_key,
        weight=1,
        max_concurrency=1,
        region="us-east-1",
    )


def test_model_ids_are_one_path_segment_as_botocore_encodes_them() -> None:
    assert model_path("anthropic.claude-haiku-4-5-20251001-v1:0") == (
        "/model/anthropic.claude-haiku-4-5-20251001-v1%3A0"
    )
    arn = "arn:aws:bedrock:us-east-1:1:application-inference-profile/abc"
    assert model_path(arn).count("/") == 2 and "%2F" in model_path(arn)


def test_bedrock_body_url_betas_and_api_key() -> None:
    dep = bedrock()
    target = UpstreamClient()._target(dep.base_url)
    call = _run(
        BedrockProvider().prepare(
            ProviderCall(dep, target, MESSAGES_PATH, orjson.dumps(BODY), "context-1m-2025-08-07,b2")
        )
    )
    path, head, body = call.path, call.headers, call.body
    assert path == "/model/anthropic.claude-haiku-4-5-20251001-v1%3A0/invoke-with-response-stream"
    sent = orjson.loads(body)
    assert "model" not in sent and "stream" not in sent
    assert sent["anthropic_version"] == "bedrock-2023-05-31"
    assert sent["anthropic_beta"] == ["context-1m-2025-08-07", "b2"]
    assert "authorization: Bearer ABSKbedrockapikey0123456789\r\n" in head
    assert "x-amzn-bedrock-accept: application/json" in head


def test_bedrock_count_tokens_wraps_the_invoke_body() -> None:
    dep = bedrock()
    target = UpstreamClient()._target(dep.base_url)
    call = _run(
        BedrockProvider().prepare(ProviderCall(dep, target, COUNT_PATH, orjson.dumps(BODY), None))
    )
    path, body = call.path, call.body
    assert path.endswith("/count-tokens")
    inner = orjson.loads(base64.b64decode(orjson.loads(body)["input"]["invokeModel"]["body"]))
    assert inner["anthropic_version"] == "bedrock-2023-05-31" and "model" not in inner
    assert (
        BedrockProvider().json_reply(COUNT_PATH, b'{"inputTokens": 12}', None)
        == b'{"input_tokens":12}'
    )


@pytest.mark.parametrize(
    ("status", "name", "expected", "type_"),
    [
        (429, "ThrottlingException", 429, "rate_limit_error"),
        (503, "ServiceUnavailableException", 529, "overloaded_error"),
        (400, "ValidationException", 400, "invalid_request_error"),
        (424, "ModelErrorException", 500, "api_error"),
        (403, "AccessDeniedException", 502, "api_error"),
        (403, "InvalidSignatureException", 502, "api_error"),
    ],
)
def test_bedrock_errors(status: int, name: str, expected: int, type_: str) -> None:
    headers = {"x-amzn-errortype": f"{name}:http://internal.amazon.com/coral/com.amazon.bedrock/"}
    error = BedrockProvider().error(status, headers, b'{"message": "nope"}')
    assert (error.status, error.type) == (expected, type_)
    assert "nope" in error.message


@pytest.mark.parametrize(
    ("status", "payload", "expected", "type_"),
    [
        (
            429,
            b'[{"error": {"code": 429, "message": "Quota exceeded", "status": "RESOURCE_EXHAUSTED"}}]',
            429,
            "rate_limit_error",
        ),
        (
            503,
            b'{"error": {"code": 503, "message": "down", "status": "UNAVAILABLE"}}',
            529,
            "overloaded_error",
        ),
        (
            400,
            b'{"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}}',
            400,
            "invalid_request_error",
        ),
        (
            401,
            b'{"error": {"code": 401, "message": "no", "status": "UNAUTHENTICATED"}}',
            502,
            "api_error",
        ),
        (
            529,
            b'{"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}',
            529,
            "overloaded_error",
        ),
    ],
)
def test_vertex_errors(status: int, payload: bytes, expected: int, type_: str) -> None:
    error = VertexProvider().error(status, {}, payload)
    assert (error.status, error.type) == (expected, type_)


def _run(coro):  # type: ignore[no-untyped-def]
    import asyncio

    return asyncio.run(coro)
