"""Issue 31 item 5: NUL bytes on the Responses API are 4xx or stored, never a 503.

PostgreSQL text and jsonb cannot hold U+0000. An id with a NUL reached the database and came
back 503 "database unavailable" with `x-should-retry: true` (a request that can never work,
retried); a response whose input or metadata held a NUL got an id but was never stored. Now an
id of a shape this gateway never stores is not found without a query (404), and a NUL in what is
stored is kept, escaped losslessly (gateway/nul_escape.py), so GET and a continuation see
exactly what the client sent. Runs on SQLite and, in production shape, PostgreSQL.
"""

from __future__ import annotations

import httpx
import pytest

from tests.support.chat_support import upstream
from tests.support.responses_support import SONNET, post
from tests.support.stack import Stack

pytestmark = pytest.mark.e2e


def _auth(secret: str) -> dict[str, str]:
    return {"authorization": f"Bearer {secret}"}


@pytest.mark.parametrize("method", ["GET", "DELETE"])
@pytest.mark.parametrize("suffix", ["resp_%00", "resp_a%00b", "%00", "resp_%C3%A9"])
def test_a_response_id_with_a_nul_is_a_404_not_a_503(e2e: Stack, method: str, suffix: str) -> None:
    key = e2e.new_key()
    url = f"{e2e.url}/openai/v1/responses/{suffix}"
    response = httpx.request(method, url, headers=_auth(key.secret), timeout=30)
    assert response.status_code == 404, response.text
    assert response.headers.get("x-should-retry") != "true"
    assert response.json()["error"]["param"] == "response_id"


@pytest.mark.parametrize("previous", ["resp_\x00", "resp_abc\x00def", "\x00"])
def test_a_previous_response_id_with_a_nul_is_a_404(e2e: Stack, previous: str) -> None:
    key = e2e.new_key()
    response = post(e2e, key, {"model": SONNET, "input": "hi", "previous_response_id": previous})
    assert response.status_code == 404, response.text
    assert response.headers.get("x-should-retry") != "true"
    assert response.json()["error"]["param"] == "previous_response_id"
    assert e2e.usage(org_id=key.org_id) == []


def test_an_item_reference_with_a_nul_is_a_4xx(e2e: Stack) -> None:
    key = e2e.new_key()
    body = {
        "model": SONNET,
        "input": [{"type": "item_reference", "id": "msg_req\x00x_0"}, "hi"],
    }
    body["input"][1] = {"role": "user", "content": "hi"}
    response = post(e2e, key, body)
    assert 400 <= response.status_code < 500, response.text
    assert response.headers.get("x-should-retry") != "true"


def test_input_and_metadata_with_nul_are_stored_exactly(e2e: Stack) -> None:
    key = e2e.new_key()
    text = "before\x00after \ue000 and \ue0000"  # NUL, and the escape's own marker character
    first = post(
        e2e, key, {"model": SONNET, "input": text, "metadata": {"note": "a\x00b", "k\x00": "v"}}
    )
    assert first.status_code == 200, first.text
    stored = first.json()
    assert stored["metadata"] == {"note": "a\x00b", "k\x00": "v"}

    got = httpx.get(
        f"{e2e.url}/openai/v1/responses/{stored['id']}", headers=_auth(key.secret), timeout=30
    )
    assert got.status_code == 200, got.text  # it was stored (it used to be silently lost)
    assert got.json() == stored

    second = post(
        e2e, key, {"model": SONNET, "previous_response_id": stored["id"], "input": "and then?"}
    )
    assert second.status_code == 200, second.text
    # The continuation rebuilt the exact turn: the first message went upstream as it was sent.
    first_turn = upstream(e2e)["messages"][0]["content"]
    sent = first_turn if isinstance(first_turn, str) else first_turn[0]["text"]
    assert sent == text
