"""Infrastructure the gateway must work behind, started by the tests: a real Redis Cluster
(three `redis-server --cluster-enabled yes` primaries on free ports, joined with `redis-cli
--cluster create`) and a real PgBouncer (Debian's package) in transaction mode in front of the
suite's PostgreSQL.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import psycopg
import redis

from tests.services import MissingTool, ServiceError, free_port, stop_process
from tests.waiting import wait_for


def _binary(name: str, fallback: str, package: str) -> str:
    binary = shutil.which(name) or (fallback if Path(fallback).exists() else None)
    if binary is None:
        raise MissingTool(
            f"tests/infra needs `{name}` (Debian: apt-get install {package}; scripts/test.sh "
            "offers to install it)"
        )
    return binary


class RedisCluster:
    """Three primaries, no replicas, no persistence; every port (client and cluster bus) free."""

    def __init__(self, directory: Path, masters: int = 3) -> None:
        server = _binary("redis-server", "/usr/bin/redis-server", "redis-server")
        cli = _binary("redis-cli", "/usr/bin/redis-cli", "redis-tools")
        self.directory = directory
        self.ports = [free_port() for _ in range(masters)]
        self.processes: list[subprocess.Popen[bytes]] = []
        for port in self.ports:
            node = directory / f"redis-{port}"
            node.mkdir()
            self.processes.append(
                subprocess.Popen(
                    [
                        server,
                        "--port", str(port),
                        # The bus port is port+10000 unless named: it may be taken, or > 65535.
                        "--cluster-port", str(free_port()),
                        "--bind", "127.0.0.1",
                        "--cluster-enabled", "yes",
                        "--cluster-config-file", str(node / "nodes.conf"),
                        "--cluster-node-timeout", "5000",
                        "--save", "",
                        "--appendonly", "no",
                        "--dir", str(node),
                        "--logfile", str(node / "redis.log"),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.STDOUT,
                )
            )  # fmt: skip
        try:
            for port in self.ports:
                wait_for(lambda p=port: self._pings(p), 30, what=f"redis node on {port}")
            created = subprocess.run(
                [cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in self.ports)]
                + ["--cluster-replicas", "0", "--cluster-yes"],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            if created.returncode != 0:
                raise ServiceError(f"redis-cli --cluster create failed:\n{created.stdout}")
            wait_for(self._ready, 60, what="the Redis Cluster to cover every slot on every node")
        except BaseException:
            self.stop()
            raise

    @staticmethod
    def _pings(port: int) -> bool:
        try:
            return bool(redis.Redis(port=port, socket_timeout=1).ping())
        except redis.RedisError:
            return False

    def _ready(self) -> bool:
        for port in self.ports:
            info = redis.Redis(port=port, socket_timeout=2).cluster("info")
            known = int(info.get("cluster_known_nodes", 0))
            if info.get("cluster_state") != "ok" or known != len(self.ports):
                return False
        return True

    @property
    def url(self) -> str:
        """Any node will do: the cluster client learns the slot map from it."""
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    def client(self) -> redis.RedisCluster:
        return redis.RedisCluster(host="127.0.0.1", port=self.ports[0], decode_responses=True)

    def scan(self, pattern: str) -> list[bytes]:
        """Keys matching `pattern` on every primary."""
        return [
            key
            for port in self.ports
            for key in redis.Redis(port=port, socket_timeout=2).scan_iter(match=pattern)
        ]

    def keys_per_node(self) -> dict[int, int]:
        return {p: int(redis.Redis(port=p, socket_timeout=2).dbsize()) for p in self.ports}

    def logs(self) -> str:
        return "\n".join(
            (self.directory / f"redis-{p}" / "redis.log").read_text(errors="replace")[-1500:]
            for p in self.ports
        )

    def stop(self) -> None:
        for process in self.processes:
            stop_process(process)


PGBOUNCER_CONFIG = """\
[databases]
* = host={host} port={port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {listen}
unix_socket_dir =
auth_type = trust
auth_file = {directory}/userlist.txt
pool_mode = transaction
; Few server sessions for many clients: consecutive transactions of one client land on
; different server sessions, so any session state the gateway relied on would break.
default_pool_size = 3
max_client_conn = 400
logfile = {directory}/pgbouncer.log
pidfile = {directory}/pgbouncer.pid
admin_users = {user}
"""


class PgBouncer:
    """Debian's `pgbouncer` in transaction mode on a free port, in front of `host:port`."""

    def __init__(self, *, host: str, port: int, user: str) -> None:
        binary = _binary("pgbouncer", "/usr/sbin/pgbouncer", "pgbouncer")
        self.port = free_port()
        self.user = user
        # A directory of its own under /tmp (pytest's are private to root: see below).
        directory = self.directory = Path(tempfile.mkdtemp(prefix="ezat-pgbouncer-"))
        (directory / "userlist.txt").write_text(f'"{user}" ""\n')
        config = directory / "pgbouncer.ini"
        config.write_text(
            PGBOUNCER_CONFIG.format(
                host=host, port=port, listen=self.port, directory=directory, user=user
            )
        )
        command = [binary, str(config)]
        if os.geteuid() == 0:
            # PgBouncer refuses to run as root: it drops to the `postgres` user (Debian's
            # package creates it), which must be able to write its log and pid file here.
            command[1:1] = ["-u", "postgres"]
            for path in [directory, *directory.iterdir()]:
                shutil.chown(path, user="postgres")
            directory.chmod(0o755)
        self.process = subprocess.Popen(
            command, stdout=(directory / "stdout.log").open("wb"), stderr=subprocess.STDOUT
        )
        try:
            wait_for(self._answers, 30, what="pgbouncer to accept connections")
        except BaseException:
            self.stop()
            raise

    def url(self, database: str) -> str:
        return f"postgres://{self.user}@127.0.0.1:{self.port}/{database}"

    def _answers(self) -> bool:
        if self.process.poll() is not None:
            raise ServiceError(f"pgbouncer exited:\n{self.log()}")
        try:
            with psycopg.connect(self.url("pgbouncer"), autocommit=True, connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False

    def show(self, what: str) -> list[dict[str, object]]:
        """`SHOW <what>` on PgBouncer's admin console (POOLS, STATS, CLIENTS...)."""
        with psycopg.connect(self.url("pgbouncer"), autocommit=True) as conn:
            cursor = conn.execute(f"SHOW {what}")
            names = [c.name for c in cursor.description or []]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def log(self) -> str:
        for name in ("pgbouncer.log", "stdout.log"):
            try:
                return (self.directory / name).read_text(errors="replace")[-4000:]
            except OSError:
                continue
        return "(no log)"

    def stop(self) -> None:
        stop_process(self.process)
        shutil.rmtree(self.directory, ignore_errors=True)
