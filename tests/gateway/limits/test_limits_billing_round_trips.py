"""Redis round trips per request (issue 22): one at admission, one at settlement.

docs/design.md: "admission is one Redis round trip". Each extra round trip costs the gateway a wake-up
and the Redis server a command on every request, so the count is pinned here, with the real
gateway (production shape) in front of a private `redis-server` watched through `MONITOR`: every
command a client sends is one line; commands a script runs are marked `lua` and are not round
trips. Admission and settlement both carry the request id, so each request's own commands can be
told from background ones (key/limit reseeds, the prefix digest, the live feed).
"""

from __future__ import annotations

import re
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import redis

from tests import services
from tests.support.limits_billing_support import auth, chat_body, messages_body
from tests.support.stack import Stack, database_url, start_gateway
from tests.waiting import wait_for

# `<unix time> [<db> <client address or "lua">] "COMMAND" "arg" ...`
pytestmark = pytest.mark.e2e

_LINE = re.compile(r"^[0-9.]+ \[\d+ (?P<who>\S+)\] (?P<args>.*)$")
_ARG = re.compile(r'"((?:[^"\\]|\\.)*)"')

# Commands the gateway sends that belong to no one request: the live feed's channel layer,
# the routing digest's flush, the limiter's reseeds and lease heartbeat, connection set-up.
BACKGROUND = {"HELLO", "CLIENT", "INFO", "SELECT", "PING", "SCRIPT", "EVALSHA", "EVAL"}
BACKGROUND |= {"ZADD", "ZREMRANGEBYSCORE", "ZRANGE", "EXPIRE", "PEXPIRE", "RPUSH", "LPUSH"}
BACKGROUND |= {"MGET", "SET", "GET", "DEL", "PUBLISH", "SMEMBERS", "EXISTS", "TTL"}
BACKGROUND |= {"MULTI", "EXEC"}  # a checkpoint's write (its HSET/HDEL are told apart by key)


class Monitor(threading.Thread):
    """`MONITOR` on a connection of its own; keeps every client command (not script-internal)."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.client = redis.Redis.from_url(url)
        self.commands: list[list[str]] = []
        self.ready = threading.Event()
        self.stop_flag = threading.Event()

    def run(self) -> None:
        with self.client.monitor() as monitor:
            self.ready.set()
            connection = monitor.connection
            while not self.stop_flag.is_set():
                try:
                    if connection is None or not connection.can_read(timeout=0.1):
                        continue
                    line = connection.read_response()
                except redis.ConnectionError:
                    return  # the server stopped (teardown)
                if isinstance(line, bytes):
                    line = line.decode(errors="replace")
                match = _LINE.match(str(line))
                if match is None or match["who"] == "lua":
                    continue
                args = _ARG.findall(match["args"])
                if args and args[0].upper() != "MONITOR":
                    self.commands.append(args)

    def stop(self) -> None:
        self.stop_flag.set()
        self.join(10)

    def about(self, request_id: str) -> list[list[str]]:
        """The commands that carry the request's id (the limiter's id is it plus `~suffix`)."""
        return [c for c in list(self.commands) if _carries(c, request_id)]


def _carries(command: list[str], request_id: str) -> bool:
    return any(a == request_id or a.startswith(request_id + "~") for a in command)


def _checkpoint(command: list[str]) -> bool:
    """A stream's checkpoint (gateway/checkpoints.py): written by a timer once a second for the
    streams open at that moment, not once per request."""
    return len(command) > 1 and "ckpt" in command[1]


@pytest.fixture
def private_redis() -> Iterator[services.RedisServer]:
    server = services.RedisServer.start()
    try:
        yield server
    finally:
        server.stop()


def test_two_round_trips_per_request(
    stack: Stack, private_redis: services.RedisServer, tmp_path: Path
) -> None:
    from django.db import connection

    with stack.blocker.unblock():
        db_url = database_url(connection.settings_dict)
    url = private_redis.url(0)
    gateway = start_gateway(db_url, url, tmp_path)
    try:
        key = stack.new_key()
        calls = [
            ("/v1/messages", "messages", messages_body, False),
            ("/v1/messages", "messages", messages_body, True),
            ("/openai/v1/chat/completions", "chat", chat_body, False),
            ("/openai/v1/chat/completions", "chat", chat_body, True),
        ]
        with httpx.Client(base_url=gateway.url, timeout=60) as client:

            def call(
                path: str, api: str, body_of: Callable[..., bytes], stream: bool, rid: str
            ) -> None:
                body = body_of(f"round trips {uuid.uuid4().hex}", stream=stream)
                headers = auth(key.secret, api, **{"x-request-id": rid})
                response = client.post(path, headers=headers, content=body)
                assert response.status_code == 200, response.text

            # Warm-up: the key and catalog caches, the org's and key's limit state in Redis.
            for path, api, body_of, stream in calls:
                call(path, api, body_of, stream, f"warm-{uuid.uuid4().hex}")
            monitor = Monitor(url)
            monitor.start()
            assert monitor.ready.wait(30)
            # MONITOR is live once it echoes a command of ours.
            marker = f"marker-{uuid.uuid4().hex}"
            probe = redis.Redis.from_url(url)

            def monitor_live() -> bool:
                probe.get(marker)
                return bool(monitor.about(marker))

            wait_for(monitor_live, 30, what="MONITOR to see a command")
            ids = []
            for round_ in range(3):
                for path, api, body_of, stream in calls:
                    rid = f"rt-{round_}-{uuid.uuid4().hex}"
                    ids.append(rid)
                    call(path, api, body_of, stream, rid)
            # Settlement runs after the answer went out: wait until every request's is seen.
            wait_for(
                lambda: all(len(monitor.about(rid)) >= 2 for rid in ids),
                60,
                what="admission and settlement of every request",
            )
            # One more request, settled too: anything the earlier ones sent late is in by now.
            last = f"rt-last-{uuid.uuid4().hex}"
            call(*calls[0], last)
            wait_for(lambda: len(monitor.about(last)) >= 2, 60, what="the last settlement")
            monitor.stop()
    finally:
        gateway.stop()

    for rid in ids:
        own = [c for c in monitor.about(rid) if not _checkpoint(c)]
        names = [c[0].upper() for c in own]
        # Exactly two round trips carry the request: admission, then settlement, each a single
        # script call (not a MULTI, not several commands).
        assert names == ["EVALSHA", "EVALSHA"], (rid, own)
    # Everything else is background work (paced by time, not by requests: not counted here,
    # since how many land in the window depends on the machine's speed); a command of a new
    # kind outside admission and settlement fails the test until it is looked at.
    others = [
        c
        for c in monitor.commands
        if not _checkpoint(c) and not any(_carries(c, rid) for rid in [*ids, last, marker])
    ]
    unknown = Counter(c[0].upper() for c in others if c[0].upper() not in BACKGROUND)
    assert not unknown, f"commands sent outside admission and settlement: {unknown}"
