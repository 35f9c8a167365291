"""docker/compose.yml's scale-out topology (issue 18): images cannot be pulled on these
machines, so the file is resolved by Debian's docker-compose (`docker-compose config`), its HAProxy
and Prometheus configurations are checked by the Debian tools the cluster test also runs
(`haproxy -c`, `promtool check config`), and Grafana's provisioning is read here. That every
dashboard query names an exported metric is checked against the running cluster
(tests/cluster/test_dashboard.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import yaml

from tests.cluster.harness import haproxy_binary
from tests.services import MissingTool

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
    promtool = shutil.which("promtool")
    if promtool is None:
        raise MissingTool(
            "the Prometheus config test needs promtool (Debian: apt-get install prometheus; "
            "scripts/test.sh offers to install it)"
        )
    checked = subprocess.run(
        [promtool, "check", "config", str(config)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def _compose_config(tmp_path: Path, *, drop: str = "") -> subprocess.CompletedProcess[str]:
    """`docker-compose config` on a copy of docker/ with docker/.env made from .env.example (the
    file the README tells operators to copy), less the lines naming `drop` when given."""
    binary = shutil.which("docker-compose")
    if binary is None:
        raise MissingTool(
            "the compose test needs docker-compose (Debian: apt-get install docker-compose; "
            "scripts/test.sh offers to install it)"
        )
    copy = tmp_path / "docker"
    shutil.copytree(DOCKER, copy)
    lines = (copy / ".env.example").read_text().splitlines()
    (copy / ".env").write_text("\n".join(x for x in lines if not drop or drop not in x) + "\n")
    return subprocess.run(
        [binary, "-f", str(copy / "compose.yml"), "config"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )


def test_docker_compose_config_accepts_the_scale_out_topology(tmp_path: Path) -> None:
    """Debian's docker-compose (1.29, the compose-spec parser; `docker compose` v2 is not
    packaged here) resolves the file: anchors, variables, `deploy.replicas`, the
    `service_completed_successfully` and `service_healthy` conditions."""
    checked = _compose_config(tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "WARNING" not in checked.stderr, checked.stderr
    services = yaml.safe_load(checked.stdout)["services"]
    assert services["gateway"]["deploy"]["replicas"] >= 2
    assert services["lb"]["image"].startswith("haproxy:")
    assert services["lb"]["depends_on"] == {"gateway": {"condition": "service_started"}}
    for name in ("gateway", "worker", "beat"):
        assert services[name]["depends_on"]["migrate"] == {
            "condition": "service_completed_successfully"
        }
        assert services[name]["environment"]["REDIS_URL"] == "redis://redis:6379/0"
    assert services["worker"]["command"][:4] == ["celery", "-A", "ezat", "worker"]
    assert services["beat"]["command"][:4] == ["celery", "-A", "ezat", "beat"]
    assert services["grafana"]["environment"]["GF_SECURITY_ADMIN_PASSWORD"]
    # Every file a service mounts exists in the repository (compose itself does not check).
    mounted = [
        volume.split(":")[0]
        for service in services.values()
        for volume in service.get("volumes", [])
        if volume.startswith("/")
    ]
    assert len(mounted) >= 4, mounted
    for source in mounted:
        assert Path(source).exists(), source
    grafana = {v.split(":")[1] for v in services["grafana"]["volumes"]}
    assert grafana == {"/etc/grafana/provisioning", "/var/lib/grafana/dashboards"}


def test_docker_compose_config_refuses_a_missing_grafana_password(tmp_path: Path) -> None:
    """The variable check is compose's: without the value, `config` fails and names it."""
    checked = _compose_config(tmp_path, drop="GF_SECURITY_ADMIN_PASSWORD")
    assert checked.returncode != 0
    assert "set GF_SECURITY_ADMIN_PASSWORD in docker/.env" in checked.stderr


def test_grafana_provisioning_names_the_dashboard_and_its_data_source() -> None:
    grafana = DOCKER / "grafana"
    (source,) = yaml.safe_load((grafana / "provisioning/datasources/prometheus.yml").read_text())[
        "datasources"
    ]
    assert source["type"] == "prometheus"
    assert source["url"] == "http://prometheus:9090"  # compose's service
    (provider,) = yaml.safe_load((grafana / "provisioning/dashboards/ezat.yml").read_text())[
        "providers"
    ]
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards"
    dashboard = json.loads((grafana / "dashboards/ezat-router.json").read_text())
    panels = dashboard["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    queries = [t for p in panels if p["type"] != "row" for t in p["targets"]]
    assert queries and all(t["expr"].strip() for t in queries)
    for panel in panels:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == source["uid"], panel["title"]
            assert all(t["datasource"]["uid"] == source["uid"] for t in panel["targets"])
    # What the issue asks the dashboard to show, each by the metric that carries it.
    text = " ".join(t["expr"] for t in queries)
    for metric in (
        "ezat_requests_total",
        "ezat_time_to_first_token_seconds_bucket",
        "ezat_tokens_total",
        "ezat_cost_nano_usd_total",
        "ezat_deployments_cooling",
        "ezat_writer_lag_seconds",
        "ezat_reconciliation_lag_seconds",
    ):
        assert metric in text, metric
