"""Reasoning without server state across two gateway processes, and stored responses
(`store: true`): previous_response_id, item_reference, GET, DELETE, other orgs, a store failure."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.chat_support import upstream
from tests.support.responses_support import SONNET, WEATHER_TOOL, post
from tests.support.stack import (
    GatewayProcess,
    Key,
    Stack,
    database_url,
    start_gateway,
)

pytestmark = pytest.mark.e2e

TOOL_TURN: dict[str, Any] = {
    "model": SONNET,
    "tools": [WEATHER_TOOL],
    "reasoning": {"effort": "high"},
    "include": ["reasoning.encrypted_content"],
    "store": False,
}


@pytest.fixture(scope="module")
def second_gateway(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Another replica: no Redis (so no shared state at all), same database and key material."""
    from django.db import connection

    with stack.blocker.unblock():
        db_url = database_url(connection.settings_dict)
    gateway: GatewayProcess = start_gateway(db_url, "", tmp_path_factory.mktemp("gateway-b"))
    try:
        yield gateway.url
    finally:
        gateway.stop()


def _post_to(url: str, key: Key, body: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(
        url + "/openai/v1/responses",
        headers={"authorization": f"Bearer {key.secret}"},
        json=body,
        timeout=60,
    )
    assert response.status_code == 200, response.text
    return response.json()


def test_tool_loop_with_thinking_alternating_between_two_replicas(
    e2e: Stack, second_gateway: str
) -> None:
    key = e2e.new_key()
    replicas = [e2e.url, second_gateway, e2e.url, second_gateway]
    items: list[dict[str, Any]] = []
    for turn, url in enumerate(replicas):
        if turn % 2 == 0:  # a question: the model thinks and calls the tool
            items.append({"role": "user", "content": f"Weather in Oslo, day {turn}?"})
        out = _post_to(url, key, {**TOOL_TURN, "input": items})
        kinds = [item["type"] for item in out["output"]]
        reasoning = out["output"][0]
        assert reasoning["encrypted_content"].startswith("ezr1.")
        items += out["output"]
        if turn % 2 == 0:
            assert kinds == ["reasoning", "function_call"]
            call_id = out["output"][1]["call_id"]
            items.append(
                {"type": "function_call_output", "call_id": call_id, "output": f"{turn}°C"}
            )
        else:  # the tool's answer: the other replica opened the first one's sealed thinking
            assert kinds == ["reasoning", "message"]
            assert out["output"][1]["content"][0]["text"] == f"Tool said: {turn - 1}°C"
    sent = upstream(e2e)
    thinking = [
        b
        for m in sent["messages"]
        if m["role"] == "assistant"
        for b in m["content"]
        if b["type"] == "thinking"
    ]
    assert len(thinking) == 3  # every earlier turn's signed block went back unchanged
    assert sent["thinking"]["type"] == "adaptive"


def test_sealed_reasoning_is_bound_to_the_org_and_refused_when_tampered(e2e: Stack) -> None:
    key, other = e2e.new_key(), e2e.new_key()
    first = post(e2e, key, {**TOOL_TURN, "input": "Weather in Oslo?"}).json()
    reasoning, call = first["output"]
    answer = {"type": "function_call_output", "call_id": call["call_id"], "output": "9°C"}
    history = [{"role": "user", "content": "Weather in Oslo?"}, reasoning, call, answer]
    foreign = post(e2e, other, {**TOOL_TURN, "input": history})
    assert foreign.status_code == 400
    assert foreign.json()["error"]["param"] == "input[1].encrypted_content"
    blob = reasoning["encrypted_content"]
    tampered = {
        **reasoning,
        "encrypted_content": blob[:-6] + ("AAAAAA" if blob[-6:] != "AAAAAA" else "BBBBBB"),
    }
    changed = post(e2e, key, {**TOOL_TURN, "input": [history[0], tampered, call, answer]})
    assert changed.status_code == 400
    assert changed.json()["error"]["param"] == "input[1].encrypted_content"
    garbage = {**reasoning, "encrypted_content": "gAAAAA-not-ours"}
    malformed = post(e2e, key, {**TOOL_TURN, "input": [history[0], garbage, call, answer]})
    assert malformed.status_code == 400
    assert "encrypted_content" in malformed.json()["error"]["message"]


def test_previous_response_id_within_the_org_and_get_delete(e2e: Stack) -> None:
    key, other = e2e.new_key(), e2e.new_key()
    body = {"model": SONNET, "tools": [WEATHER_TOOL], "reasoning": {"effort": "high"}}
    first = post(e2e, key, {**body, "input": "Weather in Oslo?", "metadata": {"k": "v"}}).json()
    assert first["store"] is True and first["metadata"] == {"k": "v"}
    # Not included, but kept server-side for the continuation.
    reasoning, call = first["output"]
    assert reasoning["encrypted_content"] is None
    answer = {"type": "function_call_output", "call_id": call["call_id"], "output": "9°C"}
    second = post(e2e, key, {**body, "previous_response_id": first["id"], "input": [answer]})
    assert second.status_code == 200, second.text
    assert second.json()["output"][-1]["content"][0]["text"] == "Tool said: 9°C"
    assert upstream(e2e)["messages"][1]["content"][0]["type"] == "thinking"

    foreign = post(e2e, other, {**body, "previous_response_id": first["id"], "input": [answer]})
    assert foreign.status_code == 404
    assert foreign.json()["error"]["param"] == "previous_response_id"

    url = f"{e2e.url}/openai/v1/responses/{first['id']}"
    auth = {"authorization": f"Bearer {key.secret}"}
    got = httpx.get(url, headers=auth, timeout=30)
    assert got.status_code == 200 and got.json() == first
    assert httpx.get(url, headers={"authorization": f"Bearer {other.secret}"}).status_code == 404
    assert httpx.delete(url, headers={"authorization": f"Bearer {other.secret}"}).status_code == 404
    deleted = httpx.delete(url, headers=auth, timeout=30)
    assert deleted.json() == {"id": first["id"], "object": "response", "deleted": True}
    assert httpx.get(url, headers=auth, timeout=30).status_code == 404
    gone = post(e2e, key, {**body, "previous_response_id": first["id"], "input": [answer]})
    assert gone.status_code == 404
    cancel = httpx.post(url + "/cancel", headers=auth, timeout=30)
    assert cancel.status_code == 400 and "background" in cancel.json()["error"]["message"]


def test_item_references_resolve_stored_items(e2e: Stack) -> None:
    """What the Vercel AI SDK sends with store: true: earlier output items by id only."""
    key = e2e.new_key()
    body = {"model": SONNET, "tools": [WEATHER_TOOL], "reasoning": {"effort": "high"}}
    first = post(e2e, key, {**body, "input": "Weather in Oslo?"}).json()
    reasoning, call = first["output"]
    items = [
        {"role": "user", "content": "Weather in Oslo?"},
        {"type": "item_reference", "id": reasoning["id"]},
        {
            "type": "function_call",
            "call_id": call["call_id"],
            "name": call["name"],
            "arguments": call["arguments"],
        },
        {"type": "function_call_output", "call_id": call["call_id"], "output": "9°C"},
    ]
    second = post(e2e, key, {**body, "input": items})
    assert second.status_code == 200, second.text
    assert upstream(e2e)["messages"][1]["content"][0]["type"] == "thinking"
    other = post(e2e, e2e.new_key(), {**body, "input": items})
    assert other.status_code == 404
    assert other.json()["error"]["param"] == "input[1].id"


def _refuse_stored_responses_of(org_id: int) -> str:
    """A trigger that makes the database refuse this org's stored responses; returns the SQL
    that removes it."""
    from django.db import connection

    name = f"e2e_refuse_store_{org_id}"
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                f"CREATE FUNCTION {name}() RETURNS trigger AS $$ BEGIN "
                f"RAISE EXCEPTION 'store refused by test'; END $$ LANGUAGE plpgsql"
            )
            cursor.execute(
                f"CREATE TRIGGER {name} BEFORE INSERT ON gateway_storedresponse FOR EACH ROW "
                f"WHEN (NEW.org_id = {org_id}) EXECUTE FUNCTION {name}()"
            )
            return f"DROP TRIGGER {name} ON gateway_storedresponse; DROP FUNCTION {name}()"
        cursor.execute(
            f"CREATE TRIGGER {name} BEFORE INSERT ON gateway_storedresponse "
            f"WHEN NEW.org_id = {org_id} BEGIN SELECT RAISE(ABORT, 'store refused by test'); END"
        )
        return f"DROP TRIGGER {name}"


def test_a_store_failure_never_fails_the_answer(e2e: Stack) -> None:
    """The database refuses the stored copy: the answer still arrives (and is billed), the
    failure is counted, and a continuation from it is a clear 404."""
    from django.db import connection

    key = e2e.new_key()
    with e2e.blocker.unblock():
        cleanup = _refuse_stored_responses_of(key.org_id)
    try:
        response = post(e2e, key, {"model": SONNET, "input": "hello"})
        assert response.status_code == 200, response.text
        answer = response.json()
        assert answer["output"][0]["content"][0]["text"] == "Simulated reply to: hello"
        assert len(e2e.usage(org_id=key.org_id)) == 1
        follow = post(
            e2e, key, {"model": SONNET, "previous_response_id": answer["id"], "input": "more"}
        )
        assert follow.status_code == 404
        assert follow.json()["error"]["param"] == "previous_response_id"
        metrics = httpx.get(e2e.url + "/metrics", timeout=30).text
        assert 'ezat_side_effect_failures_total{what="response_store"}' in metrics
    finally:
        with e2e.blocker.unblock(), connection.cursor() as cursor:
            for statement in cleanup.split("; "):
                cursor.execute(statement)
