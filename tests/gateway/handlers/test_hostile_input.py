"""Hostile request bodies against the running gateway (issue 13, findings 7 and 8, and the
fuzzing suite): deep nesting, malformed base64 media, and hypothesis-generated bodies for both
inference APIs. Every refusal is a 4xx that names what is wrong, never a 5xx, never a charge."""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.media_samples import b64, gif, pdf, png
from tests.support.stack import Key, Stack

pytestmark = pytest.mark.e2e

MESSAGES = "/v1/messages"
COUNT_TOKENS = "/v1/messages/count_tokens"
CHAT = "/openai/v1/chat/completions"
RESPONSES = "/openai/v1/responses"
INPUT_TOKENS = "/openai/v1/responses/input_tokens"
OPENAI_PATHS = (CHAT, RESPONSES, INPUT_TOKENS)
ENDPOINTS = (MESSAGES, COUNT_TOKENS, CHAT, RESPONSES, INPUT_TOKENS)


def _headers(key: Key, path: str) -> dict[str, str]:
    if path in OPENAI_PATHS:
        return {"authorization": f"Bearer {key.secret}", "content-type": "application/json"}
    return {"x-api-key": key.secret, "content-type": "application/json"}


def _post(e2e: Stack, key: Key, path: str, body: bytes | dict[str, Any]) -> httpx.Response:
    content = body if isinstance(body, bytes) else _dumps(body)
    return httpx.post(e2e.url + path, headers=_headers(key, path), content=content, timeout=30)


def _dumps(value: Any) -> bytes:
    # The standard library writes nesting orjson refuses (beyond 254 levels).
    return json.dumps(value, separators=(",", ":")).encode()


def _error(response: httpx.Response) -> dict[str, Any]:
    return response.json()["error"]


def deep(levels: int) -> Any:
    """`levels` nested objects around a number."""
    value: Any = 1
    for _ in range(levels):
        value = {"a": value}
    return value


def _body(path: str, content: Any, **extra: Any) -> dict[str, Any]:
    if path in (RESPONSES, INPUT_TOKENS):
        body: dict[str, Any] = {"model": "sonnet", "input": [{"role": "user", "content": content}]}
        if path == RESPONSES:
            body["max_output_tokens"] = 16
        return {**body, **extra}
    body = {"model": "sonnet", "messages": [{"role": "user", "content": content}]}
    if path != COUNT_TOKENS:
        body["max_tokens"] = 16
    return {**body, **extra}


# --- finding 7: deep nesting -----------------------------------------------------------------
@pytest.mark.parametrize("path", ENDPOINTS)
def test_a_body_nested_300_levels_is_a_400_naming_the_limit(e2e: Stack, path: str) -> None:
    key = e2e.new_key()
    # 300 levels: orjson parses it, but cannot serialise past 254 (the audit's 500).
    body = _body(path, [{"type": "text", "text": "hi", "metadata": deep(300)}])
    response = _post(e2e, key, path, body)
    assert response.status_code == 400, response.text
    error = _error(response)
    assert error["type"] == "invalid_request_error"
    assert "nested more than 64 levels" in error["message"], error
    assert e2e.usage(org_id=key.org_id) == []


@pytest.mark.parametrize("path", ENDPOINTS)
def test_nesting_beyond_what_the_parser_reads_is_the_same_400(e2e: Stack, path: str) -> None:
    key = e2e.new_key()
    field = b"input" if path in (RESPONSES, INPUT_TOKENS) else b"messages"
    raw = b'{"model":"sonnet","' + field + b'":' + b"[" * 5000 + b"]" * 5000 + b"}"
    response = _post(e2e, key, path, raw)
    assert response.status_code == 400, response.text
    assert "nesting limit is 64" in _error(response)["message"]


def test_nesting_up_to_the_limit_is_served(e2e: Stack) -> None:
    key = e2e.new_key()
    # Body, messages, messages[1], content, content[0]: 5 levels around the tool input.
    block = {"type": "tool_use", "id": "toolu_1", "name": "f", "input": deep(64 - 5)}
    body = {
        "model": "sonnet",
        "max_tokens": 16,
        "messages": [
            {"role": "user", "content": "call f"},
            {"role": "assistant", "content": [block]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}],
            },
        ],
    }
    assert _post(e2e, key, MESSAGES, body).status_code == 200
    block["input"] = deep(64 - 4)
    assert _post(e2e, key, MESSAGES, body).status_code == 400


# --- finding 8: base64 media is validated -------------------------------------------------------
PNG_B64 = b64(png(64, 64))
BAD_BASE64 = [
    ("alphabet", PNG_B64[:-8] + "!!!!" + PNG_B64[-4:], "outside the base64 alphabet"),
    ("padding", PNG_B64.rstrip("=") + "A", "not a multiple of 4"),
    ("after-padding", "iVBORw==AAAA", "invalid base64 data"),
    ("magic", b64(gif(64, 64)), "does not match the declared image/png (it is a image/gif image)"),
    ("not-an-image", b64(b"<html>hello</html>"), "not a JPEG, PNG, GIF or WebP image"),
]


@pytest.mark.parametrize(("data", "fragment"), [pytest.param(d, f, id=i) for i, d, f in BAD_BASE64])
def test_messages_base64_images_are_validated(e2e: Stack, data: str, fragment: str) -> None:
    key = e2e.new_key()
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}
    response = _post(e2e, key, MESSAGES, _body(MESSAGES, [{"type": "text", "text": "?"}, image]))
    assert response.status_code == 400, response.text
    message = _error(response)["message"]
    assert message.startswith("messages[0].content[1].source.data: "), message
    assert fragment in message, message
    assert e2e.usage(org_id=key.org_id) == []


@pytest.mark.parametrize(("data", "fragment"), [pytest.param(d, f, id=i) for i, d, f in BAD_BASE64])
def test_chat_data_urls_are_validated(e2e: Stack, data: str, fragment: str) -> None:
    key = e2e.new_key()
    part = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}}
    response = _post(e2e, key, CHAT, _body(CHAT, [{"type": "text", "text": "?"}, part]))
    assert response.status_code == 400, response.text
    error = _error(response)
    assert error["param"] == "messages[0].content[1].image_url.url"
    assert error["message"].startswith("messages[0].content[1].image_url.url: "), error
    assert fragment in error["message"], error


@pytest.mark.parametrize(("data", "fragment"), [pytest.param(d, f, id=i) for i, d, f in BAD_BASE64])
def test_responses_data_urls_are_validated(e2e: Stack, data: str, fragment: str) -> None:
    key = e2e.new_key()
    part = {"type": "input_image", "image_url": f"data:image/png;base64,{data}"}
    body = _body(RESPONSES, [{"type": "input_text", "text": "?"}, part])
    response = _post(e2e, key, RESPONSES, body)
    assert response.status_code == 400, response.text
    error = _error(response)
    assert error["param"] == "input[0].content[1].image_url", error
    assert fragment in error["message"], error


def test_tool_result_images_and_pdfs_are_validated_too(e2e: Stack) -> None:
    key = e2e.new_key()
    bad_pdf = {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": PNG_B64},
    }
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": [bad_pdf]}
    body = {
        "model": "sonnet",
        "max_tokens": 16,
        "messages": [
            {"role": "user", "content": "call f"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}],
            },
            {"role": "user", "content": [result]},
        ],
    }
    response = _post(e2e, key, MESSAGES, body)
    assert response.status_code == 400, response.text
    assert _error(response)["message"].startswith(
        "messages[2].content[0].content[0].source.data: the data does not match the declared "
        "application/pdf"
    )
    good = {**bad_pdf, "source": {**bad_pdf["source"], "data": b64(pdf(2))}}
    result["content"] = [good]
    assert _post(e2e, key, MESSAGES, body).status_code == 200


# --- the fuzzing suite --------------------------------------------------------------------------
JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=30),
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)
FIELDS = st.sampled_from(
    [
        "model",
        "max_tokens",
        "max_completion_tokens",
        "messages",
        "stream",
        "system",
        "tools",
        "tool_choice",
        "thinking",
        "output_config",
        "response_format",
        "reasoning_effort",
        "temperature",
        "stop",
        "n",
        "cache_control",
        "input",
        "max_output_tokens",
        "instructions",
        "previous_response_id",
        "store",
        "text",
        "reasoning",
    ]
)
MEDIA_DATA = st.one_of(
    st.sampled_from([PNG_B64, b64(gif(3, 3)), b64(pdf(1)), "", "====", "AAAA", "iVBORw0KGgo="]),
    st.binary(max_size=64).map(lambda b: base64.b64encode(b).decode() + "="),
    st.text(max_size=40),
)
MEDIA_TYPES = st.sampled_from(
    ["image/png", "image/gif", "image/jpeg", "image/webp", "application/pdf", "text/plain", "x"]
)


@st.composite
def hostile_content(draw: st.DrawFn, path: str) -> Any:
    data, media_type = draw(MEDIA_DATA), draw(MEDIA_TYPES)
    url = f"data:{media_type};base64,{data}"
    if path in (RESPONSES, INPUT_TOKENS):
        part = draw(
            st.sampled_from(
                [
                    {"type": "input_image", "image_url": url},
                    {"type": "input_file", "file_data": url, "filename": "a.pdf"},
                ]
            )
        )
    elif path == CHAT:
        part = draw(
            st.sampled_from(
                [
                    {"type": "image_url", "image_url": {"url": f"data:{media_type};base64,{data}"}},
                    {"type": "file", "file": {"file_data": f"data:{media_type};base64,{data}"}},
                    {"type": "image_url", "image_url": f"data:{media_type};base64,{data}"},
                ]
            )
        )
    else:
        kind = draw(st.sampled_from(["image", "document"]))
        source = {"type": "base64", "media_type": media_type, "data": data}
        part = {"type": kind, "source": source}
        if draw(st.booleans()):
            part = {"type": "tool_result", "tool_use_id": "toolu_x", "content": [part]}
    return draw(st.sampled_from([[{"type": "text", "text": "hi"}, part], [part], part, data]))


@st.composite
def hostile_body(draw: st.DrawFn, path: str) -> bytes:
    base: dict[str, Any] = _body(path, "hi")
    if path == CHAT:
        base["max_completion_tokens"] = base.pop("max_tokens")
    turns = base["input"] if "input" in base else base["messages"]
    shape = draw(st.integers(0, 5))
    if shape == 0:  # any JSON value at all
        return _dumps(draw(JSON_VALUES))
    if shape == 1:  # a valid body with fields replaced or added by arbitrary JSON
        for _ in range(draw(st.integers(1, 3))):
            base[draw(FIELDS)] = draw(JSON_VALUES)
        return _dumps(base)
    if shape == 2:  # hostile media
        turns[0]["content"] = draw(hostile_content(path))
        return _dumps(base)
    if shape == 3:  # nesting around the limit, anywhere
        turns[0][draw(st.sampled_from(["content", "x"]))] = deep(draw(st.integers(50, 400)))
        return _dumps(base)
    if shape == 4:  # broken bytes: truncated, non-UTF-8, NUL
        raw = _dumps(base)
        cut = draw(st.integers(0, len(raw)))
        return draw(
            st.sampled_from([raw[:cut], raw[:cut] + b"\xff\xfe", raw.replace(b"hi", b"h\x00i")])
        )
    messages = draw(
        st.lists(st.fixed_dictionaries({"role": JSON_VALUES, "content": JSON_VALUES}), max_size=3)
    )
    base["input" if "input" in base else "messages"] = messages
    return _dumps(base)


@pytest.fixture(scope="module")
def fuzz_key(stack: Stack) -> Key:
    return stack.new_key(credit_usd="1000")


def _fuzz(stack: Stack, key: Key, path: str, raw: bytes) -> None:
    request_id = f"fuzz-{uuid.uuid4().hex}"
    headers = {**_headers(key, path), "x-request-id": request_id}
    response = httpx.post(stack.url + path, headers=headers, content=raw, timeout=30)
    assert response.status_code < 500, (response.status_code, response.text, raw[:500])
    if response.status_code >= 400:
        assert stack.usage(request_id=request_id) == [], "a refused request was charged"
        error = response.json()["error"]
        assert error["message"], error


FUZZ = settings(
    max_examples=60,  # bounded: CI stays fast (a few seconds per endpoint)
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.mark.parametrize("path", ENDPOINTS)
def test_fuzzed_bodies_never_get_a_5xx_or_a_charge(stack: Stack, fuzz_key: Key, path: str) -> None:
    @FUZZ
    @given(raw=hostile_body(path))
    def check(raw: bytes) -> None:
        _fuzz(stack, fuzz_key, path, raw)

    check()
