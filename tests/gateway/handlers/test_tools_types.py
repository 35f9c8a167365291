"""Issue 31 item 7: `tools` of the wrong JSON type is a 400 `invalid_request_error` naming
`tools` on every API, never a 500 (gateway/prefix_digest.py and the session key read the body
before the protocol's validation did)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.stack import Key, Stack

pytestmark = pytest.mark.e2e

MESSAGES = "/v1/messages"
COUNT_TOKENS = "/v1/messages/count_tokens"
CHAT = "/openai/v1/chat/completions"
RESPONSES = "/openai/v1/responses"
INPUT_TOKENS = "/openai/v1/responses/input_tokens"
OPENAI_PATHS = (CHAT, RESPONSES, INPUT_TOKENS)
PATHS = (MESSAGES, COUNT_TOKENS, CHAT, RESPONSES, INPUT_TOKENS)
# Every JSON type that is not an array (null is "no tools": allowed), and arrays of non-objects.
BAD_TOOLS: tuple[Any, ...] = (5, True, False, 1.5, "f", {"name": "f"}, [5], ["f"], [None], [[]])


def _body(path: str, tools: Any) -> dict[str, Any]:
    if path in (RESPONSES, INPUT_TOKENS):
        body: dict[str, Any] = {"model": "sonnet", "input": "hi"}
        if path == RESPONSES:
            body["max_output_tokens"] = 16
    else:
        body = {"model": "sonnet", "messages": [{"role": "user", "content": "hi"}]}
        if path != COUNT_TOKENS:
            body["max_tokens"] = 16
    body["tools"] = tools
    return body


def _post(e2e: Stack, key: Key, path: str, body: dict[str, Any]) -> httpx.Response:
    if path in OPENAI_PATHS:
        headers = {"authorization": f"Bearer {key.secret}"}
    else:
        headers = {"x-api-key": key.secret}
    return httpx.post(e2e.url + path, headers=headers, json=body, timeout=30)


@pytest.mark.parametrize("path", PATHS)
def test_tools_of_a_wrong_type_is_a_400_naming_tools(e2e: Stack, path: str) -> None:
    key = e2e.new_key()
    failures = []
    for tools in BAD_TOOLS:
        response = _post(e2e, key, path, _body(path, tools))
        error = response.json().get("error") if response.status_code != 200 else None
        if (
            response.status_code != 400
            or not isinstance(error, dict)
            or error.get("type") != "invalid_request_error"
            or "tools" not in error.get("message", "")
        ):
            failures.append((tools, response.status_code, response.text[:300]))
    assert failures == []
    assert e2e.usage(org_id=key.org_id) == []
    assert e2e.sim.requests() == []  # refused before any upstream call
