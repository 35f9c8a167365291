"""Limits against the running gateway: RPM exact across processes, spend caps and org balances
that concurrent requests cannot overspend (Redis and in-process limiters), Redis outages, and the
rate-limit headers of both APIs.

Implementations: with REDIS_URL set (CI) the stack's gateway uses the Redis limiter and a second
process shares it; the in-process limiter always runs in a gateway started without REDIS_URL.
Without REDIS_URL (a local SQLite run) the Redis variants are not generated: the RPM test runs
its single-process version and the money tests run on the in-process limiter only. Test ids say
which variant ran.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.support.limits_billing_support import (
    CHAT,
    COUNT_TOKENS,
    MESSAGES,
    Call,
    Reply,
    auth,
    chat_body,
    expected_cost_nano,
    fresh_minute,
    hold_nano,
    messages_body,
    nano_to_usd_str,
    parse_reset,
    post,
    run_burst,
    run_burst_held_upstream,
    upstream_records_with,
)
from tests.support.stack import GatewayProcess, Stack, database_url, e2e_redis_url, start_gateway

pytestmark = pytest.mark.e2e

REDIS = bool(e2e_redis_url())
IMPLS = ["redis", "in_process"] if REDIS else ["in_process"]
DEAD_REDIS = "redis://127.0.0.1:1/0"  # nothing listens on port 1


class Gateways:
    """Extra gateway processes on the stack's database, started on first use."""

    def __init__(self, stack: Stack, tmp: Path) -> None:
        from django.db import connection

        self.stack = stack
        self.tmp = tmp
        with stack.blocker.unblock():
            self.db_url = database_url(connection.settings_dict)
        self._started: dict[str, GatewayProcess] = {}

    def _start(self, name: str, redis_url: str, env: dict[str, str] | None = None) -> str:
        if name not in self._started:
            self._started[name] = start_gateway(self.db_url, redis_url, self.tmp, env)
        return self._started[name].url

    def redis_peer(self) -> str:
        """A second process sharing the stack's Redis (what a multi-replica deployment runs)."""
        assert REDIS
        return self._start("redis_peer", e2e_redis_url())

    def url_for(self, impl: str) -> str:
        if impl == "redis":
            assert REDIS
            return self.stack.url
        if not REDIS:
            return self.stack.url  # the stack's gateway is already the in-process one
        return self._start("in_process", "")

    def redis_down(self) -> str:
        # The fallback fraction is pinned so the fail-open limit below is known.
        return self._start("redis_down", DEAD_REDIS, {"EZAT_FAILOPEN_RPM_FRACTION": "0.5"})

    def stop(self) -> None:
        for process in self._started.values():
            process.stop()


@pytest.fixture(scope="module")
def gateways(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateways]:
    started = Gateways(stack, tmp_path_factory.mktemp("extra-gateways"))
    try:
        yield started
    finally:
        started.stop()


def _assert_429(reply: Reply, api: str, limit: int) -> None:
    assert reply.status == 429, reply.body
    retry = reply.headers["retry-after"]
    assert retry.isdigit() and 1 <= int(retry) <= 60, retry
    if api == "chat":
        assert reply.json()["error"]["code"] == "rate_limit_exceeded"
        assert reply.headers["x-ratelimit-limit-requests"] == str(limit)
        assert reply.headers["x-ratelimit-remaining-requests"] == "0"
    else:
        assert reply.error_type == "rate_limit_error"
        assert reply.headers["anthropic-ratelimit-requests-limit"] == str(limit)
        assert reply.headers["anthropic-ratelimit-requests-remaining"] == "0"


# --- RPM ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("processes", [2] if REDIS else [1], ids=lambda n: f"{n}-process")
def test_rpm_exact_across_gateway_processes(e2e: Stack, gateways: Gateways, processes: int) -> None:
    urls = [e2e.url, gateways.redis_peer()] if processes == 2 else [e2e.url]
    key = e2e.new_key(rpm=30)
    marker = f"rpm-{uuid.uuid4().hex}"
    calls: list[Call] = []
    per_process = 50 // len(urls)
    for url in urls:
        for i in range(per_process):
            # One in five is count_tokens: free, but it counts toward the RPM.
            path = COUNT_TOKENS if i % 5 == 4 else MESSAGES
            calls.append((url + path, auth(key.secret), messages_body(f"{marker} {i}")))
    fresh_minute()
    replies = run_burst(calls)

    ok = [r for r in replies if r.status == 200]
    refused = [r for r in replies if r.status != 200]
    assert len(ok) == 30, sorted(r.status for r in replies)
    for reply in refused:
        _assert_429(reply, "messages", 30)
    # Every admission saw a distinct count: the remaining values are exactly 29 … 0, which a
    # per-process counter (each process counting its own 25) could not produce.
    remaining = sorted(int(r.headers["anthropic-ratelimit-requests-remaining"]) for r in ok)
    assert remaining == list(range(30))
    assert {r.headers["anthropic-ratelimit-requests-limit"] for r in ok} == {"30"}
    resets = {r.headers["anthropic-ratelimit-requests-reset"] for r in replies}
    assert len(resets) == 1, f"the burst straddled a minute: {resets}"

    # Refused requests never reached the upstream; admitted ones did, once.
    assert len(upstream_records_with(e2e.sim, marker)) == 30
    # Each admitted message was billed once; count_tokens never.
    billed = [r for r in ok if r.url.endswith(MESSAGES)]
    records = e2e.usage(org_id=key.org_id)
    assert sorted(r.request_id for r in records) == sorted(
        r.headers["x-request-id"] for r in billed
    )
    assert {r.api for r in records} <= {"messages"}


def test_count_tokens_counts_toward_rpm(e2e: Stack) -> None:
    key = e2e.new_key(rpm=3)
    body = messages_body("count me")
    fresh_minute()
    for expected_remaining in ("2", "1", "0"):
        response = post(e2e.url + COUNT_TOKENS, auth(key.secret), body)
        assert response.status_code == 200, response.text
        assert response.headers["anthropic-ratelimit-requests-remaining"] == expected_remaining
    response = post(e2e.url + MESSAGES, auth(key.secret), body)
    assert response.status_code == 429
    assert response.json()["error"]["type"] == "rate_limit_error"
    assert response.headers["retry-after"].isdigit()
    assert e2e.usage(org_id=key.org_id) == []


# --- rate-limit headers ---------------------------------------------------------------------------
def test_rate_limit_headers_on_the_messages_api(e2e: Stack) -> None:
    key = e2e.new_key(rpm=3)
    fresh_minute()
    before = datetime.now(UTC).replace(microsecond=0)
    replies = [
        post(e2e.url + MESSAGES, auth(key.secret), messages_body("h1")),
        post(e2e.url + MESSAGES, auth(key.secret), messages_body("h2", stream=True)),
        post(e2e.url + COUNT_TOKENS, auth(key.secret), messages_body("h3")),
    ]
    for response, remaining in zip(replies, ("2", "1", "0"), strict=True):
        assert response.status_code == 200, response.text
        assert response.headers["anthropic-ratelimit-requests-limit"] == "3"
        assert response.headers["anthropic-ratelimit-requests-remaining"] == remaining
        reset = parse_reset(response.headers["anthropic-ratelimit-requests-reset"])
        assert before < reset <= before + timedelta(seconds=61)
        assert "x-ratelimit-limit-requests" not in response.headers
    over = post(e2e.url + MESSAGES, auth(key.secret), messages_body("h4"))
    reply = Reply(over.status_code, over.headers, over.content, str(over.url), 0.0)
    _assert_429(reply, "messages", 3)
    parse_reset(over.headers["anthropic-ratelimit-requests-reset"])


def test_rate_limit_headers_on_the_openai_api(e2e: Stack) -> None:
    key = e2e.new_key(rpm=2)
    fresh_minute()
    replies = [
        post(e2e.url + CHAT, auth(key.secret, "chat"), chat_body("o1")),
        post(e2e.url + CHAT, auth(key.secret, "chat"), chat_body("o2", stream=True)),
    ]
    for response, remaining in zip(replies, ("1", "0"), strict=True):
        assert response.status_code == 200, response.text
        assert response.headers["x-ratelimit-limit-requests"] == "2"
        assert response.headers["x-ratelimit-remaining-requests"] == remaining
        reset = response.headers["x-ratelimit-reset-requests"]
        assert reset.endswith("s") and 0 <= int(reset[:-1]) <= 60, reset
        assert "anthropic-ratelimit-requests-limit" not in response.headers
    over = post(e2e.url + CHAT, auth(key.secret, "chat"), chat_body("o3"))
    reply = Reply(over.status_code, over.headers, over.content, str(over.url), 0.0)
    _assert_429(reply, "chat", 2)
    assert over.headers["x-ratelimit-reset-requests"].endswith("s")


# --- money under concurrency ------------------------------------------------------------------
MAX_TOKENS = 200  # the simulator cuts its "long answer" here, so a reply costs close to its hold
BURST = 100
COVERED = 10


def _money_call(api: str, url: str, secret: str, text: str, *, stream: bool = False) -> Call:
    if api == "chat":
        body = chat_body(text, max_tokens=MAX_TOKENS, stream=stream)
        return (url + CHAT, auth(secret, "chat"), body)
    return (url + MESSAGES, auth(secret), messages_body(text, max_tokens=MAX_TOKENS, stream=stream))


def _assert_402(reply: Reply, api: str) -> None:
    assert reply.status == 402, (reply.status, reply.body)
    assert reply.headers["x-should-retry"] == "false"
    if api == "chat":
        assert reply.json()["error"]["code"] == "insufficient_quota"
    else:
        assert reply.error_type == "billing_error"


def _second_key(e2e: Stack, org_id: int) -> str:
    from accounts.models import Organization
    from accounts.services import create_api_key

    with e2e.blocker.unblock():
        org = Organization.objects.get(pk=org_id)
        return create_api_key(org=org, name="second", rpm_limit=10_000).secret


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize(
    ("scope", "api"), [("key_cap", "messages"), ("org_balance", "chat")], ids=["key_cap", "org"]
)
def test_concurrent_requests_never_spend_beyond_the_limit(
    e2e: Stack, gateways: Gateways, impl: str, scope: str, api: str
) -> None:
    # With Redis the burst is split over two processes: the limit is global, not per replica.
    urls = [e2e.url, gateways.redis_peer()] if impl == "redis" else [gateways.url_for(impl)]
    tag = uuid.uuid4().hex[:12]
    burst_text, after_text = f"long answer burst-{tag}", f"long answer after-{tag}"
    # Both texts have the same length, so every request here carries the same hold.
    hold = hold_nano(_money_call(api, "", "", burst_text, stream=True)[2], MAX_TOKENS)
    limit = COVERED * hold + hold // 2  # covers 10 holds, not 11
    if scope == "key_cap":
        key = e2e.new_key(cap_usd=nano_to_usd_str(limit))
        secrets = [key.secret]
    else:
        # The balance belongs to the org: two of its keys draw on it together.
        key = e2e.new_key(credit_usd=nano_to_usd_str(limit))
        secrets = [key.secret, _second_key(e2e, key.org_id)]
    # The admitted requests stay in flight (paused upstream) until the rest are decided, so every
    # admission of the burst sees the others' holds: exactly 10 fit.
    calls = [
        _money_call(
            api, urls[i % len(urls)], secrets[i // 2 % len(secrets)], burst_text, stream=True
        )
        for i in range(BURST)
    ]
    replies = run_burst_held_upstream(e2e.sim, calls, marker=f"burst-{tag}", admitted=COVERED)
    ok = [r for r in replies if r.status == 200]
    refused = [r for r in replies if r.status != 200]
    assert len(ok) == COVERED, sorted(r.status for r in replies)
    for reply in refused:
        _assert_402(reply, api)
        message = reply.json()["error"]["message"]
        assert ("spend cap" if scope == "key_cap" else "balance") in message, message
    assert max(r.done_at for r in refused) < min(r.done_at for r in ok), "burst not concurrent"

    # Settled holds free the difference between hold and cost: spend on until refused.
    follow_ups = 0
    while True:
        url = urls[follow_ups % len(urls)]
        response = post(*_money_call(api, url, secrets[-1], after_text))
        if response.status_code != 200:
            reply = Reply(response.status_code, response.headers, response.content, url, 0.0)
            _assert_402(reply, api)
            break
        follow_ups += 1
        assert follow_ups <= COVERED, "a limit covering 10 holds admitted far more requests"

    records = e2e.usage(org_id=key.org_id)
    assert len(records) == COVERED + follow_ups
    for record in records:
        assert record.cost_nano == expected_cost_nano(record)
        assert 0 < record.cost_nano <= hold
    spent = sum(r.cost_nano for r in records)
    assert spent <= limit
    # …and the refusal was needed: what is left cannot cover one more worst case.
    assert limit - spent < hold


# --- Redis unreachable --------------------------------------------------------------------------
def test_redis_down_rpm_fails_open_and_money_fails_closed(e2e: Stack, gateways: Gateways) -> None:
    url = gateways.redis_down()
    key = e2e.new_key(rpm=4)
    marker = f"down-{uuid.uuid4().hex}"
    body = messages_body(marker)
    fresh_minute()

    # Free requests fail open on a conservative per-process limit (half the RPM here)…
    counted = [post(url + COUNT_TOKENS, auth(key.secret), body) for _ in range(3)]
    assert [r.status_code for r in counted] == [200, 200, 429], [r.text for r in counted]
    assert counted[0].json()["input_tokens"] > 0
    assert counted[2].headers["retry-after"].isdigit()

    # …money fails closed: nothing reaches the upstream, nothing is billed.
    refused = [
        post(url + MESSAGES, auth(key.secret), body),
        post(url + MESSAGES, auth(key.secret), messages_body(marker, stream=True)),
        post(url + CHAT, auth(key.secret, "chat"), chat_body(marker)),
    ]
    for response in refused:
        assert response.status_code == 503, response.text
        assert "unreachable" in response.text
    assert refused[0].json()["error"]["type"] == "api_error"
    assert [r["path"] for r in upstream_records_with(e2e.sim, marker)] == [
        "/v1/messages/count_tokens"
    ] * 2
    assert e2e.usage(org_id=key.org_id) == []

    # The fallback is counted in a metric (one per free request that took it).
    import httpx

    metrics = httpx.get(url + "/metrics", timeout=10).text
    line = next(x for x in metrics.splitlines() if x.startswith("ezat_limiter_fail_open_total "))
    assert float(line.split()[1]) == 3.0
