"""The live request feed: /ws/requests/?org=<id> through the real ASGI stack (session auth).

Only members of an org may join its feed, and a feed only ever carries its own org's rows.
"""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

from billing import live
from billing.dashboard_selectors import request_row
from billing.models import RequestLog
from tests.dashboard.conftest import World

ORIGIN = (b"origin", b"http://127.0.0.1")

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_persistent_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    # The consumer queries from a worker thread; with CONN_MAX_AGE (Postgres) that thread would
    # keep its connection open and block dropping the test database at the end of the session.
    from django.db import connections

    monkeypatch.setitem(connections.settings["default"], "CONN_MAX_AGE", 0)


def _cookie(user: Any) -> bytes:
    client = Client()
    client.force_login(user)
    name = settings.SESSION_COOKIE_NAME
    return f"{name}={client.cookies[name].value}".encode()


async def _connect(
    org_id: int | str, cookie: bytes | None, origin: tuple[bytes, bytes] = ORIGIN
) -> tuple[WebsocketCommunicator, bool, Any]:
    from ezat.asgi import application

    headers = [origin]
    if cookie is not None:
        headers.append((b"cookie", cookie))
    communicator = WebsocketCommunicator(
        application, f"/ws/requests/?org={org_id}", headers=headers
    )
    connected, code = await communicator.connect(timeout=30)
    return communicator, connected, code


def _row(world: World, who: str) -> dict[str, Any]:
    tenant = world.a if who == "a" else world.b
    return request_row(
        RequestLog.objects.select_related("api_key").get(request_id=tenant.request_id)
    )


@pytest.fixture
def cookies(world: World) -> dict[str, bytes]:
    return {
        "owner_a": _cookie(world.a.owner),
        "member_a": _cookie(world.member_a),
        "owner_b": _cookie(world.b.owner),
    }


async def test_member_receives_own_org_rows_only(world: World, cookies: dict[str, bytes]) -> None:
    row_a = await sync_to_async(_row)(world, "a")
    row_b = await sync_to_async(_row)(world, "b")
    feed_a, ok_a, _ = await _connect(world.a.org.pk, cookies["member_a"])
    feed_b, ok_b, _ = await _connect(world.b.org.pk, cookies["owner_b"])
    assert ok_a and ok_b
    await live.publish_request(world.a.org.pk, row_a)
    await live.publish_request(world.b.org.pk, row_b)
    assert await feed_a.receive_json_from(timeout=30) == row_a
    assert await feed_b.receive_json_from(timeout=30) == row_b
    assert await feed_a.receive_nothing(timeout=0.3)
    assert await feed_b.receive_nothing(timeout=0.3)
    # The row has the shape the page's JavaScript renders.
    assert row_a["request_id"] == world.a.request_id and row_a["key_prefix"] == world.a.key.prefix
    assert row_a["cost_usd"] == "0.006000" and row_a["tokens"] == 1200
    await feed_a.disconnect()
    await feed_b.disconnect()


async def test_non_members_are_refused(world: World, cookies: dict[str, bytes]) -> None:
    for org_id, cookie in (
        (world.a.org.pk, cookies["owner_b"]),  # another org's owner
        (world.b.org.pk, cookies["owner_a"]),
        (world.b.org.pk, cookies["member_a"]),
        (world.a.org.pk, None),  # anonymous
        ("abc", cookies["owner_a"]),  # garbage org id
        (999_999, cookies["owner_a"]),  # no such org
    ):
        communicator, connected, _ = await _connect(org_id, cookie)
        assert not connected, (org_id, cookie)
        await communicator.disconnect()


async def test_other_origins_are_refused(world: World, cookies: dict[str, bytes]) -> None:
    # Cross-site WebSocket hijacking: a page on another site riding the session cookie.
    communicator, connected, _ = await _connect(
        world.a.org.pk, cookies["owner_a"], origin=(b"origin", b"https://evil.example")
    )
    assert not connected
    await communicator.disconnect()


async def test_publish_never_raises_and_counts_failures(monkeypatch: pytest.MonkeyPatch) -> None:
    class Broken:
        async def group_send(self, group: str, message: dict[str, Any]) -> None:
            raise ConnectionError("redis is down")

    monkeypatch.setattr(live, "get_channel_layer", lambda: Broken())
    before = live.PUBLISH_FAILURES._value.get()
    await live.publish_request(1, {"request_id": "r"})
    assert live.PUBLISH_FAILURES._value.get() == before + 1


async def test_publish_is_bounded_in_time(monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    class Stuck:
        async def group_send(self, group: str, message: dict[str, Any]) -> None:
            await asyncio.sleep(60)

    monkeypatch.setattr(live, "get_channel_layer", lambda: Stuck())
    monkeypatch.setattr(live, "PUBLISH_TIMEOUT_SECONDS", 0.05)
    before = live.PUBLISH_FAILURES._value.get()
    await asyncio.wait_for(live.publish_request(1, {"request_id": "r"}), timeout=30)
    assert live.PUBLISH_FAILURES._value.get() == before + 1


def _log_fields(record: RequestLog) -> dict[str, Any]:
    """A stored row back as the fields the gateway queued it with (gateway/outcome.py)."""
    from billing.request_log import COLUMNS

    return {column: getattr(record, column) for column in COLUMNS}


def test_row_from_log_matches_row_from_record(world: World) -> None:
    """The gateway builds live rows from what it has in hand, for every request-log row; they
    must read like the page's rows, billed or refused."""
    billed = RequestLog.objects.select_related("api_key").get(request_id=world.a.request_id)
    refused = RequestLog.objects.create(
        **{
            **_log_fields(billed),
            "request_id": "req_refused_live",
            "status": "error",
            "http_status": 404,
            "error_type": "not_found_error",
            "error_message": "model: unknown model 'nope'",
            "model_name": "nope",
            "model_id": "",
            "requested_model": "",
            "input_tokens": 0,
            "output_tokens": 0,
            "cost_nano": 0,
            "attempts": [],
            "count": 3,
        }
    )
    refused = RequestLog.objects.select_related("api_key").get(pk=refused.pk)
    for record in (billed, refused):
        from_gateway = live.row_from_log(_log_fields(record), key_prefix=world.a.key.prefix)
        assert from_gateway == request_row(record)
    row = live.row_from_log(_log_fields(refused), key_prefix=world.a.key.prefix)
    assert (row["status"], row["http_status"], row["count"]) == ("error", 404, 3)
    assert row["error_message"] == "model: unknown model 'nope'" and row["cost_usd"] == "0.000000"


async def test_gateway_feed_coalesces_rows_per_org(world: World, cookies: dict[str, bytes]) -> None:
    """The gateway publishes through LiveFeed: several rows, one channel message per org."""
    row_a = await sync_to_async(_row)(world, "a")
    row_b = await sync_to_async(_row)(world, "b")
    feed_a, ok_a, _ = await _connect(world.a.org.pk, cookies["owner_a"])
    assert ok_a
    batcher = live.LiveFeed()
    second = {**row_a, "request_id": "req_second"}
    batcher.publish(world.a.org.pk, row_a)
    batcher.publish(world.b.org.pk, row_b)
    batcher.publish(world.a.org.pk, second)
    assert await feed_a.receive_json_from(timeout=30) == row_a
    assert await feed_a.receive_json_from(timeout=30) == second
    assert await feed_a.receive_nothing(timeout=0.4)  # org B's row never reaches org A
    await feed_a.disconnect()
