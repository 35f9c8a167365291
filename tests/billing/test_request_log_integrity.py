"""Issue 31 item 2, end to end: the rows that PostgreSQL used to refuse (and with them every
other row of their batch, of every org) are stored. `responses_input_tokens` did not fit the
16-character `api` column; a NUL in the model a caller named cannot be stored in text.

Meaningful in production shape (PostgreSQL enforces both); on SQLite it checks the same rows.
"""

from __future__ import annotations

import httpx
import pytest

from tests.billing.test_request_log import rows
from tests.support.responses_support import SONNET
from tests.support.stack import Stack

pytestmark = pytest.mark.e2e


def test_rows_of_two_orgs_with_the_long_label_and_a_nul_are_all_stored(e2e: Stack) -> None:
    one, two = e2e.new_key(), e2e.new_key()
    for key in (one, two):
        auth = {"authorization": f"Bearer {key.secret}"}
        counted = httpx.post(
            f"{e2e.url}/openai/v1/responses/input_tokens",
            headers=auth,
            json={"model": SONNET, "input": "hi"},
            timeout=30,
        )
        assert counted.status_code == 200, counted.text
        answered = httpx.post(
            f"{e2e.url}/openai/v1/responses",
            headers=auth,
            json={"model": SONNET, "input": "hi", "max_output_tokens": 16},
            timeout=30,
        )
        assert answered.status_code == 200, answered.text
    unknown = httpx.post(
        f"{e2e.url}/v1/messages",
        headers={"x-api-key": two.secret},
        json={
            "model": "son\x00net",
            "max_tokens": 8,
            "messages": [{"role": "user", "content": "x"}],
        },
        timeout=30,
    )
    assert unknown.status_code == 404, unknown.text

    assert sorted(r.api for r in rows(e2e, one, expect=2)) == [
        "responses",
        "responses_input_tokens",
    ]
    stored = rows(e2e, two, expect=3)
    assert sorted(r.api for r in stored) == ["messages", "responses", "responses_input_tokens"]
    refused = next(r for r in stored if r.api == "messages")
    assert refused.http_status == 404 and refused.model_name == "son\ufffdnet"
