"""Alerts through a real `celery -A ezat worker` and the real Redis broker: the worker
evaluates, sends the webhook to a real local receiver, retries a failed delivery with backoff,
and a re-evaluation of the same crossing sends nothing."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from accounts import services as accounts
from alerts import signing
from alerts.models import AlertEvent, AlertSettings
from billing.services import grant_credit
from tests.alerts.conftest import USD
from tests.alerts.receiver import webhook_receiver
from tests.billing.harness import WorkerPool
from tests.waiting import wait_for


@pytest.fixture
def workers(transactional_db: None, tmp_path: Path) -> Iterator[WorkerPool]:
    pool = WorkerPool(tmp_path)
    try:
        yield pool
    finally:
        pool.close()


def _send(pool: WorkerPool, name: str, *args: int) -> str:
    task_id = str(uuid.uuid4())
    pool.client.send_task(name, args=list(args), queue=pool.queue, task_id=task_id)
    return task_id


def test_worker_delivers_a_signed_webhook_once_after_a_retry(workers: WorkerPool) -> None:
    org = accounts.create_org(name=f"Worker Alerts {uuid.uuid4().hex[:6]}")
    grant_credit(org=org, amount_nano=2 * USD, memo="credit")
    with webhook_receiver(statuses=[500, 200]) as receiver:
        row = AlertSettings.objects.create(
            org=org,
            low_balance_nano=5 * USD,
            key_cap_alerts=True,
            email_enabled=False,
            webhook_url=receiver.url,
            webhook_secret=signing.new_secret(),
        )
        worker = workers.start(
            CELERY_TASK_DEFAULT_QUEUE=workers.queue,
            EZAT_WEBHOOK_ALLOW_LOOPBACK="true",
            EZAT_ALERT_RETRY_BASE_SECONDS="0.2",
        )
        _send(workers, "alerts.tasks.evaluate_org_alerts", org.pk)
        event = wait_for(
            lambda: AlertEvent.objects.filter(
                org=org, webhook_status=AlertEvent.Delivery.SENT
            ).first(),
            60,
            what="the delivered alert",
        )
        assert event.webhook_attempts == 2
        assert receiver.count() == 2
        worker.wait_for(r"alerts\.tasks\.deliver_webhook\[[^\]]+\] retry")
        for got in receiver.requests:
            assert signing.verify(
                row.webhook_secret,
                got.body,
                got.headers[signing.TIMESTAMP_HEADER],
                got.headers[signing.SIGNATURE_HEADER],
                now=time.time(),
            )
            assert orjson.loads(got.body)["id"] == f"alert_{event.pk}"

        # Beat evaluating again (twice): the same crossing, nothing new.
        first = _send(workers, "alerts.tasks.evaluate_alerts")
        second = _send(workers, "alerts.tasks.evaluate_org_alerts", org.pk)
        for task_id in (first, second):
            worker.wait_for(rf"\[{task_id}\] succeeded")
        assert AlertEvent.objects.filter(org=org).count() == 1
        assert receiver.count() == 2
