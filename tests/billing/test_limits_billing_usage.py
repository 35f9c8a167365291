"""Billing against the running gateway: costs with prompt caching equal tokens × catalog prices
(streamed == non-streamed), requests failed before their first token are unbilled and release
their holds (after it, the output so far is billed), disconnected streams are billed (exact after a successful drain, estimated otherwise), count_tokens is never
billed or listed, one record per request, and the final stream event only after the record.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import httpx
import pytest

from tests.support.limits_billing_support import (
    CHAT,
    COUNT_TOKENS,
    MESSAGES,
    auth,
    chat_body,
    dumps,
    expected_cost_nano,
    hold_nano,
    messages_body,
    nano_to_usd_str,
    post,
    private_model,
    records_by_request,
    run_burst_held_upstream,
    sse_events,
    wait_for,
)
from tests.support.stack import Stack

pytestmark = pytest.mark.e2e

# Long enough that cache reads and writes dominate; deterministic so runs compare exactly.
POLICY = "You are the support assistant of a bank. Answer in two sentences. " * 60
GLOSSARY = "Glossary: IBAN, BIC, SEPA, standing order, direct debit, overdraft. " * 30


def _record(e2e: Stack, request_id: str, timeout: float = 60) -> Any:
    return wait_for(
        lambda: records_by_request(e2e, [request_id]).get(request_id),
        timeout=timeout,
        what=f"the usage record of {request_id}",
    )


def _stream(url: str, headers: dict[str, str], body: bytes) -> tuple[str, list[tuple[str, str]]]:
    with httpx.stream("POST", url, headers=headers, content=body, timeout=30) as response:
        assert response.status_code == 200, response.read()
        events = list(sse_events(response.iter_lines()))
        return response.headers["x-request-id"], events


def _token_fields(record: Any) -> tuple[int, ...]:
    return (
        record.input_tokens,
        record.output_tokens,
        record.cache_read_tokens,
        record.cache_write_5m_tokens,
        record.cache_write_1h_tokens,
        record.reasoning_tokens,
        record.cost_nano,
    )


# --- prices -------------------------------------------------------------------------------------
def _anthropic_turns(tag: str) -> list[dict[str, Any]]:
    system = [
        # The 1 h breakpoint first (the API's ordering rule), then a 5 min one.
        {
            "type": "text",
            "text": f"{tag} {POLICY}",
            "cache_control": {"type": "ephemeral", "ttl": "1h"},
        },
        {"type": "text", "text": GLOSSARY, "cache_control": {"type": "ephemeral"}},
    ]
    first = [{"role": "user", "content": "What is a standing order?"}]
    second = [
        *first,
        {"role": "assistant", "content": "A recurring transfer you set up once."},
        {"role": "user", "content": "And a direct debit?"},
    ]
    return [
        {"model": "sonnet", "max_tokens": 64, "system": system, "messages": m}
        for m in (first, second)
    ]


def _usage_of_stream(events: list[tuple[str, str]]) -> dict[str, Any]:
    usage: dict[str, Any] = {}
    for name, data in events:
        if name == "message_start":
            usage.update(json.loads(data)["message"]["usage"])
        elif name == "message_delta":
            usage.update(json.loads(data)["usage"])
    return usage


def _assert_matches_client_usage(record: Any, usage: dict[str, Any]) -> None:
    """The record bills exactly what the caller was told it used."""
    split = usage.get("cache_creation") or {}
    assert record.input_tokens == usage["input_tokens"]
    assert record.output_tokens == usage["output_tokens"]
    assert record.cache_read_tokens == usage["cache_read_input_tokens"]
    assert record.cache_write_1h_tokens == split["ephemeral_1h_input_tokens"]
    assert record.cache_write_5m_tokens == split["ephemeral_5m_input_tokens"]
    assert (
        record.cache_write_5m_tokens + record.cache_write_1h_tokens
        == (usage["cache_creation_input_tokens"])
    )


def test_messages_cached_cost_is_catalog_price_and_stream_equals_json(e2e: Stack) -> None:
    key = e2e.new_key()
    turns = _anthropic_turns(uuid.uuid4().hex)
    runs: dict[bool, list[Any]] = {}
    for stream in (False, True):
        e2e.reset_sims()  # a cold prompt cache for each run: same writes, then same reads
        runs[stream] = []
        for turn in turns:
            body = dumps({**turn, "stream": True} if stream else turn)
            if stream:
                request_id, events = _stream(e2e.url + MESSAGES, auth(key.secret), body)
                usage = _usage_of_stream(events)
            else:
                response = post(e2e.url + MESSAGES, auth(key.secret), body)
                assert response.status_code == 200, response.text
                request_id, usage = response.headers["x-request-id"], response.json()["usage"]
            record = _record(e2e, request_id)
            assert record.stream is stream and record.status == "ok" and record.output_exact
            _assert_matches_client_usage(record, usage)
            assert record.cost_nano == expected_cost_nano(record)
            runs[stream].append(record)

    write, read = runs[True]
    # Turn 1 writes both breakpoints at their own prices; turn 2 reads the whole system prompt.
    assert write.cache_write_1h_tokens > 0 and write.cache_write_5m_tokens > 0
    assert write.cache_read_tokens == 0
    assert read.cache_read_tokens == write.cache_write_1h_tokens + write.cache_write_5m_tokens
    assert read.cache_write_1h_tokens == read.cache_write_5m_tokens == 0
    # A streamed exchange costs exactly what the same exchange costs as JSON.
    assert [_token_fields(r) for r in runs[True]] == [_token_fields(r) for r in runs[False]]
    # The record keeps the prices it used: the tier applied (Sonnet 5.5 has one).
    assert read.prices == {
        "upToPromptTokens": None,
        "input": "2",
        "output": "10",
        "cacheRead": "0.2",
        "cacheWrite5m": "2.5",
        "cacheWrite1h": "4",
    }


def _chat_turns(tag: str) -> list[dict[str, Any]]:
    system = {"role": "system", "content": f"{tag} {POLICY}"}
    first = [system, {"role": "user", "content": "What is a standing order?"}]
    second = [
        *first,
        {"role": "assistant", "content": "A recurring transfer you set up once."},
        {"role": "user", "content": "And a direct debit?"},
    ]
    return [
        {"model": "sonnet", "max_completion_tokens": 64, "messages": m} for m in (first, second)
    ]


def _chat_usage_of_stream(events: list[tuple[str, str]]) -> dict[str, Any]:
    chunks = [json.loads(data) for _, data in events if data != "[DONE]"]
    usages = [c["usage"] for c in chunks if c.get("usage")]
    assert len(usages) == 1, usages
    return usages[0]


def test_chat_automatic_caching_cost_and_stream_equals_json(e2e: Stack) -> None:
    key = e2e.new_key()
    turns = _chat_turns(uuid.uuid4().hex)
    runs: dict[bool, list[Any]] = {}
    for stream in (False, True):
        e2e.reset_sims()
        runs[stream] = []
        for turn in turns:
            if stream:
                turn = {**turn, "stream": True, "stream_options": {"include_usage": True}}
                request_id, events = _stream(e2e.url + CHAT, auth(key.secret, "chat"), dumps(turn))
                usage = _chat_usage_of_stream(events)
            else:
                response = post(e2e.url + CHAT, auth(key.secret, "chat"), dumps(turn))
                assert response.status_code == 200, response.text
                request_id, usage = response.headers["x-request-id"], response.json()["usage"]
            record = _record(e2e, request_id)
            assert record.api == "chat" and record.stream is stream and record.output_exact
            assert record.cost_nano == expected_cost_nano(record)
            # What the OpenAI caller sees: cached = cache reads, prompt = all input kinds.
            details = usage["prompt_tokens_details"]
            assert details["cached_tokens"] == record.cache_read_tokens
            assert usage["completion_tokens"] == record.output_tokens
            assert usage["prompt_tokens"] == (
                record.input_tokens
                + record.cache_read_tokens
                + record.cache_write_5m_tokens
                + record.cache_write_1h_tokens
            )
            runs[stream].append(record)

    write, read = runs[True]
    assert write.cache_write_5m_tokens > 0 and write.cache_read_tokens == 0
    # The second turn reads the first turn's prefix (system + first user message) at 0.3 USD/Mt.
    assert read.cache_read_tokens == write.cache_write_5m_tokens
    assert [_token_fields(r) for r in runs[True]] == [_token_fields(r) for r in runs[False]]


# --- failed requests ------------------------------------------------------------------------------
def _one_hold_key(e2e: Stack, body: bytes, max_tokens: int = 16) -> Any:
    """A key whose spend cap covers one hold and not two: a hold that leaked would refuse the
    next request, so "admitted again" proves the failed request's hold was released."""
    hold = hold_nano(body, max_tokens)
    return e2e.new_key(cap_usd=nano_to_usd_str(hold + hold // 2))


def _call(api: str, stream: bool, text: str, max_tokens: int = 16) -> tuple[str, bytes]:
    if api == "chat":
        return CHAT, chat_body(text, stream=stream, max_tokens=max_tokens)
    return MESSAGES, messages_body(text, stream=stream, max_tokens=max_tokens)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("api", ["messages", "chat"])
def test_upstream_error_before_output_is_unbilled(e2e: Stack, api: str, stream: bool) -> None:
    marker = f"fail-{uuid.uuid4().hex}"
    path, body = _call(api, stream, marker)
    key = _one_hold_key(e2e, body)
    e2e.sim.script({"match": marker, "status": 500, "times": 2})
    for _ in range(2):
        response = post(e2e.url + path, auth(key.secret, api), body)
        assert response.status_code == 500, response.text
    assert e2e.usage(org_id=key.org_id) == []
    # Both holds were released: the same request is admitted and billed once it succeeds.
    ok = post(e2e.url + path, auth(key.secret, api), body)
    assert ok.status_code == 200, ok.text
    assert [r.request_id for r in e2e.usage(org_id=key.org_id)] == [ok.headers["x-request-id"]]


@pytest.mark.parametrize("api", ["messages", "chat"])
def test_error_event_mid_stream_bills_the_output_so_far(e2e: Stack, api: str) -> None:
    marker = f"midstream-{uuid.uuid4().hex}"
    path, body = _call(api, True, f"long answer {marker}")
    # A cap of 2.5 holds: two partial bills (well under a hold each) and one more hold fit; two
    # holds that leaked and one more do not, so "admitted again" proves the holds were settled.
    key = e2e.new_key(cap_usd=nano_to_usd_str(hold_nano(body, 16) * 5 // 2))
    # message_start, ping, content_block_start and two deltas reach the client, then an error.
    e2e.sim.script({"match": marker, "error_after_events": 5, "times": 2})
    failed: list[str] = []
    for _ in range(2):
        request_id, events = _stream(e2e.url + path, auth(key.secret, api), body)
        if api == "chat":
            assert any("error" in json.loads(d) for _, d in events if d != "[DONE]")
            assert events[-1][1] == "[DONE]"
        else:
            assert [n for n, _ in events][-1] == "error"
            assert "message_stop" not in [n for n, _ in events]
        assert any("delta" in d for _, d in events), "the error must come after output"
        failed.append(request_id)
    # Each failed stream is billed once, for what it produced (tests/gateway/test_partial_streams.py
    # checks the amounts), and its hold was settled: the next request is admitted.
    records = e2e.usage(org_id=key.org_id)
    assert [r.request_id for r in records] == failed
    assert all(r.status == "stream_failed" and r.output_exact is False for r in records)
    assert all(r.cost_nano == expected_cost_nano(r) > 0 for r in records)
    assert sum(r.cost_nano for r in records) <= hold_nano(body, 16) * 3 // 2
    request_id, _ = _stream(e2e.url + path, auth(key.secret, api), body)
    assert [r.request_id for r in e2e.usage(org_id=key.org_id)] == [*failed, request_id]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_all_deployments_failing_is_unbilled(e2e: Stack, stream: bool) -> None:
    marker = f"allfail-{uuid.uuid4().hex}"
    with private_model(e2e) as lab:
        body = dumps(
            {
                "model": lab.model_id,
                "max_tokens": 16,
                "stream": stream,
                "messages": [{"role": "user", "content": marker}],
            }
        )
        key = _one_hold_key(e2e, body)
        sims = [*lab.sims, e2e.sim]  # sim-a serves every model, this one too
        for sim in sims:
            sim.script({"match": marker, "status": 503})
        response = post(e2e.url + MESSAGES, auth(key.secret), body)
        assert response.status_code >= 500, response.text
        # Every deployment was tried once, and nothing was billed.
        assert [sum(marker in str(r["body"]) for r in sim.requests()) for sim in sims] == [1, 1, 1]
        assert e2e.usage(org_id=key.org_id) == []
        ok = post(e2e.url + MESSAGES, auth(key.secret), body)
        assert ok.status_code == 200, ok.text
        assert [r.request_id for r in e2e.usage(org_id=key.org_id)] == [ok.headers["x-request-id"]]
    # sim-a's failure count goes back to zero with a success (its health is shared by the session).
    fresh = e2e.new_key()
    assert post(e2e.url + MESSAGES, auth(fresh.secret), messages_body("reset")).status_code == 200


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_failover_before_the_first_token_is_recorded_once(e2e: Stack, stream: bool) -> None:
    key = e2e.new_key()
    marker = f"failover-{uuid.uuid4().hex}"
    with private_model(e2e) as lab:
        # own 0 fails and ranks above own 1, which answers; sim-a (serve-all, shared with other
        # tests that cool it down) fails too, wherever it ranks.
        session = lab.session_preferring(0, 1)
        for sim in (lab.sims[0], e2e.sim):
            sim.script({"match": marker, "status": 503})
        body = {"model": lab.model_id, "max_tokens": 16, "stream": stream}
        response = post(
            e2e.url + MESSAGES,
            auth(key.secret, **{"x-ezat-session": session}),
            dumps({**body, "messages": [{"role": "user", "content": marker}]}),
        )
        assert response.status_code == 200, response.text
        record = _record(e2e, response.headers["x-request-id"])
    failed, answered = record.attempts[:-1], record.attempts[-1]
    assert answered["outcome"] == "ok" and answered["deployment"] == lab.deployments[1][1]
    assert record.deployment == lab.deployments[1][1]
    assert lab.deployments[0][1] in [a["deployment"] for a in failed]
    assert {a["outcome"] for a in failed} == {"http_503"}
    assert [r.request_id for r in e2e.usage(org_id=key.org_id)] == [record.request_id]
    assert record.cost_nano == expected_cost_nano(record) > 0
    # sim-a may have failed here: a success resets its shared failure count.
    assert post(e2e.url + MESSAGES, auth(key.secret), messages_body("reset")).status_code == 200


# --- disconnected streams ---------------------------------------------------------------------------
def _deltas_text(events: list[tuple[str, str]]) -> int:
    """Characters of output in the content deltas among `events` (what the gateway estimates from)."""
    chars = 0
    for name, data in events:
        if name == "content_block_delta":
            delta = json.loads(data)["delta"]
            chars += len(
                delta.get("text") or delta.get("partial_json") or delta.get("thinking") or ""
            )
    return chars


def _leave_after_deltas(url: str, headers: dict[str, str], body: bytes, deltas: int) -> str:
    """Read the stream until `deltas` content deltas arrived, then hang up."""
    seen = 0
    with (
        httpx.Client(timeout=30) as client,
        client.stream("POST", url, headers=headers, content=body) as response,
    ):
        assert response.status_code == 200
        request_id = response.headers["x-request-id"]
        for name, data in sse_events(response.iter_lines()):
            if name == "content_block_delta" or '"content":' in data:
                seen += 1
                if seen >= deltas:
                    break
    assert seen >= deltas, "the stream ended before the client could leave"
    return request_id


@pytest.mark.parametrize("api", ["messages", "chat"])
def test_disconnect_billed_exactly_when_the_drain_succeeds(e2e: Stack, api: str) -> None:
    key = e2e.new_key()
    marker = f"long answer drain-{uuid.uuid4().hex}"
    path, body = _call(api, True, marker, 1000)
    path_json, body_json = _call(api, False, marker, 1000)
    reference = post(e2e.url + path_json, auth(key.secret, api), body_json)
    full = _record(e2e, reference.headers["x-request-id"])
    # ~70 events 20 ms apart: the upstream finishes well within the 3 s drain.
    e2e.sim.script({"match": marker, "event_delay": 0.02})
    request_id = _leave_after_deltas(e2e.url + path, auth(key.secret, api), body, 2)
    record = _record(e2e, request_id)
    assert record.status == "client_disconnected"
    assert record.output_exact is True
    assert record.output_tokens == full.output_tokens > 50
    assert record.cost_nano == expected_cost_nano(record) > 0
    upstream = [
        r for r in e2e.sim.requests() if marker in str(r["body"]) and r["body"].get("stream")
    ]
    assert len(upstream) == 1
    assert len(e2e.usage(org_id=key.org_id)) == 2  # the reference and this one


def _all_input(record: Any) -> int:
    return (
        record.input_tokens
        + record.cache_read_tokens
        + record.cache_write_5m_tokens
        + record.cache_write_1h_tokens
    )


@pytest.mark.parametrize("api", ["messages", "chat"])
@pytest.mark.parametrize(
    "fault",
    [
        # The upstream connection drops after 20 events, after the client left.
        {"event_delay": 0.05, "drop_after_events": 20},
        # The upstream goes silent for longer than the 3 s drain.
        {"pause_after_events": 8, "pause": 6.0},
    ],
    ids=["dropped", "silent"],
)
def test_disconnect_billed_as_estimate_when_the_drain_fails(
    e2e: Stack, fault: dict[str, Any], api: str
) -> None:
    key = e2e.new_key()
    marker = f"long answer estimate-{uuid.uuid4().hex}"
    # The simulator's events for this text (deterministic), read in Anthropic form; the reply
    # does not depend on the API the request came through.
    _, events = _stream(
        e2e.url + MESSAGES, auth(key.secret), messages_body(marker, max_tokens=1000, stream=True)
    )
    path_json, body_json = _call(api, False, marker, 1000)
    reference = post(e2e.url + path_json, auth(key.secret, api), body_json)
    full = _record(e2e, reference.headers["x-request-id"])

    produced = fault.get("drop_after_events") or fault["pause_after_events"]
    e2e.sim.script({"match": marker, **fault})
    path, body = _call(api, True, marker, 1000)
    request_id = _leave_after_deltas(e2e.url + path, auth(key.secret, api), body, 2)
    record = _record(e2e, request_id)
    assert record.status == "client_disconnected"
    assert record.output_exact is False
    # Output estimated from the text the upstream produced before it failed (4 chars a token).
    chars = _deltas_text(events[:produced])
    assert chars > 0
    assert 0 < record.output_tokens == -(-chars // 4) < full.output_tokens
    assert record.cost_nano == expected_cost_nano(record) > 0
    # The input side is still exact (from message_start).
    assert _all_input(record) == _all_input(full)
    assert len(e2e.usage(org_id=key.org_id)) == 3  # two references and this one


# --- count_tokens -----------------------------------------------------------------------------------
def test_count_tokens_never_billed_or_listed(e2e: Stack) -> None:
    from accounts.models import Organization
    from accounts.services import create_management_key

    key = e2e.new_key()
    system = [{"type": "text", "text": POLICY, "cache_control": {"type": "ephemeral"}}]
    for extra in ({}, {"system": system}, {"system": system, "stream": True}):
        response = post(e2e.url + COUNT_TOKENS, auth(key.secret), messages_body("count", **extra))
        assert response.status_code == 200, response.text
        assert response.json()["input_tokens"] > 0
    billed = post(e2e.url + MESSAGES, auth(key.secret), messages_body("billed"))
    assert billed.status_code == 200
    records = e2e.usage(org_id=key.org_id)
    assert [(r.request_id, r.api) for r in records] == [
        (billed.headers["x-request-id"], "messages")
    ]

    # Not in the usage totals (management API); the request log lists every request (issue 16),
    # count_tokens included, at no cost.
    with e2e.blocker.unblock():
        _, secret = create_management_key(org=Organization.objects.get(pk=key.org_id))
    api = {"authorization": f"Bearer {secret}"}
    log = httpx.get(f"{e2e.url}/api/v1/orgs/{key.org_id}/requests", headers=api, timeout=10)
    assert log.status_code == 200, log.text
    deadline = time.monotonic() + 30
    rows: list[dict] = []
    while time.monotonic() < deadline:  # request-log rows are written off the request path
        log = httpx.get(f"{e2e.url}/api/v1/orgs/{key.org_id}/requests", headers=api, timeout=10)
        rows = log.json()["results"]
        if len(rows) == 4:
            break
        time.sleep(0.2)
    assert sorted(row["api"] for row in rows) == ["count_tokens"] * 3 + ["messages"]
    assert [r["request_id"] for r in rows if r["cost_usd"] != "0"] == [
        billed.headers["x-request-id"]
    ]
    usage = httpx.get(f"{e2e.url}/api/v1/orgs/{key.org_id}/usage", headers=api, timeout=10)
    assert usage.status_code == 200, usage.text
    assert usage.json()["totals"]["requests"] == 1


# --- one record per request ---------------------------------------------------------------------
def test_each_request_recorded_once_under_its_request_id(e2e: Stack) -> None:
    key = e2e.new_key()
    own = f"client-{uuid.uuid4().hex}"
    ids = []
    for api in ("messages", "chat"):
        for stream in (False, True):
            path, body = _call(api, stream, f"once {api} {stream}")
            if stream:
                request_id, _ = _stream(e2e.url + path, auth(key.secret, api), body)
            else:
                response = post(e2e.url + path, auth(key.secret, api), body)
                assert response.status_code == 200
                request_id = response.headers["x-request-id"]
            ids.append(request_id)
    # A caller's own (valid) request id is kept as the record's id.
    response = post(
        e2e.url + MESSAGES, auth(key.secret, **{"x-request-id": own}), messages_body("x")
    )
    assert response.headers["x-request-id"] == own
    ids.append(own)
    records = e2e.usage(org_id=key.org_id)
    assert sorted(r.request_id for r in records) == sorted(ids)
    assert len(set(ids)) == len(ids)
    for record in records:
        assert record.cost_nano == expected_cost_nano(record) > 0


def test_reused_request_id_gets_two_records_both_billed(e2e: Stack) -> None:
    key = e2e.new_key()
    own = f"dup-{uuid.uuid4().hex}"
    headers = auth(key.secret, **{"x-request-id": own})
    first = post(e2e.url + MESSAGES, headers, messages_body("first"))
    second = post(e2e.url + MESSAGES, headers, messages_body("second", stream=True))
    assert first.status_code == second.status_code == 200
    records = e2e.usage(org_id=key.org_id)
    assert len(records) == 2
    assert records[0].request_id == own
    assert records[1].request_id.startswith(own + "~") and records[1].stream
    for record in records:
        assert record.cost_nano == expected_cost_nano(record) > 0


def test_reused_request_id_cannot_overspend_a_cap(e2e: Stack) -> None:
    """Holds are per request, not per caller-chosen id: ten concurrent requests sharing one
    x-request-id against a cap covering two holds must not all be admitted."""
    tag = uuid.uuid4().hex
    body = messages_body(f"long answer same-{tag}", max_tokens=200, stream=True)
    hold = hold_nano(body, 200)
    key = e2e.new_key(cap_usd=nano_to_usd_str(2 * hold + hold // 2))
    headers = auth(key.secret, **{"x-request-id": f"same-{tag}"})
    replies = run_burst_held_upstream(
        e2e.sim, [(e2e.url + MESSAGES, headers, body)] * 10, marker=f"same-{tag}", admitted=2
    )
    statuses = sorted(r.status for r in replies)
    assert statuses == [200, 200] + [402] * 8, statuses
    records = e2e.usage(org_id=key.org_id)
    assert len(records) == 2
    assert sum(r.cost_nano for r in records) <= 2 * hold + hold // 2


# --- the final event comes after the record -------------------------------------------------------
@pytest.mark.parametrize("api", ["messages", "chat"])
def test_final_event_only_after_the_record_exists(e2e: Stack, api: str) -> None:
    key = e2e.new_key()
    path, body = _call(api, True, f"final-{uuid.uuid4().hex}")
    final = "event: message_stop" if api == "messages" else "data: [DONE]"
    with (
        httpx.Client(timeout=30) as client,
        client.stream(
            "POST", e2e.url + path, headers=auth(key.secret, api), content=body
        ) as response,
    ):
        request_id = response.headers["x-request-id"]
        for line in response.iter_lines():
            if line == final:
                # The client has just seen the end of the stream: the record must be there now.
                record = records_by_request(e2e, [request_id]).get(request_id)
                assert record is not None, "the final event went out before the usage record"
                break
        else:
            raise AssertionError(f"no {final!r} line in the stream")
    assert record.status == "ok" and record.output_exact and record.output_tokens > 0
