"""Several reconcilers at once on committed data: every record charged exactly once.

Runs on the configured database. On Postgres the reconcilers overlap for real (SKIP LOCKED hands
each a disjoint batch); on SQLite the IMMEDIATE transactions serialise them, which must be just
as correct.
"""

from __future__ import annotations

import random
import threading

import pytest
from django.db import connection
from django.db.models import Sum

from accounts.models import Organization
from billing import reconcile
from billing.models import LedgerEntry, UsageRecord
from billing.reconcile import ReconcileResult, check_invariants, reconcile_all
from tests.billing.factories import make_org, make_usages
from tests.billing.harness import is_postgres

pytestmark = pytest.mark.django_db(transaction=True)

USD = 1_000_000_000
THREADS = 4


def test_concurrent_reconcilers_charge_each_record_once(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(6)
    orgs = [make_org(credit_nano=100 * USD) for _ in range(3)]
    costs = {org.pk: [rng.randrange(0, 10**7) for _ in range(120)] for org in orgs}
    for org in orgs:
        make_usages(org, costs[org.pk])
    # Each batch holds its locks a little while, so the threads really overlap.
    monkeypatch.setenv(reconcile.TEST_SLEEP_ENV, "0.05")
    start = threading.Barrier(THREADS)
    results: list[ReconcileResult] = []
    errors: list[BaseException] = []

    def reconciler() -> None:
        try:
            start.wait()
            results.append(reconcile_all(batch_size=25))
        except BaseException as exc:  # reported by the assertion below, with its traceback
            errors.append(exc)
        finally:
            connection.close()  # each thread has its own connection; the test DB must be droppable

    threads = [threading.Thread(target=reconciler) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)

    assert not errors, errors
    assert len(results) == THREADS
    total_cost = sum(sum(c) for c in costs.values())
    assert sum(r.records for r in results) == 360
    assert sum(r.amount_nano for r in results) == total_cost
    assert not UsageRecord.objects.filter(ledger_entry__isnull=True).exists()
    debits = LedgerEntry.objects.filter(kind=LedgerEntry.Kind.USAGE).aggregate(s=Sum("amount_nano"))
    assert debits["s"] == -total_cost
    for org in orgs:
        assert Organization.objects.get(pk=org.pk).balance_nano == 100 * USD - sum(costs[org.pk])
        assert check_invariants(org) == []
    if is_postgres():
        # Proof that they ran side by side rather than one after another.
        assert sum(1 for r in results if r.records) >= 2, [r.as_dict() for r in results]
