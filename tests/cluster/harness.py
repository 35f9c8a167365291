"""The cluster: three gateway processes behind a real HAProxy (Debian's package), two Celery
workers and beat, on the suite's PostgreSQL and a Redis server of its own (a fault test
restarts it), in front of two simulated deployments. The gateways reach PostgreSQL through a
second HAProxy in TCP mode that a fault test cuts (`PgProxy`); the Celery broker is a database
of the session's private Redis, so a Redis restart takes the limits down, not the task queue.

The gateways are the e2e stack's (tests/support/stack.py `launch_gateway`: the production
launcher `python -m ezat.serve`), the workers the billing harness's (tests/billing/harness.py
`CeleryWorker`). HAProxy balances round-robin, takes a node out when its `/readyz` fails
(checked twice a second, out after two failures), retries a request that could not reach a node or that a draining node
refused (`retry-on conn-failure 503`: such a request ran nowhere), and names the node that
answered in `x-ezat-node` so tests can see where each turn landed.
"""

from __future__ import annotations

import csv
import io
import shutil
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.billing.harness import CeleryWorker
from tests.services import MissingTool, RedisServer, ServiceError, free_port, stop_process
from tests.support.stack import ROOT, GatewayProcess, launch_gateway
from tests.waiting import wait_for

NODE_HEADER = "x-ezat-node"

HAPROXY_CONFIG = """\
global
    maxconn 4000
    stats socket {socket} mode 600 level admin

defaults
    mode http
    timeout connect 2s
    timeout client 120s
    timeout server 120s
    timeout queue 30s
    timeout check 5s
    retries 3
    option redispatch 1
    retry-on conn-failure 503
    http-reuse safe

frontend api
    bind 127.0.0.1:{port}
    default_backend gateways

backend gateways
    balance roundrobin
    option httpchk GET /readyz
    http-check expect status 200
    default-server inter 500ms fastinter 300ms downinter 300ms fall 2 rise 2
    http-response set-header {header} %s
{servers}
"""


def haproxy_binary() -> str:
    binary = shutil.which("haproxy") or (
        "/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None
    )
    if binary is None:
        raise MissingTool(
            "the cluster test needs HAProxy (Debian: apt-get install haproxy; scripts/test.sh "
            "offers to install it)"
        )
    return binary


def admin_command(socket_path: Path, line: str) -> str:
    """One command on HAProxy's admin socket, its whole answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        sock.connect(str(socket_path))
        sock.sendall(line.encode() + b"\n")
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode()


class HAProxy:
    """`haproxy -db` (foreground) on a free port, with an admin socket for its server states."""

    def __init__(self, nodes: dict[str, int], directory: Path) -> None:
        self.port = free_port()
        self.socket_path = directory / "haproxy.sock"
        servers = "\n".join(
            f"    server {name} 127.0.0.1:{port} check" for name, port in nodes.items()
        )
        config = directory / "haproxy.cfg"
        config.write_text(
            HAPROXY_CONFIG.format(
                socket=self.socket_path, port=self.port, header=NODE_HEADER, servers=servers
            )
        )
        self.log_path = directory / "haproxy.log"
        self.process = subprocess.Popen(
            [haproxy_binary(), "-db", "-f", str(config)],
            stdout=self.log_path.open("wb"),
            stderr=subprocess.STDOUT,
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self, line: str) -> str:
        return admin_command(self.socket_path, line)

    def server_stats(self) -> dict[str, dict[str, str]]:
        """Server name → its row of `show stat` (status, wretr retries, wredis redispatches…)."""
        if self.process.poll() is not None:
            raise ServiceError(f"haproxy exited:\n{self.log_path.read_text(errors='replace')}")
        try:
            text = self.command("show stat")
        except OSError:
            return {}
        rows = csv.DictReader(io.StringIO(text.lstrip("# ")))
        return {
            row["svname"]: row
            for row in rows
            if row["pxname"] == "gateways" and row["svname"] not in ("BACKEND", "FRONTEND")
        }

    def states(self) -> dict[str, str]:
        """Server name → HAProxy's status (UP, DOWN, "UP 1/2", …) in the backend."""
        return {name: row["status"] for name, row in self.server_stats().items()}

    def wait_states(self, want: dict[str, str], *, deadline: float = 60) -> None:
        wait_for(
            lambda: all(self.states().get(n) == s for n, s in want.items()),
            deadline,
            what=f"haproxy to see {want}",
        )

    def stop(self) -> None:
        stop_process(self.process)


PG_PROXY_CONFIG = """\
global
    maxconn 1000
    stats socket {socket} mode 600 level admin

defaults
    mode tcp
    timeout connect 2s
    timeout client 1h
    timeout server 1h

listen postgres
    bind 127.0.0.1:{port}
    server pg {target}
"""


class PgProxy:
    """The gateways' way to PostgreSQL: HAProxy in TCP mode, which a test can cut and restore.

    A cut is what a PostgreSQL restart looks like from the gateways: every open connection is
    closed (`shutdown sessions`, so transactions in flight abort) and new ones are refused
    (the server in maintenance: HAProxy closes them at once) until `restore`. The suite's
    PostgreSQL is shared with other engineers and CI, so it is never restarted itself."""

    def __init__(self, target: str, directory: Path) -> None:
        self.port = free_port()
        self.socket_path = directory / "pg-proxy.sock"
        config = directory / "pg-proxy.cfg"
        config.write_text(
            PG_PROXY_CONFIG.format(socket=self.socket_path, port=self.port, target=target)
        )
        self.log_path = directory / "pg-proxy.log"
        self.process = subprocess.Popen(
            [haproxy_binary(), "-db", "-f", str(config)],
            stdout=self.log_path.open("wb"),
            stderr=subprocess.STDOUT,
        )
        wait_for(self.socket_path.exists, 30, what="the PostgreSQL proxy's admin socket")

    def command(self, line: str) -> str:
        return admin_command(self.socket_path, line)

    def cut(self) -> None:
        self.command("set server postgres/pg state maint")
        self.command("shutdown sessions server postgres/pg")

    def restore(self) -> None:
        self.command("set server postgres/pg state ready")

    def stop(self) -> None:
        stop_process(self.process)


PROMETHEUS_CONFIG = """\
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: ezat
    metrics_path: /metrics
    static_configs:
      - targets: [{targets}]
"""


class Prometheus:
    """Debian's `prometheus` scraping every node's /metrics each second, storage in a temp dir."""

    def __init__(self, node_ports: list[int], directory: Path) -> None:
        binary = shutil.which("prometheus") or "/usr/bin/prometheus"
        if not Path(binary).exists():
            raise MissingTool(
                "the cluster test needs Prometheus (Debian: apt-get install prometheus; "
                "scripts/test.sh offers to install it)"
            )
        self.port = free_port()
        config = directory / "prometheus.yml"
        targets = ", ".join(f"'127.0.0.1:{port}'" for port in node_ports)
        config.write_text(PROMETHEUS_CONFIG.format(targets=targets))
        self.log_path = directory / "prometheus.log"
        self.process = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={directory / 'prometheus-data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self.log_path.open("wb"),
            stderr=subprocess.STDOUT,
        )

    def query(self, promql: str) -> list[dict[str, Any]]:
        """The result vector of an instant query over the HTTP API ([] while unreachable)."""
        if self.process.poll() is not None:
            raise ServiceError(f"prometheus exited:\n{self.log_path.read_text(errors='replace')}")
        try:
            answer = httpx.get(
                f"http://127.0.0.1:{self.port}/api/v1/query", params={"query": promql}, timeout=5
            )
        except httpx.HTTPError:
            return []
        if answer.status_code != 200:
            return []
        return list(answer.json()["data"]["result"])

    def api(self, promql: str) -> httpx.Response:
        """The raw answer of an instant query (a PromQL syntax error is a 400 with its text)."""
        return httpx.get(
            f"http://127.0.0.1:{self.port}/api/v1/query", params={"query": promql}, timeout=10
        )

    def stop(self) -> None:
        stop_process(self.process)


class Beat:
    """`celery -A ezat beat` with its schedule file in a temp dir."""

    def __init__(self, env: dict[str, str], directory: Path) -> None:
        self.log_path = directory / "beat.log"
        self.process = subprocess.Popen(
            [
                sys.executable, "-m", "celery", "-A", "ezat", "beat", "-l", "INFO",
                "--schedule", str(directory / "celerybeat-schedule"),
            ],
            cwd=ROOT,
            env=env,
            stdout=self.log_path.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip

    def stop(self) -> None:
        stop_process(self.process)


@dataclass
class Cluster:
    db_url: str
    redis_url: str
    env: dict[str, str]  # the gateways' extra environment
    directory: Path
    nodes: dict[str, GatewayProcess] = field(default_factory=dict)
    haproxy: HAProxy | None = None
    workers: list[CeleryWorker] = field(default_factory=list)
    beat: Beat | None = None
    prometheus: Prometheus | None = None
    worker_env: dict[str, str] = field(default_factory=dict)  # the Celery workers' and beat's
    redis: RedisServer | None = None  # the cluster's own, restarted by a fault test
    pg_proxy: PgProxy | None = None  # between the gateways and PostgreSQL, cut by a fault test

    @property
    def lb(self) -> HAProxy:
        assert self.haproxy is not None
        return self.haproxy

    def start_nodes(self, names: list[str]) -> None:
        launched = {
            name: launch_gateway(self.db_url, self.redis_url, self.directory, self.env)
            for name in names
        }
        for name, gateway in launched.items():  # started side by side, then waited on
            gateway.wait_healthy()
            self.nodes[name] = gateway

    def restart(self, name: str, sig: signal.Signals = signal.SIGTERM) -> None:
        """Stop a node with `sig`, wait for its exit, start it again on the same port."""
        old = self.nodes[name]
        old.process.send_signal(sig)
        old.process.wait(180)  # above the nodes' shutdown grace (tests/cluster/conftest.py)
        self.revive(name)

    def revive(self, name: str) -> None:
        old = self.nodes[name]
        new = launch_gateway(self.db_url, self.redis_url, self.directory, self.env, port=old.port)
        new.wait_healthy()
        self.nodes[name] = new

    def stop(self) -> None:
        if self.haproxy is not None:
            self.haproxy.stop()
        for gateway in self.nodes.values():
            if gateway.process.poll() is None:
                gateway.process.kill()
                gateway.process.wait(30)
        for worker in self.workers:
            worker.kill_all()
        if self.beat is not None:
            self.beat.stop()
        if self.prometheus is not None:
            self.prometheus.stop()
        if self.pg_proxy is not None:
            self.pg_proxy.stop()
        if self.redis is not None:
            self.redis.stop()
