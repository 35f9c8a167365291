"""Service instances the test suite creates for itself, so it never touches data that is not its
own.

Redis: every test session starts a private `redis-server` on a free loopback port, with nothing
on disk, and stops it at the end. Every Redis database a test uses (the stack's limits, the
billing broker, the limiter suites) is derived from that server's URL, so a FLUSHDB here can only
ever empty a database this session created. A Redis that the developer runs on 6379 (holding
real data, perhaps) is never connected to.

PostgreSQL: pytest-django creates `test_<name>` and drops it at the end; the name carries a hash
of the checkout's path, so two checkouts on one machine (or one checkout and a worktree) never
share a test database.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

# The Redis databases of the private server, one per use, so suites never see each other's keys.
REDIS_DB_APP = 0  # REDIS_URL of the test process (production shape)
REDIS_DB_PREFIX = 8  # a gateway with its own EZAT_REDIS_PREFIX (tests/core/test_redis_prefix.py)
REDIS_DB_INFRA = 9  # the Celery broker of tests/infra (its gateways use a Redis Cluster)
REDIS_DB_LAB = 10  # the routing lab's own gateway (cooldowns that must not reach the stack)
REDIS_DB_ROUTING = 11  # the prefix digest's unit tests
REDIS_DB_E2E = 12  # the e2e stack's gateway
REDIS_DB_CLUSTER = 13  # the cluster test's gateways, Celery broker included (tests/cluster)
REDIS_DB_BROKER = 14  # Celery worker tests
REDIS_DB_LIMITS = 15  # the limiter suites

ENV_URL = "EZAT_TEST_REDIS_URL"  # set by the session to its private server (db 0)


class ServiceError(RuntimeError):
    """A service the suite needs could not be started; the message says what to install."""


class MissingTool(ServiceError):
    """A program or service a test needs is not on this machine (chromium, haproxy, PostgreSQL).

    On a developer's machine the test is skipped with this message as its reason (the root
    conftest turns it into a skip, listed by `-ra` in the summary); in CI it is a failure, so CI
    never passes by skipping what it must run (`strict()`)."""


def strict() -> bool:
    """Missing tools fail instead of skipping: in CI (`CI` set, as .ci/run and most CI systems
    do) or with EZAT_TEST_STRICT=1."""
    flag = os.environ.get("EZAT_TEST_STRICT") or os.environ.get("CI") or ""
    return flag.lower() not in ("", "0", "false", "no")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port_block(count: int) -> int:
    """The first of `count` consecutive free ports, below the kernel's ephemeral range.

    For a run that takes a port and the ones after it (the quickstart's SIM_PORT, +1, +2 for
    the platform simulators): `free_port()` gives an ephemeral port, and the ports after it are
    exactly those the kernel hands to other processes' outgoing connections, so on a busy box
    one of them was sometimes taken by the time the run bound it. Below the ephemeral range only
    an explicit bind can take a port."""
    top = _ephemeral_low() - count
    for base in random.Random().sample(range(20000, top), k=200):
        socks = []
        try:
            for port in range(base, base + count):
                sock = socket.socket()
                socks.append(sock)
                sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise RuntimeError(f"no {count} consecutive free ports below {top + count}")


def stop_process(process: subprocess.Popen[Any], grace: float = 10) -> None:
    """SIGTERM, then SIGKILL if it is still alive after `grace` seconds; reaped either way."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(grace)


class RedisServer:
    """A `redis-server` child process on a free port, without persistence."""

    def __init__(self, binary: str, directory: Path) -> None:
        self.port = free_port()
        self.binary = binary
        self.directory = directory
        self.log_path = directory / "redis.log"
        self.process = self._spawn()
        self._wait_ready()

    def _spawn(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [
                self.binary,
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--save", "",
                "--appendonly", "no",
                "--dir", str(self.directory),
                "--logfile", str(self.log_path),
                "--databases", "16",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )  # fmt: skip

    @classmethod
    def start(cls) -> RedisServer:
        binary = shutil.which("redis-server") or (
            "/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None
        )
        if binary is None:
            raise ServiceError(
                "the test suite starts its own Redis and needs `redis-server` on PATH "
                "(Debian: apt-get install redis-server)"
            )
        return cls(binary, Path(tempfile.mkdtemp(prefix="ezat-test-redis-")))

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServiceError(f"redis-server exited at start:\n{self._log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(64).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            time.sleep(0.05)
        self.stop()
        raise ServiceError(f"redis-server did not answer within 30 s:\n{self._log_tail()}")

    def _log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"

    def crash(self) -> None:
        """SIGKILL: every key is gone (no persistence), clients get connection errors."""
        self.process.kill()
        self.process.wait(30)

    def start_again(self) -> None:
        """A new, empty server on the same port (after `crash`)."""
        self.process = self._spawn()
        self._wait_ready()

    def url(self, db: int = REDIS_DB_APP) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def stop(self) -> None:
        stop_process(self.process)
        shutil.rmtree(self.directory, ignore_errors=True)


_session_server: RedisServer | None = None


def session_server() -> RedisServer:
    """The session's private Redis, started on first use.

    First use may come before the root conftest's pytest_configure: pytest imports the
    conftest files of the paths on its command line first (`pytest tests/gateway/limits`), and those
    derive their URLs at import. Whoever asks first starts it; the root conftest stops it.
    """
    global _session_server
    if _session_server is None:
        _session_server = RedisServer.start()
        os.environ[ENV_URL] = _session_server.url(REDIS_DB_APP)
    return _session_server


def stop_session_server() -> None:
    global _session_server
    if _session_server is not None:
        server, _session_server = _session_server, None
        server.stop()


def redis_url(db: int) -> str:
    """A database of the session's private Redis server."""
    return session_server().url(db)


def require_postgresql(suite: str) -> None:
    """`suite` runs on the session's database, which must be PostgreSQL; on the embedded
    default (SQLite) it is missing, not silently replaced by a server at 127.0.0.1:5432.
    `make test` gives the suites that need it a PostgreSQL of their own (tests/with_postgres.py)."""
    from django.db import connection

    if connection.vendor != "postgresql":
        raise MissingTool(
            f"{suite} needs PostgreSQL and this session runs on {connection.vendor} "
            "(DATABASE_URL unset): run it through `make test`, which finds or starts one, or "
            "set DATABASE_URL=postgres://..."
        )


def production_shape() -> bool:
    """The suite runs in production shape (gateways with Redis) when REDIS_URL was set."""
    return bool(os.environ.get("REDIS_URL"))


def isolated_db_name(name: str, checkout: Path) -> str:
    """`test_<name>_<hash of the checkout path and shard>`: concurrent runs from different
    checkouts on one PostgreSQL server, and the parallel shards of one run
    (`EZAT_TEST_SHARD`, scripts/test_shards.sh), each get their own test database."""
    shard = os.environ.get("EZAT_TEST_SHARD", "")
    digest = hashlib.sha256(f"{checkout.resolve()}|{shard}".encode()).hexdigest()[:8]
    return f"test_{name}_{digest}"[:63]
