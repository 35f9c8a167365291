"""Real `celery -A ezat worker` processes, a real Redis broker, the committed test database.

Fault injection: `EZAT_RECONCILE_TEST_SLEEP=<seconds>` makes `reconcile_batch` log
"reconcile fault injection: pid=<pid> …" after all of a batch's writes and then sleep before the
commit. The tests wait for that line and SIGKILL the process it names, i.e. mid-batch with every
write done and nothing committed.
"""

from __future__ import annotations

import ast
import os
import re
import signal
import time

from django.db.models import Sum

from accounts.models import Organization
from billing.models import LedgerEntry, UsageRecord
from billing.reconcile import TEST_SLEEP_ENV, TEST_SLEEP_MARKER, check_invariants
from tests.billing.factories import make_org, make_usages
from tests.billing.harness import HarnessError, WorkerPool, is_postgres, succeeded_pattern

USD = 1_000_000_000
MARKER = rf"{re.escape(TEST_SLEEP_MARKER)}: pid=(\d+)"


def seed() -> tuple[list[Organization], dict[int, int]]:
    """Two orgs with usage; returns them and what each must be charged in total."""
    a = make_org(credit_nano=10 * USD)
    b = make_org(credit_nano=10 * USD)
    make_usages(a, [1_000 + i for i in range(30)])
    make_usages(b, [7_000_000] * 20)
    return [a, b], {a.pk: sum(1_000 + i for i in range(30)), b.pk: 140_000_000}


def assert_nothing_charged(orgs: list[Organization]) -> None:
    assert not UsageRecord.objects.filter(ledger_entry__isnull=False).exists()
    assert not LedgerEntry.objects.filter(kind=LedgerEntry.Kind.USAGE).exists()
    for org in orgs:
        assert Organization.objects.get(pk=org.pk).balance_nano == 10 * USD


def assert_charged_exactly_once(orgs: list[Organization], due: dict[int, int]) -> None:
    assert not UsageRecord.objects.filter(ledger_entry__isnull=True).exists()
    for org in orgs:
        debits = LedgerEntry.objects.filter(org=org, kind=LedgerEntry.Kind.USAGE).aggregate(
            s=Sum("amount_nano")
        )["s"]
        assert debits == -due[org.pk]
        assert Organization.objects.get(pk=org.pk).balance_nano == 10 * USD - due[org.pk]
        assert check_invariants(org) == []


def reconcile_until_done(workers: WorkerPool, attempts: int = 10) -> None:
    """Send the task until nothing is left, as beat would (a crashed worker's row locks may
    outlive it for a moment on the server, and SKIP LOCKED rightly leaves such rows alone)."""
    worker = workers.workers[-1]
    for _ in range(attempts):
        task_id = workers.send()
        worker.wait_for(succeeded_pattern(task_id))
        if not UsageRecord.objects.filter(ledger_entry__isnull=True).exists():
            return
        time.sleep(0.5)
    raise HarnessError(f"records still unreconciled after {attempts} runs:\n{worker.log()}")


def test_worker_sigkilled_mid_batch_then_another_worker_charges_exactly_once(
    workers: WorkerPool,
) -> None:
    orgs, due = seed()
    first = workers.start(**{TEST_SLEEP_ENV: "120"})
    workers.send()

    # 1. The pool child dies mid-batch (what the OOM killer does). The transaction rolls back;
    #    the main process rejects the message back to the queue (acks_late,
    #    reject_on_worker_lost) and a new child takes it up from the start.
    [hit] = first.wait_for(MARKER)
    assert_nothing_charged(orgs)
    os.kill(int(hit.group(1)), signal.SIGKILL)
    second_hit = first.wait_for(MARKER, count=2, timeout=90)[1]
    assert second_hit.group(1) != hit.group(1)
    assert_nothing_charged(orgs)

    # 2. The whole worker dies mid-batch (machine gone): again nothing is committed.
    first.kill_all(signal.SIGKILL)
    assert_nothing_charged(orgs)

    # 3. A fresh worker (no fault injection) charges every record exactly once.
    workers.start()
    reconcile_until_done(workers)
    assert_charged_exactly_once(orgs, due)

    # 4. The crashed worker's message may still be redelivered (after the broker's visibility
    #    timeout); any later delivery finds nothing to do.
    before = list(LedgerEntry.objects.order_by("pk").values_list("pk", "amount_nano"))
    task_id = workers.send()
    [done] = workers.workers[-1].wait_for(succeeded_pattern(task_id))
    assert ast.literal_eval(done.group(1))["records"] == 0
    assert list(LedgerEntry.objects.order_by("pk").values_list("pk", "amount_nano")) == before


def test_same_task_delivered_twice_concurrently_charges_once(workers: WorkerPool) -> None:
    orgs, due = seed()
    # Two pool processes and slow small batches: both deliveries run at the same time.
    worker = workers.start(concurrency=2, **{TEST_SLEEP_ENV: "0.5"})
    task_id = "duplicate-delivery-" + os.urandom(4).hex()
    workers.send(task_id=task_id, batch_size=10)
    workers.send(task_id=task_id, batch_size=10)

    runs = [
        ast.literal_eval(m.group(1))
        for m in worker.wait_for(succeeded_pattern(task_id), count=2, timeout=120)
    ]

    assert sum(r["records"] for r in runs) == 50
    assert sum(r["amount_nano"] for r in runs) == sum(due.values())
    assert_charged_exactly_once(orgs, due)
    if is_postgres():
        assert all(r["records"] for r in runs), runs  # they overlapped, on disjoint rows
