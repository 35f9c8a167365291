"""The running cluster (tests/cluster/harness.py) for the module that breaks it."""

from __future__ import annotations

import itertools
import os
import signal
import time
from collections.abc import Iterator
from decimal import Decimal
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command

from simulator.testing import SimulatorThread
from tests import services
from tests.billing.harness import CeleryWorker, subprocess_env
from tests.cluster.harness import Beat, Cluster, HAProxy, PgProxy, Prometheus
from tests.cluster.traffic import Answer, drive
from tests.services import RedisServer
from tests.support.chat_support import SONNET
from tests.support.stack import Key, database_url
from tests.waiting import wait_for

NODES = ["n1", "n2", "n3"]
DEPLOYMENTS = {"cl-a": "sk-sim-cl-a", "cl-b": "sk-sim-cl-b"}
HOLD_TTL_SECONDS = 15
SLOT_LEASE_SECONDS = 4

# The shutdown grace: long enough that a stream a test holds open on a draining node outlives
# the traffic the test sends meanwhile on a loaded machine (test_faults.py), shorter than the
# harness's wait for a node's exit (`Cluster.restart`). Nodes without open streams exit at once.
SHUTDOWN_GRACE_SECONDS = 90

# The gateways: short hold and lease lives (a killed node's must expire within the test), and
# the Celery broker on the session's Redis (tests/cluster/harness.py).
NODE_ENV = {
    "EZAT_HOLD_TTL_SECONDS": str(HOLD_TTL_SECONDS),
    "EZAT_SLOT_LEASE_SECONDS": str(SLOT_LEASE_SECONDS),
    "EZAT_SLOT_HEARTBEAT_SECONDS": "1",
    "EZAT_SHUTDOWN_GRACE_SECONDS": str(SHUTDOWN_GRACE_SECONDS),
    "EZAT_READYZ_CACHE_SECONDS": "0.25",
    # The spool (records PostgreSQL would not take) is replayed within a second of its return.
    "EZAT_USAGE_SPOOL_RETRY_SECONDS": "1",
    "CELERY_TASK_ALWAYS_EAGER": "false",
    # How usage is recorded (direct | group, billing/usage_log.py): the suite runs either way.
    "EZAT_USAGE_COMMIT": os.environ.get("EZAT_USAGE_COMMIT", "direct"),
}


class ClusterContext:
    """The cluster plus what tests need from the test process: keys, records, simulators."""

    def __init__(self, cluster: Cluster, sims: dict[str, SimulatorThread], blocker: Any) -> None:
        self.cluster = cluster
        self.sims = sims
        self.blocker = blocker
        self._counter = itertools.count()

    @property
    def url(self) -> str:
        return self.cluster.lb.url

    @property
    def lb(self) -> HAProxy:
        return self.cluster.lb

    def new_key(
        self,
        *,
        credit_usd: str = "100",
        rpm: int | None = 100_000,
        cap_nano: int | None = None,
        concurrency: int | None = None,
    ) -> Key:
        from accounts.services import create_api_key, create_org
        from billing.services import grant_credit
        from core.money import usd_to_nano

        with self.blocker.unblock():
            org = create_org(name=f"cluster-{os.getpid()}-{next(self._counter)}-{time.time_ns()}")
            grant_credit(org=org, amount_nano=usd_to_nano(Decimal(credit_usd)), memo="cluster")
            new = create_api_key(
                org=org,
                name="cluster",
                rpm_limit=rpm,
                spend_cap_nano=cap_nano,
                max_concurrency=concurrency,
            )
        return Key(secret=new.secret, org_id=org.pk, key_id=new.key.pk)

    def hold_and_cost(self) -> tuple[int, int]:
        """One traffic request's hold and what one such request really costs, in nano-USD.

        The hold is the worst case of its prompt (a few words, far below 200 tokens) and its
        max_tokens (64, tests/cluster/traffic.py); the cost is read from a probe request's
        record. Caps in the money tests are sized from both."""
        from catalog.snapshot import build_snapshot

        with self.blocker.unblock():
            model = build_snapshot().resolve(SONNET)
        assert model is not None
        probe = self.new_key()
        (first,) = drive(self.url, probe.secret, 1, kinds=("chat",))
        (record,) = self.usage(request_id=first.request_id)
        return model.pricing.worst_case_nano(200, 64), record.cost_nano

    def usage(self, **filters: Any) -> list[Any]:
        from billing.models import UsageRecord

        self.wait_flushed()
        with self.blocker.unblock():
            return list(UsageRecord.objects.filter(**filters).order_by("id"))

    def wait_flushed(self) -> None:
        """With EZAT_USAGE_COMMIT=group a row reaches PostgreSQL, and its request is settled in
        the limiter, a flush after its answer (billing/usage_log.py): until every live node's
        log has stored and settled what it holds. Nothing to wait for with `direct`."""
        from tests.cluster.metrics import node_metric

        if NODE_ENV["EZAT_USAGE_COMMIT"] != "group":
            return

        def flushed() -> bool:
            nodes = [n for n in self.cluster.nodes.values() if n.process.poll() is None]
            return all(node_metric(n.url, "ezat_usage_log_unflushed") == 0 for n in nodes)

        wait_for(flushed, 60, what="every node's usage log stored")

    def assert_billed_once(self, answers: list[Answer]) -> None:
        """Every answered request has exactly one usage record, reconciled into the ledger by
        the Celery workers, and `check_ledger` finds every debit equal to its records' cost."""
        ids = [a.request_id for a in answers if a.ok]
        assert ids and None not in ids
        assert len(ids) == len(set(ids)), "one request id answered twice"

        def reconciled() -> list[Any] | None:
            records = self.usage(request_id__in=ids)
            if len(records) == len(ids) and all(r.ledger_entry_id for r in records):
                return records
            return None

        wait_for(reconciled, 120, what=f"{len(ids)} answered requests recorded and reconciled")
        # The operator's command, in this process (a manage.py subprocess costs seconds).
        out, err = StringIO(), StringIO()
        with self.blocker.unblock():
            call_command("check_ledger", stdout=out, stderr=err)  # CommandError on a violation
        assert "no violations" in out.getvalue(), out.getvalue() + err.getvalue()


def _seed_catalog(sims: dict[str, SimulatorThread]) -> None:
    from catalog.models import Deployment
    from catalog.services import load_catalog, upsert_deployment

    load_catalog()
    # Deployments other suites left in this test database point at servers that are gone.
    Deployment.objects.exclude(name__in=list(sims)).delete()
    for name, sim in sims.items():
        upsert_deployment(name=name, base_url=sim.url, api_key=DEPLOYMENTS[name])


@pytest.fixture(scope="package")
def cluster(
    django_db_setup: None, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ClusterContext]:
    """One cluster for the package: test_cluster.py proves it works, test_dashboard.py reads
    its metrics, test_faults.py breaks it (each fault test leaves it whole again)."""
    from django.db import connection

    services.require_postgresql("tests/cluster")
    directory = tmp_path_factory.mktemp("cluster")
    broker_url = services.redis_url(services.REDIS_DB_CLUSTER)
    import redis

    redis.Redis.from_url(broker_url).flushdb()
    sims = {name: SimulatorThread(api_key=key).start() for name, key in DEPLOYMENTS.items()}
    own_redis = RedisServer.start()
    redis_url = own_redis.url(0)
    with django_db_blocker.unblock():
        _seed_catalog(sims)
        db = dict(connection.settings_dict)
        worker_env = subprocess_env(
            REDIS_URL=redis_url, CELERY_BROKER_URL=broker_url, EZAT_RECONCILE_INTERVAL="1"
        )
    try:
        pg_proxy = PgProxy(f"{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}", directory)
    except BaseException:
        own_redis.stop()
        for sim in sims.values():
            sim.stop()
        raise
    cluster = Cluster(
        db_url=database_url({**db, "HOST": "127.0.0.1", "PORT": pg_proxy.port}),
        redis_url=redis_url,
        env={
            **NODE_ENV,
            "CELERY_BROKER_URL": broker_url,
            "EZAT_USAGE_SPOOL_DIR": str(directory / "spool"),
        },
        directory=directory,
        worker_env=worker_env,
        redis=own_redis,
        pg_proxy=pg_proxy,
    )
    try:
        # Everything starts side by side; the waits come after.
        cluster.workers = [
            CeleryWorker("celery", directory / f"worker{n}.log", concurrency=1, env=worker_env)
            for n in range(2)
        ]
        cluster.beat = Beat(worker_env, directory)
        cluster.start_nodes(NODES)
        cluster.haproxy = HAProxy({n: g.port for n, g in cluster.nodes.items()}, directory)
        cluster.prometheus = Prometheus([g.port for g in cluster.nodes.values()], directory)
        for worker in cluster.workers:
            worker.wait_for(r"\bready\.", timeout=120)
        cluster.lb.wait_states(dict.fromkeys(NODES, "UP"))
        yield ClusterContext(cluster, sims, django_db_blocker)
    finally:
        cluster.stop()
        for sim in sims.values():
            sim.stop()
        with django_db_blocker.unblock():
            from catalog.models import Deployment

            Deployment.objects.filter(name__in=list(sims)).delete()


def sigkill(process: Any) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait(30)
