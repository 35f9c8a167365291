"""docker/compose.yml's scale-out topology (issue 18): images cannot be pulled on these
machines, so the file is parsed and its HAProxy and Prometheus configurations are checked by the
Debian tools the cluster test also runs (`haproxy -c`, `promtool check config`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from tests.cluster.harness import haproxy_binary

DOCKER = Path(__file__).resolve().parents[2] / "docker"


def test_compose_runs_gateway_replicas_behind_haproxy_with_prometheus() -> None:
    services = yaml.safe_load((DOCKER / "compose.yml").read_text())["services"]
    gateway = services["gateway"]
    assert gateway["deploy"]["replicas"] >= 2
    assert "ports" not in gateway  # replicas cannot share a host port: the LB has it
    assert gateway["command"][:3] == ["python", "-m", "ezat.serve"]
    assert gateway["stop_grace_period"] == "40s"  # above EZAT_SHUTDOWN_GRACE_SECONDS (30)
    assert services["lb"]["ports"] == ["8000:8000"]
    assert "./haproxy.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro" in services["lb"]["volumes"]
    assert "./prometheus.yml:/etc/ezat/prometheus.yml:ro" in services["prometheus"]["volumes"]
    assert {"worker", "beat"} <= set(services)


def test_haproxy_config_is_valid() -> None:
    checked = subprocess.run(
        [haproxy_binary(), "-c", "-f", str(DOCKER / "haproxy.cfg")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "option httpchk GET /readyz" in (DOCKER / "haproxy.cfg").read_text()


def test_prometheus_config_is_valid(tmp_path: Path) -> None:
    config = tmp_path / "prometheus.yml"
    config.write_text((DOCKER / "prometheus.yml").read_text().replace("__TOKEN__", "t" * 32))
    checked = subprocess.run(
        ["promtool", "check", "config", str(config)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
