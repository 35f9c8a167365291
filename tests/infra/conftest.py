"""Two gateway nodes behind HAProxy, a Celery worker and beat, all on a real Redis Cluster
(EZAT_REDIS_CLUSTER) and on PostgreSQL through a real PgBouncer in transaction mode
(DB_TRANSACTION_POOLING): the production shape for operators whose Redis is a cluster and whose
database sits behind a pooler. The topology is tests/cluster's (its harness and context), with
the infrastructure swapped."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from simulator.testing import SimulatorThread
from tests import services
from tests.billing.harness import CeleryWorker, subprocess_env
from tests.cluster.conftest import DEPLOYMENTS, NODE_ENV, ClusterContext, _seed_catalog
from tests.cluster.harness import Beat, Cluster, HAProxy
from tests.infra.harness import PgBouncer, RedisCluster

NODES = ["i1", "i2"]


class InfraContext(ClusterContext):
    redis_cluster: RedisCluster
    pgbouncer: PgBouncer
    database: str


@pytest.fixture(scope="module")
def infra(
    django_db_setup: None, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[InfraContext]:
    from django.db import connection

    services.require_postgresql("tests/infra")
    directory = tmp_path_factory.mktemp("infra")
    broker = services.redis_url(services.REDIS_DB_INFRA)
    redis.Redis.from_url(broker).flushdb()
    sims = {name: SimulatorThread(api_key=key).start() for name, key in DEPLOYMENTS.items()}
    redis_cluster: RedisCluster | None = None
    pgbouncer: PgBouncer | None = None
    cluster: Cluster | None = None
    try:
        redis_cluster = RedisCluster(directory)
        settings = connection.settings_dict
        pgbouncer = PgBouncer(
            host=settings["HOST"] or "127.0.0.1",
            port=int(settings["PORT"] or 5432),
            user=settings["USER"] or "postgres",
        )
        with django_db_blocker.unblock():
            _seed_catalog(sims)
        # Every process of the topology reaches PostgreSQL through PgBouncer only.
        db_url = pgbouncer.url(settings["NAME"])
        shared = {
            "DATABASE_URL": db_url,
            "DB_TRANSACTION_POOLING": "true",
            "REDIS_URL": redis_cluster.url,
            "EZAT_REDIS_CLUSTER": "true",
            "CELERY_BROKER_URL": broker,
        }
        worker_env = subprocess_env(**shared, EZAT_RECONCILE_INTERVAL="1")
        cluster = Cluster(
            db_url=db_url,
            redis_url=redis_cluster.url,
            env={**NODE_ENV, **shared},
            directory=directory,
        )
        cluster.workers = [
            CeleryWorker("celery", directory / "worker.log", concurrency=1, env=worker_env)
        ]
        cluster.beat = Beat(worker_env, directory)
        cluster.start_nodes(NODES)
        cluster.haproxy = HAProxy({n: g.port for n, g in cluster.nodes.items()}, directory)
        cluster.workers[0].wait_for(r"\bready\.", timeout=120)
        cluster.lb.wait_states(dict.fromkeys(NODES, "UP"))
        context = InfraContext(cluster, sims, django_db_blocker)
        context.redis_cluster = redis_cluster
        context.pgbouncer = pgbouncer
        context.database = str(settings["NAME"])
        yield context
    finally:
        if cluster is not None:
            cluster.stop()
        for sim in sims.values():
            sim.stop()
        if pgbouncer is not None:
            pgbouncer.stop()
        if redis_cluster is not None:
            redis_cluster.stop()
        with django_db_blocker.unblock():
            from catalog.models import Deployment

            Deployment.objects.filter(name__in=list(sims)).delete()
