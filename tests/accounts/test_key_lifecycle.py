"""Key lifecycle against the running gateway with the official SDKs (issue 19): a disabled key and
an expired key get 401 saying so, a model off the key's allow-list gets 403 permission_error (and
ezat/auto skips it), a spend cap per UTC day or in total gets 402 like the monthly cap, and every
change reaches every gateway process within the key cache's window (EZAT_KEY_CACHE_TTL, 0.5 s in
the e2e stack)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.support.stack import (
    GATEWAY_ENV,
    GatewayProcess,
    Key,
    Stack,
    database_url,
    e2e_redis_url,
    start_gateway,
)
from tests.waiting import wait_for

pytestmark = pytest.mark.e2e

OPUS = "anthropic/claude-opus-5-5"
HAIKU = "anthropic/claude-haiku-5-5"
TTL = float(GATEWAY_ENV["EZAT_KEY_CACHE_TTL"])
# The window plus scheduling slack on a loaded 2-core machine.
WINDOW = TTL + 5.0


def _anthropic(url: str, key: Key) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key=key.secret, max_retries=0, timeout=30)


def _openai(url: str, key: Key) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/openai/v1", api_key=key.secret, max_retries=0, timeout=30)


def _hi() -> list[Any]:
    return [{"role": "user", "content": "Hi"}]


def _update(e2e: Stack, key: Key, **fields: Any) -> None:
    from accounts.models import ApiKey

    with e2e.blocker.unblock():
        ApiKey.objects.filter(pk=key.key_id).update(**fields)


def _service(e2e: Stack, fn: Any, key: Key, **kwargs: Any) -> None:
    from accounts.models import ApiKey

    with e2e.blocker.unblock():
        fn(key=ApiKey.objects.get(pk=key.key_id), **kwargs)


def _status(url: str, key: Key, model: str = HAIKU) -> tuple[int, dict[str, Any]]:
    """The key's standing as the gateway sees it, probed with a token count: it passes the same
    key, expiry and allow-list checks as an answer but is never billed, so polling it while a
    change propagates adds no usage record to the test's counts."""
    response = httpx.post(
        url + "/v1/messages/count_tokens",
        headers={"x-api-key": key.secret, "anthropic-version": "2023-06-01"},
        json={"model": model, "messages": _hi()},
        timeout=30,
    )
    return response.status_code, response.json()


@pytest.fixture(scope="module")
def second_gateway(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Another gateway process on the same database and Redis (a second replica)."""
    from django.db import connection

    with stack.blocker.unblock():
        db_url = database_url(connection.settings_dict)
    gateway: GatewayProcess = start_gateway(
        db_url, e2e_redis_url(), tmp_path_factory.mktemp("gateway-lifecycle")
    )
    try:
        yield gateway.url
    finally:
        gateway.stop()


def test_disabled_key_gets_401_and_works_again_when_enabled(e2e: Stack) -> None:
    from accounts.services import set_api_key_disabled

    key = e2e.new_key()
    client = _anthropic(e2e.url, key)
    assert client.messages.create(model=HAIKU, max_tokens=16, messages=_hi()).content
    _service(e2e, set_api_key_disabled, key, disabled=True)
    wait_for(lambda: _status(e2e.url, key)[0] == 401, WINDOW, what="the disable to apply")
    with pytest.raises(anthropic.AuthenticationError) as info:
        client.messages.create(model=HAIKU, max_tokens=16, messages=_hi())
    assert info.value.body["error"]["type"] == "authentication_error"
    assert "disabled" in info.value.body["error"]["message"]
    with pytest.raises(openai.AuthenticationError) as oinfo:
        _openai(e2e.url, key).chat.completions.create(model=HAIKU, messages=_hi())
    assert "disabled" in oinfo.value.body["message"]
    assert oinfo.value.body["code"] == "invalid_api_key"
    # Nothing was billed or sent upstream for the refused calls.
    assert len(e2e.usage(api_key_id=key.key_id)) == 1

    _service(e2e, set_api_key_disabled, key, disabled=False)
    wait_for(lambda: _status(e2e.url, key)[0] == 200, WINDOW, what="the enable to apply")
    assert _openai(e2e.url, key).chat.completions.create(model=HAIKU, messages=_hi()).choices


def test_expired_key_gets_401_naming_the_expiry(e2e: Stack) -> None:
    from django.utils import timezone

    key = e2e.new_key()
    expires = (timezone.now() - timedelta(seconds=1)).replace(microsecond=0)
    _update(e2e, key, expires_at=expires)
    wait_for(lambda: _status(e2e.url, key)[0] == 401, WINDOW, what="the expiry to apply")
    with pytest.raises(anthropic.AuthenticationError) as info:
        _anthropic(e2e.url, key).messages.create(model=HAIKU, max_tokens=16, messages=_hi())
    message = info.value.body["error"]["message"]
    assert "expired" in message
    assert expires.strftime("%Y-%m-%dT%H:%M:%SZ") in message
    with pytest.raises(openai.AuthenticationError) as oinfo:
        _openai(e2e.url, key).responses.create(model=HAIKU, input="Hi", store=False)
    assert "expired" in oinfo.value.body["message"]
    assert e2e.usage(api_key_id=key.key_id) == []


def test_a_key_that_expires_later_works_until_then(e2e: Stack) -> None:
    from django.utils import timezone

    key = e2e.new_key()
    _update(e2e, key, expires_at=timezone.now() + timedelta(seconds=8))
    time.sleep(TTL * 2)  # the cache holds the future expiry, not a stale "valid"
    assert _status(e2e.url, key)[0] == 200
    # The expiry is checked on every request, not only when the cache refreshes.
    wait_for(lambda: _status(e2e.url, key)[0] == 401, 30, what="the key to expire")


def test_model_allow_list_gets_403_permission_error(e2e: Stack) -> None:
    key = e2e.new_key()
    _update(e2e, key, allowed_models=[HAIKU])
    wait_for(lambda: _status(e2e.url, key, OPUS)[0] == 403, WINDOW, what="the allow-list")
    e2e.reset_sims()
    with pytest.raises(anthropic.PermissionDeniedError) as info:
        _anthropic(e2e.url, key).messages.create(model=OPUS, max_tokens=16, messages=_hi())
    assert info.value.body["error"]["type"] == "permission_error"
    assert OPUS in info.value.body["error"]["message"]
    # An alias of a model that is not allowed is not allowed either.
    with pytest.raises(openai.PermissionDeniedError) as oinfo:
        _openai(e2e.url, key).chat.completions.create(model="claude-opus-5-5", messages=_hi())
    assert oinfo.value.body["type"] == "permission_error"
    assert oinfo.value.body["param"] == "model"
    # Token counting is refused the same way.
    counted = httpx.post(
        e2e.url + "/v1/messages/count_tokens",
        headers={"x-api-key": key.secret, "anthropic-version": "2023-06-01"},
        json={"model": OPUS, "messages": _hi()},
        timeout=30,
    )
    assert counted.status_code == 403, counted.text
    assert not [r for r in e2e.sim.requests() if r["path"].startswith("/v1/messages")]
    # The allowed model answers, by its id or an alias.
    reply = _anthropic(e2e.url, key).messages.create(
        model="claude-haiku-5-5", max_tokens=16, messages=_hi()
    )
    assert reply.content
    assert [r.model_id for r in e2e.usage(api_key_id=key.key_id)] == [HAIKU]
    # The model lists show what the key may call.
    listed = [m.id for m in _openai(e2e.url, key).models.list()]
    assert HAIKU in listed and OPUS not in listed
    paged = [m.id for m in _anthropic(e2e.url, key).models.list(limit=1000)]
    assert HAIKU in paged and OPUS not in paged


def test_ezat_auto_and_fallbacks_skip_models_the_key_may_not_use(e2e: Stack) -> None:
    from accounts.models import Organization
    from accounts.services import set_fallbacks

    key = e2e.new_key()
    with e2e.blocker.unblock():
        org = Organization.objects.get(pk=key.org_id)
        set_fallbacks(org=org, model="ezat/auto", fallbacks=[OPUS, HAIKU], actor="e2e")
    _update(e2e, key, allowed_models=[HAIKU])
    wait_for(lambda: _status(e2e.url, key, OPUS)[0] == 403, WINDOW, what="the allow-list")
    e2e.reset_sims()
    reply = _anthropic(e2e.url, key).messages.create(
        model="ezat/auto", max_tokens=16, messages=_hi()
    )
    assert reply.content
    chat = _openai(e2e.url, key).chat.completions.create(model="ezat/auto", messages=_hi())
    assert chat.choices
    upstream = [r["body"]["model"] for r in e2e.sim.requests() if r["path"] == "/v1/messages"]
    assert upstream and set(upstream) == {HAIKU.split("/", 1)[1]}, upstream
    assert {r.model_id for r in e2e.usage(api_key_id=key.key_id)} == {HAIKU}
    assert "ezat/auto" in [m.id for m in _openai(e2e.url, key).models.list()]
    # A fallback list naming a model the key may not use: that model is skipped, never called.
    e2e.reset_sims()
    listed = _openai(e2e.url, key).chat.completions.create(
        model=HAIKU, messages=_hi(), extra_body={"models": [OPUS]}
    )
    assert listed.choices
    upstream = [r["body"]["model"] for r in e2e.sim.requests() if r["path"] == "/v1/messages"]
    assert set(upstream) == {HAIKU.split("/", 1)[1]}
    # A chain with no model the key may use is a 403, not a 503.
    _update(e2e, key, allowed_models=["anthropic/claude-sonnet-5-5"])
    wait_for(lambda: _status(e2e.url, key, HAIKU)[0] == 403, WINDOW, what="the new allow-list")
    with pytest.raises(anthropic.PermissionDeniedError):
        _anthropic(e2e.url, key).messages.create(model="ezat/auto", max_tokens=16, messages=_hi())


def _spent(e2e: Stack, key: Key, cost_nano: int, days_ago: float) -> None:
    """A usage record of the key, `days_ago` old (committed: the gateway seeds from it)."""
    from django.utils import timezone

    from billing.models import UsageRecord

    when = timezone.now() - timedelta(days=days_ago)
    with e2e.blocker.unblock():
        record = UsageRecord.objects.create(
            request_id=f"e2e-spent-{uuid.uuid4().hex}",
            org_id=key.org_id,
            api_key_id=key.key_id,
            api="messages",
            model_id=HAIKU,
            model_name=HAIKU,
            cost_nano=cost_nano,
            prices={},
            started_at=when,
        )
        UsageRecord.objects.filter(pk=record.pk).update(created_at=when)


@pytest.mark.parametrize(
    ("period", "days_ago", "refused", "words"),
    [
        ("day", 0, True, "daily"),
        ("day", 1.05, False, ""),  # yesterday's spend does not count today
        ("total", 400, True, "total"),
        ("month", 400, False, ""),
    ],
)
def test_period_spend_cap(e2e: Stack, period: str, days_ago: float, refused: bool, words) -> None:
    key = e2e.new_key(cap_usd="1")
    _update(e2e, key, spend_cap_period=period)
    _spent(e2e, key, 1_000_000_000, days_ago)  # the whole cap, spent `days_ago`
    client = _anthropic(e2e.url, key)
    if not refused:
        assert client.messages.create(model=HAIKU, max_tokens=16, messages=_hi()).content
        return
    with pytest.raises(anthropic.APIStatusError) as info:
        client.messages.create(model=HAIKU, max_tokens=16, messages=_hi())
    assert info.value.status_code == 402
    assert info.value.body["error"]["type"] == "billing_error"
    assert words in info.value.body["error"]["message"]
    assert info.value.response.headers["x-should-retry"] == "false"
    with pytest.raises(openai.APIStatusError) as oinfo:
        _openai(e2e.url, key).chat.completions.create(model=HAIKU, messages=_hi())
    assert oinfo.value.status_code == 402
    assert oinfo.value.body["code"] == "insufficient_quota"


def test_changes_reach_every_gateway_process(e2e: Stack, second_gateway: str) -> None:
    from accounts.services import set_api_key_disabled, update_api_key_limits

    key = e2e.new_key()
    urls = [e2e.url, second_gateway]
    for url in urls:  # both processes have the key cached as valid
        assert _status(url, key)[0] == 200

    def everywhere(status: int, model: str = HAIKU) -> bool:
        return all(_status(url, key, model)[0] == status for url in urls)

    def timed(status: int, what: str, model: str = HAIKU) -> float:
        start = time.monotonic()
        wait_for(lambda: everywhere(status, model), WINDOW, what=what)
        return time.monotonic() - start

    _service(e2e, set_api_key_disabled, key, disabled=True)
    assert timed(401, "the disable on both processes") <= WINDOW
    _service(e2e, set_api_key_disabled, key, disabled=False)
    assert timed(200, "the enable on both processes") <= WINDOW
    _service(
        e2e, update_api_key_limits, key, rpm_limit=None, spend_cap_nano=None, allowed_models=[OPUS]
    )
    assert timed(403, "the allow-list on both processes") <= WINDOW
    assert everywhere(200, OPUS)
    from django.utils import timezone

    _update(e2e, key, expires_at=timezone.now() - timedelta(seconds=1))
    assert timed(401, "the expiry on both processes", OPUS) <= WINDOW
    assert all("expired" in _status(url, key, OPUS)[1]["error"]["message"] for url in urls)


def test_revoked_key_says_when_it_was_revoked(e2e: Stack) -> None:
    """Issue 34 item 5: a revoked key is told apart from a made-up one, on both APIs."""
    from accounts.models import ApiKey
    from accounts.services import revoke_api_key

    key = e2e.new_key()
    _service(e2e, revoke_api_key, key)
    with e2e.blocker.unblock():
        revoked = ApiKey.objects.get(pk=key.key_id).revoked_at
    assert revoked is not None
    wait_for(lambda: _status(e2e.url, key)[0] == 401, WINDOW, what="the revocation to apply")
    with pytest.raises(anthropic.AuthenticationError) as info:
        _anthropic(e2e.url, key).messages.create(model=HAIKU, max_tokens=16, messages=_hi())
    message = info.value.body["error"]["message"]
    assert "was revoked on " + revoked.strftime("%Y-%m-%d at %H:%M UTC") in message, message
    with pytest.raises(openai.AuthenticationError) as oinfo:
        _openai(e2e.url, key).chat.completions.create(model=HAIKU, messages=_hi())
    assert "was revoked on" in oinfo.value.body["message"]
    assert oinfo.value.body["code"] == "invalid_api_key"
    # A made-up key of the same shape still reads "invalid API key".
    from accounts.keys import generate

    made_up = Key(secret=generate(), key_id=0, org_id=0)  # well formed, never issued
    assert _status(e2e.url, made_up)[1]["error"]["message"] == "invalid API key"


def test_ip_allow_list_refuses_outsiders_naming_their_address(e2e: Stack) -> None:
    """Issue 34: a key with an IP allow-list answers 403 from outside it (permission_error on
    the Anthropic API, permission_denied on the OpenAI API), naming the caller's address; a
    client's own X-Forwarded-For changes nothing (no trusted proxies by default)."""
    from accounts.models import ApiKey
    from accounts.services import update_api_key_limits

    key = e2e.new_key()
    with e2e.blocker.unblock():
        row = ApiKey.objects.get(pk=key.key_id)
        update_api_key_limits(
            key=row, rpm_limit=row.rpm_limit, spend_cap_nano=None, allowed_ips=["192.0.2.0/24"]
        )
    wait_for(lambda: _status(e2e.url, key)[0] == 403, WINDOW, what="the allow-list to apply")
    with pytest.raises(anthropic.PermissionDeniedError) as info:
        _anthropic(e2e.url, key).messages.create(
            model=HAIKU,
            max_tokens=16,
            messages=_hi(),
            extra_headers={"x-forwarded-for": "192.0.2.10"},  # not believed
        )
    assert info.value.body["error"]["type"] == "permission_error"
    assert "may not be used from 127.0.0.1" in info.value.body["error"]["message"]
    with pytest.raises(openai.PermissionDeniedError) as oinfo:
        _openai(e2e.url, key).chat.completions.create(model=HAIKU, messages=_hi())
    assert oinfo.value.body["code"] == "permission_denied"
    assert "127.0.0.1" in oinfo.value.body["message"]
    assert len(e2e.usage(api_key_id=key.key_id)) == 0  # nothing billed or sent upstream

    with e2e.blocker.unblock():
        row = ApiKey.objects.get(pk=key.key_id)
        update_api_key_limits(
            key=row, rpm_limit=row.rpm_limit, spend_cap_nano=None, allowed_ips=["127.0.0.0/8"]
        )
    wait_for(lambda: _status(e2e.url, key)[0] == 200, WINDOW, what="the new allow-list")
    assert _openai(e2e.url, key).chat.completions.create(model=HAIKU, messages=_hi()).choices


def test_trusted_proxy_forwards_the_callers_address(
    stack: Stack, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """EZAT_TRUSTED_PROXIES: behind a listed proxy, the caller is the address it forwards."""
    from django.db import connection

    from accounts.models import ApiKey
    from accounts.services import update_api_key_limits

    key = stack.new_key()
    with stack.blocker.unblock():
        row = ApiKey.objects.get(pk=key.key_id)
        update_api_key_limits(
            key=row, rpm_limit=row.rpm_limit, spend_cap_nano=None, allowed_ips=["192.0.2.0/24"]
        )
        db_url = database_url(connection.settings_dict)
    gateway = start_gateway(
        db_url,
        e2e_redis_url(),
        tmp_path_factory.mktemp("gateway-proxy"),
        {"EZAT_TRUSTED_PROXIES": "127.0.0.1/32"},
    )
    try:
        client = _anthropic(gateway.url, key)
        inside = client.messages.create(
            model=HAIKU, max_tokens=16, messages=_hi(),
            extra_headers={"x-forwarded-for": "6.6.6.6, 192.0.2.10"},
        )  # fmt: skip
        assert inside.content
        with pytest.raises(anthropic.PermissionDeniedError) as info:
            client.messages.create(
                model=HAIKU, max_tokens=16, messages=_hi(),
                extra_headers={"x-forwarded-for": "192.0.2.10, 198.51.100.4"},
            )  # fmt: skip
        assert "may not be used from 198.51.100.4" in info.value.body["error"]["message"]
    finally:
        gateway.stop()
