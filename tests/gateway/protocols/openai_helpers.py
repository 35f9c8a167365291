"""Shared fixtures for the OpenAI translator tests (no Django, no I/O)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.protocols.openai.inbound import InvalidRequest, ModelCaps, translate_request

# Prompt caching off by default so expected bodies stay small; caching has its own tests.
CAPS = ModelCaps(
    canonical_id="anthropic/claude-test",
    sampling=True,
    prompt_caching=False,
    vision=True,
    pdf=True,
    tools=True,
    structured_outputs=True,
    reasoning_efforts=("low", "medium", "high", "max"),
    max_output_tokens=64000,
)
USER = {"role": "user", "content": "hi"}
TOOL = {"type": "function", "function": {"name": "get_weather"}}
CALL = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
PNG = "data:image/png;base64,iVBORw0KGgo="
PDF = "data:application/pdf;base64,JVBERi0="


def chat(**fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "anthropic/claude-test", "messages": [USER]}
    body.update(fields)
    return body


def user(*parts: Any) -> dict[str, Any]:
    return {"role": "user", "content": list(parts)}


def deep(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = {"a": value}
    return value


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def translate(caps: ModelCaps = CAPS, **fields: Any) -> dict[str, Any]:
    return translate_request(chat(**fields), caps).body


def assert_invalid(request: Any, caps: ModelCaps, param: str | None, fragment: str) -> None:
    """The request is refused with a 400 whose message starts with the param it names."""
    with pytest.raises(InvalidRequest) as info:
        translate_request(request, caps)
    err = info.value
    assert err.param == param
    assert err.status == 400
    assert fragment in err.message, err.message
    if param is not None:
        assert err.message.startswith(param + ":"), err.message
    assert str(err) == err.message
