"""The running stack for end-to-end tests (a pytest plugin, loaded by tests/conftest.py for
every directory, since the e2e tests live with the code they test): the real gateway (uvicorn subprocess, the production
ASGI app) in front of real simulator servers, sharing the pytest-django test database.

Customers' SDKs drive the gateway over HTTP; tests read what the simulators received through
their control API and what was billed through the ORM.

Data is created outside test transactions (committed, visible to the gateway process), so e2e
tests never use the `db`/`transactional_db` fixtures: each test gets its own org and key.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from simulator.testing import SimulatorThread
from tests import services
from tests.services import free_port
from tests.support import schemas

ROOT = Path(__file__).resolve().parents[2]
SIM_KEYS = ("sk-sim-a", "sk-sim-b", "sk-sim-c")

# Knobs shortened so fault tests run in seconds, not minutes.
GATEWAY_ENV = {
    "EZAT_PING_INTERVAL": "1.0",
    "EZAT_STREAM_OPEN_AFTER": "1.5",
    "EZAT_ATTEMPT_START_DEADLINE": "3",
    "EZAT_ATTEMPT_START_DEADLINE_HIGH_EFFORT": "3",
    "EZAT_DISCONNECT_DRAIN_SECONDS": "3",
    "EZAT_KEY_CACHE_TTL": "0.5",
    "EZAT_CATALOG_POLL_INTERVAL": "0.5",
    "EZAT_IMAGE_ALLOW_LOOPBACK": "true",
    "EZAT_COOLDOWN_FAILURES": "3",
    "EZAT_COOLDOWN_SECONDS": "30",
    "LOG_LEVEL": "WARNING",
    # stop() waits 10 s for the exit: a stream a test left open gets 5 of them.
    "EZAT_SHUTDOWN_GRACE_SECONDS": "5",
    # A Bedrock deployment without keys must never make botocore probe the EC2 metadata endpoint.
    "AWS_EC2_METADATA_DISABLED": "true",
}


def database_url(settings_dict: dict[str, Any]) -> str:
    engine = settings_dict["ENGINE"]
    if engine.endswith("sqlite3"):
        return f"sqlite:///{settings_dict['NAME']}"
    if engine.endswith("postgresql"):
        user = settings_dict.get("USER") or "postgres"
        password = f":{settings_dict['PASSWORD']}" if settings_dict.get("PASSWORD") else ""
        host = settings_dict.get("HOST") or "127.0.0.1"
        port = settings_dict.get("PORT") or 5432
        return f"postgres://{user}{password}@{host}:{port}/{settings_dict['NAME']}"
    raise RuntimeError(f"e2e tests do not support {engine}")


def e2e_redis_url() -> str:
    """The stack's Redis (a database of the session's private server) in production shape."""
    return services.redis_url(services.REDIS_DB_E2E) if services.production_shape() else ""


@dataclass
class GatewayProcess:
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:]

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def wait_healthy(self) -> None:
        deadline = time.monotonic() + 120  # a loaded 2-core box
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"gateway exited early:\n{self.log()}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"gateway did not become healthy:\n{self.log()}")


def launch_gateway(
    db_url: str,
    redis_url: str,
    tmp: Path,
    extra_env: dict[str, str] | None = None,
    *,
    port: int | None = None,
) -> GatewayProcess:
    """Start a gateway process without waiting for it (several start side by side; then
    `wait_healthy` on each)."""
    port = port or free_port()
    env = {**os.environ, **GATEWAY_ENV, "DATABASE_URL": db_url, **(extra_env or {})}
    env["REDIS_URL"] = redis_url
    env.setdefault("EZAT_WORKERS", "1")  # one process per gateway (ezat.serve: one per core)
    env.pop("DJANGO_SETTINGS_MODULE", None)
    log_path = tmp / f"gateway-{port}.log"
    process = subprocess.Popen(
        # The production launcher: uvicorn (uvloop, httptools) with the graceful shutdown.
        [sys.executable, "-m", "ezat.serve", "--host", "127.0.0.1", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=log_path.open("ab"),
        stderr=subprocess.STDOUT,
    )
    return GatewayProcess(url=f"http://127.0.0.1:{port}", process=process, log_path=log_path)


def start_gateway(
    db_url: str,
    redis_url: str,
    tmp: Path,
    extra_env: dict[str, str] | None = None,
    *,
    port: int | None = None,
) -> GatewayProcess:
    gateway = launch_gateway(db_url, redis_url, tmp, extra_env, port=port)
    gateway.wait_healthy()
    return gateway


@dataclass
class Stack:
    gateway: GatewayProcess
    sims: dict[str, SimulatorThread]  # deployment name → simulator
    blocker: Any
    _counter: Iterator[int] = field(default_factory=itertools.count)

    @property
    def url(self) -> str:
        return self.gateway.url

    @property
    def sim(self) -> SimulatorThread:
        """The main deployment, serving every catalog model."""
        return self.sims["sim-a"]

    def new_key(
        self, *, credit_usd: str = "100", rpm: int | None = 10_000, cap_usd: str | None = None
    ) -> Key:
        from accounts.services import create_api_key, create_org
        from billing.services import grant_credit
        from core.money import usd_to_nano

        with self.blocker.unblock():
            org = create_org(
                name=f"e2e-org-{os.getpid()}-{next(self._counter)}-{time.monotonic_ns()}"
            )
            if Decimal(credit_usd) > 0:
                grant_credit(org=org, amount_nano=usd_to_nano(Decimal(credit_usd)), memo="e2e")
            new = create_api_key(
                org=org,
                name="e2e",
                rpm_limit=rpm,
                spend_cap_nano=usd_to_nano(Decimal(cap_usd)) if cap_usd is not None else None,
            )
        return Key(secret=new.secret, org_id=org.pk, key_id=new.key.pk)

    def usage(self, **filters: Any) -> list[Any]:
        from billing.models import UsageRecord

        with self.blocker.unblock():
            return list(UsageRecord.objects.filter(**filters).order_by("id"))

    def reset_sims(self) -> None:
        for sim in self.sims.values():
            sim.reset()


@dataclass(frozen=True)
class Key:
    secret: str
    org_id: int
    key_id: int


ROUTING_MODELS = ("test/routed-ab", "test/routed-abc")


def _seed_catalog(sims: dict[str, SimulatorThread]) -> None:
    from catalog.models import Deployment, Model
    from catalog.services import copy_model, load_catalog, upsert_deployment

    load_catalog()
    base = Model.objects.get(id="anthropic/claude-sonnet-5-5")
    for model_id in ROUTING_MODELS:
        Model.objects.filter(id=model_id).delete()  # left by an earlier session: re-copied
        copy_model(base, model_id, source_note="e2e routing model")
    # Other suites (browser tests) share this test database and leave deployments pointing at
    # servers that are gone; the stack routes only to its own simulators.
    Deployment.objects.exclude(name__in=list(sims)).delete()
    upsert_deployment(name="sim-a", base_url=sims["sim-a"].url, api_key=SIM_KEYS[0])
    upsert_deployment(
        name="sim-b",
        base_url=sims["sim-b"].url,
        api_key=SIM_KEYS[1],
        model_ids=list(ROUTING_MODELS),
    )
    upsert_deployment(
        name="sim-c", base_url=sims["sim-c"].url, api_key=SIM_KEYS[2], model_ids=["test/routed-abc"]
    )


@pytest.fixture(scope="session")
def stack(
    django_db_setup: None, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    from django.db import connection

    sims = {
        name: SimulatorThread(api_key=key).start()
        for name, key in zip(("sim-a", "sim-b", "sim-c"), SIM_KEYS, strict=True)
    }
    redis_url = e2e_redis_url()
    if redis_url:
        import redis

        redis.Redis.from_url(redis_url).flushdb()
    with django_db_blocker.unblock():
        _seed_catalog(sims)
        db_url = database_url(connection.settings_dict)
    gateway = start_gateway(db_url, redis_url, tmp_path_factory.mktemp("gateway"))
    try:
        yield Stack(gateway=gateway, sims=sims, blocker=django_db_blocker)
    finally:
        gateway.stop()
        for sim in sims.values():
            sim.stop()


@pytest.fixture
def e2e(stack: Stack) -> Stack:
    """The stack with clean simulators (records and scripted faults) for this test."""
    stack.reset_sims()
    return stack


@pytest.fixture(autouse=True)
def sdk_schemas(request: pytest.FixtureRequest) -> Iterator[schemas.Watch]:
    """Every gateway answer an e2e test reads is checked against the official SDKs' types
    (tests/support/schemas.py); a violation fails the test, whatever its own assertions say.
    Other kinds are not watched (a unit test's fake answers are no gateway's)."""
    if request.node.get_closest_marker("e2e") is None:
        yield schemas.Watch()
        return
    with schemas.watch() as seen:
        yield seen
    if seen.violations:
        pytest.fail(
            f"{len(seen.violations)} answer(s) fail the SDK types:\n"
            + "\n".join(seen.violations[:10]),
            pytrace=False,
        )
