"""Refused fields, the OpenAI error envelope with the Messages API's statuses (529 -> 503),
unknown models, auth, limits and the OpenAI-shaped models list."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from tests.support.chat_support import (
    SONNET,
    chat_url,
    client,
    error_of,
    post_chat,
    upstream_records,
)
from tests.support.stack import Stack

pytestmark = pytest.mark.e2e

HI = [{"role": "user", "content": "hi"}]

REFUSED: list[tuple[str, dict[str, Any]]] = [
    ("n", {"n": 2}),
    ("n", {"n": 0}),
    ("logprobs", {"logprobs": True}),
    ("top_logprobs", {"top_logprobs": 3}),
    ("logit_bias", {"logit_bias": {"50256": -100}}),
    ("audio", {"audio": {"voice": "alloy", "format": "wav"}}),
    ("web_search_options", {"web_search_options": {}}),
    (
        "functions",
        {"functions": [{"name": "get_weather", "parameters": {"type": "object"}}]},
    ),
    ("function_call", {"function_call": "auto"}),
    ("response_format", {"response_format": {"type": "json_object"}}),
]


@pytest.mark.parametrize(("field", "params"), REFUSED, ids=[f"{f}={p}" for f, p in REFUSED])
def test_refused_fields_are_400_naming_the_field(
    e2e: Stack, field: str, params: dict[str, Any]
) -> None:
    key = e2e.new_key()
    with pytest.raises(openai.BadRequestError) as raised:
        client(e2e, key).chat.completions.create(model=SONNET, messages=HI, **params)  # type: ignore[arg-type]
    error = error_of(raised.value)
    assert error["type"] == "invalid_request_error"
    assert error["param"] == field
    assert error["message"].startswith(f"{field}: ")
    assert upstream_records(e2e) == []
    assert e2e.usage(org_id=key.org_id) == []


@pytest.mark.parametrize("params", [{"n": 1}, {"logprobs": False}, {"n": 1, "logprobs": False}])
def test_n_one_and_logprobs_false_accepted(e2e: Stack, params: dict[str, Any]) -> None:
    key = e2e.new_key()
    completion = client(e2e, key).chat.completions.create(model=SONNET, messages=HI, **params)  # type: ignore[arg-type]
    assert len(completion.choices) == 1
    assert completion.choices[0].logprobs is None
    assert not {"n", "logprobs"} & set(upstream_records(e2e)[-1]["body"])


def test_unknown_model_is_404_model_not_found(e2e: Stack) -> None:
    key = e2e.new_key()
    response = post_chat(e2e, key, {"model": "gpt-9", "messages": HI})
    assert response.status_code == 404
    assert response.json() == {
        "error": {
            "message": "The model `gpt-9` does not exist or you do not have access to it.",
            "type": "invalid_request_error",
            "param": "model",
            "code": "model_not_found",
        }
    }
    assert response.headers["x-request-id"] == response.headers["request-id"]
    with pytest.raises(openai.NotFoundError) as raised:
        client(e2e, key).chat.completions.create(model="gpt-9", messages=HI)  # type: ignore[arg-type]
    assert raised.value.code == "model_not_found"
    assert raised.value.request_id  # the SDK reads x-request-id
    assert upstream_records(e2e) == []


UPSTREAM_FAILURES = [
    # (simulator status, client status, SDK class, OpenAI type, code)
    (400, 400, openai.BadRequestError, "invalid_request_error", None),
    (429, 429, openai.RateLimitError, "rate_limit_error", "rate_limit_exceeded"),
    (500, 500, openai.InternalServerError, "server_error", None),
    (529, 503, openai.InternalServerError, "service_unavailable_error", "overloaded"),
]


@pytest.mark.parametrize(("sim_status", "status", "exc", "kind", "code"), UPSTREAM_FAILURES)
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_upstream_errors_in_openai_envelope(
    e2e: Stack,
    sim_status: int,
    status: int,
    exc: type[openai.APIStatusError],
    kind: str,
    code: str | None,
    stream: bool,
) -> None:
    key = e2e.new_key()
    message = f"scripted {sim_status}"
    e2e.sim.script({"status": sim_status, "message": message, "times": 5})
    # Before the first token, a failed stream is an ordinary JSON error with the real status.
    response = post_chat(e2e, key, {"model": SONNET, "messages": HI, "stream": stream})
    assert response.status_code == status
    assert response.headers["content-type"].startswith("application/json")
    assert response.json() == {
        "error": {"message": message, "type": kind, "param": None, "code": code}
    }
    with pytest.raises(exc) as raised:
        client(e2e, key).chat.completions.create(model=SONNET, messages=HI, stream=stream)
    assert raised.value.status_code == status
    assert error_of(raised.value)["message"] == message
    assert e2e.usage(org_id=key.org_id) == []


# -- auth and limits --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [{}, {"authorization": "Bearer ezat_sk_wrong"}, {"authorization": "Basic abc"}],
    ids=["missing", "wrong", "not-bearer"],
)
def test_missing_or_wrong_key_is_401(e2e: Stack, headers: dict[str, str]) -> None:
    response = httpx.post(chat_url(e2e), headers=headers, json={"model": SONNET, "messages": HI})
    assert response.status_code == 401
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["code"]) == ("invalid_request_error", "invalid_api_key")
    assert httpx.get(e2e.url + "/openai/v1/models", headers=headers).status_code == 401
    assert upstream_records(e2e) == []


def test_sdk_authentication_error(e2e: Stack) -> None:
    api = openai.OpenAI(base_url=e2e.url + "/openai/v1", api_key="ezat_sk_nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        api.chat.completions.create(model=SONNET, messages=HI)  # type: ignore[arg-type]
    assert upstream_records(e2e) == []


def test_no_credit_is_402_not_retried(e2e: Stack) -> None:
    key = e2e.new_key(credit_usd="0")
    response = post_chat(e2e, key, {"model": SONNET, "messages": HI})
    assert response.status_code == 402
    assert response.headers["x-should-retry"] == "false"  # the SDK would otherwise retry
    assert response.json()["error"]["code"] == "insufficient_quota"
    assert upstream_records(e2e) == []


def test_rate_limit_is_429_with_retry_after(e2e: Stack) -> None:
    key = e2e.new_key(rpm=1)
    api = client(e2e, key)
    api.chat.completions.create(model=SONNET, max_tokens=10, messages=HI)  # type: ignore[arg-type]
    with pytest.raises(openai.RateLimitError) as raised:
        api.chat.completions.create(model=SONNET, max_tokens=10, messages=HI)  # type: ignore[arg-type]
    assert int(raised.value.response.headers["retry-after"]) > 0
    assert raised.value.response.headers["x-ratelimit-remaining-requests"] == "0"
    assert len(upstream_records(e2e)) == 1


@pytest.mark.parametrize(
    ("content", "status", "needle"),
    [
        (b"{not json", 400, "JSON"),
        (b"[]", 400, "JSON object"),
        (b'{"model": "sonnet", "messages": []}', 400, "messages"),
        (b'{"model": "sonnet", "messages": [{"role": "robot", "content": "x"}]}', 400, "role"),
    ],
)
def test_malformed_bodies(e2e: Stack, content: bytes, status: int, needle: str) -> None:
    key = e2e.new_key()
    response = httpx.post(
        chat_url(e2e),
        headers={"authorization": f"Bearer {key.secret}", "content-type": "application/json"},
        content=content,
    )
    assert response.status_code == status
    assert needle in response.json()["error"]["message"]
    assert upstream_records(e2e) == []


def test_body_over_32_mb_is_413(e2e: Stack) -> None:
    key = e2e.new_key()
    big = (
        b'{"model":"sonnet","messages":[{"role":"user","content":"'
        + b"a" * (33 * 1024 * 1024)
        + b'"}]}'
    )
    response = httpx.post(
        chat_url(e2e),
        headers={"authorization": f"Bearer {key.secret}", "content-type": "application/json"},
        content=big,
        timeout=60,
    )
    assert response.status_code == 413
    assert response.json()["error"]["type"] == "invalid_request_error"


# -- models list ------------------------------------------------------------------------------


def test_models_list_in_openai_shape(e2e: Stack) -> None:
    key = e2e.new_key()
    page = client(e2e, key).models.list()
    ids = [m.id for m in page.data]
    assert {SONNET, "anthropic/claude-opus-4-6", "anthropic/claude-haiku-4-5"} <= set(ids)
    raw = httpx.get(
        e2e.url + "/openai/v1/models", headers={"authorization": f"Bearer {key.secret}"}
    ).json()
    assert raw["object"] == "list"
    for model in raw["data"]:
        assert set(model) == {"id", "object", "created", "owned_by"}
        assert model["object"] == "model"
    assert {m["owned_by"] for m in raw["data"] if m["id"].startswith("anthropic/")} == {"anthropic"}
    # Every listed id works as a model name.
    client(e2e, key).chat.completions.create(model=ids[0], max_tokens=5, messages=HI)  # type: ignore[arg-type]
