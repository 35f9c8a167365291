"""Reconciliation in one process: grouping, idempotence, each of the three double-charge guards,
rollback on a crash mid-batch, and the invariant checker."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from accounts.models import Organization
from billing import reconcile
from billing.models import LedgerEntry, UsageRecord
from billing.reconcile import (
    ReconcileConflict,
    ReconcileResult,
    check_invariants,
    reconcile_all,
    reconcile_batch,
    usage_reference,
)
from billing.tasks import reconcile_usage
from tests.billing.factories import make_org, make_usage, make_usages

pytestmark = pytest.mark.django_db

USD = 1_000_000_000


def snapshot() -> tuple[list[tuple[int, int]], list[tuple[int, int | None]], list[tuple[int, str]]]:
    """Everything reconciliation can change, to prove a failed or repeated run changed nothing."""
    return (
        list(Organization.objects.order_by("pk").values_list("pk", "balance_nano")),
        list(UsageRecord.objects.order_by("pk").values_list("pk", "ledger_entry_id")),
        list(LedgerEntry.objects.order_by("pk").values_list("amount_nano", "reference")),
    )


def test_one_debit_per_org_and_balances_move_with_it() -> None:
    a = make_org(credit_nano=10 * USD)
    b = make_org(credit_nano=5 * USD)
    recs_a = make_usages(a, [1_000, 2_500, 7])
    recs_b = make_usages(b, [40_000])

    result = reconcile_batch()

    assert (result.batches, result.records, result.entries) == (1, 4, 2)
    assert result.amount_nano == 43_507
    entries = {e.org_id: e for e in LedgerEntry.objects.filter(kind=LedgerEntry.Kind.USAGE)}
    assert entries[a.pk].amount_nano == -3_507
    assert entries[b.pk].amount_nano == -40_000
    assert entries[a.pk].reference == usage_reference(a.pk, [r.pk for r in recs_a])
    assert set(UsageRecord.objects.filter(org=a).values_list("ledger_entry", flat=True)) == {
        entries[a.pk].pk
    }
    assert set(UsageRecord.objects.filter(org=b).values_list("ledger_entry", flat=True)) == {
        entries[b.pk].pk
    }
    a.refresh_from_db()
    b.refresh_from_db()
    assert a.balance_nano == 10 * USD - 3_507
    assert b.balance_nano == 5 * USD - 40_000
    assert entries[b.pk].reference == usage_reference(b.pk, [r.pk for r in recs_b])
    assert check_invariants(a) == check_invariants(b) == []


def test_running_twice_charges_once() -> None:
    org = make_org(credit_nano=USD)
    make_usages(org, [100] * 5)
    first = reconcile_all()
    before = snapshot()

    second = reconcile_all()

    assert first.records == 5
    assert second == ReconcileResult()
    assert snapshot() == before
    org.refresh_from_db()
    assert org.balance_nano == USD - 500


def test_new_usage_after_a_run_is_charged_by_the_next_run_only() -> None:
    org = make_org()
    make_usages(org, [100, 200])
    reconcile_all()
    make_usage(org, cost_nano=50)

    result = reconcile_all()

    assert (result.records, result.amount_nano) == (1, 50)
    org.refresh_from_db()
    assert org.balance_nano == -350  # prepaid balance may go negative; the limiter prevents it
    assert LedgerEntry.objects.filter(kind=LedgerEntry.Kind.USAGE).count() == 2
    assert check_invariants(org) == []


def test_batches_split_by_size_and_max_batches_stops_early() -> None:
    org = make_org()
    make_usages(org, [1, 2, 3, 4, 5, 6, 7])

    partial = reconcile_all(batch_size=3, max_batches=2)
    rest = reconcile_all(batch_size=3)

    assert (partial.batches, partial.records) == (2, 6)
    assert (rest.batches, rest.records, rest.amount_nano) == (1, 1, 7)
    assert UsageRecord.objects.filter(ledger_entry__isnull=True).count() == 0
    assert check_invariants(org) == []


def test_zero_cost_records_are_marked_reconciled() -> None:
    org = make_org()
    make_usages(org, [0, 0])

    result = reconcile_all()

    assert (result.records, result.amount_nano) == (2, 0)
    assert not UsageRecord.objects.filter(ledger_entry__isnull=True).exists()
    assert check_invariants(org) == []


@pytest.mark.parametrize("size", [0, -1, reconcile.MAX_BATCH_SIZE + 1])
def test_batch_size_is_bounded(size: int) -> None:
    with pytest.raises(ValueError, match="batch_size"):
        reconcile_batch(size)


def test_reference_depends_only_on_the_set_of_records() -> None:
    assert usage_reference(7, [3, 1, 2]) == usage_reference(7, [1, 2, 3])
    assert usage_reference(7, [1, 2, 3]) != usage_reference(7, [1, 3])
    assert usage_reference(7, [1, 2, 3]) != usage_reference(8, [1, 2, 3])
    assert usage_reference(7, [1, 2, 3]).startswith("usage:7:1-3:3:")
    assert len(usage_reference(2**62, list(range(10**6, 10**6 + 5000)))) <= 200


def test_unique_reference_refuses_a_second_debit_of_the_same_records() -> None:
    """Guard 3: even if row locks and the guarded UPDATE both failed, the reference collides."""
    org = make_org()
    records = make_usages(org, [10, 20])
    LedgerEntry.objects.create(
        org=org,
        kind=LedgerEntry.Kind.USAGE,
        amount_nano=-30,
        reference=usage_reference(org.pk, [r.pk for r in records]),
    )
    before = snapshot()

    with pytest.raises(IntegrityError):
        reconcile_batch()

    assert snapshot() == before


def test_guarded_update_rolls_back_when_a_record_was_charged_meanwhile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Guard 2: a selected record already reconciled by someone else aborts the whole batch."""
    a = make_org()
    b = make_org()
    stale = make_usages(a, [10, 20]) + make_usages(b, [5])
    rows = [(r.pk, r.org_id, r.cost_nano) for r in stale]
    reconcile_batch(1)  # "someone else" charged a's first record
    before = snapshot()
    # Replay the selection as it was before that commit: what a broken lock would hand us.
    monkeypatch.setattr(reconcile, "_lock_unreconciled", lambda batch_size: rows)

    with pytest.raises(ReconcileConflict, match="1 of 2 records were reconciled concurrently"):
        reconcile_batch()

    assert snapshot() == before
    assert check_invariants(a) == check_invariants(b) == []
    monkeypatch.undo()
    assert reconcile_all().records == 2  # the rest is charged normally afterwards
    assert check_invariants(a) == check_invariants(b) == []


class Crash(BaseException):
    """Stands in for the process dying: not an Exception, so nothing on the way catches it."""


def test_crash_after_every_write_before_commit_leaves_no_trace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    org = make_org(credit_nano=USD)
    make_usages(org, [100, 200, 300])
    before = snapshot()
    monkeypatch.setenv(reconcile.TEST_SLEEP_ENV, "5")

    def crash(seconds: float) -> None:
        raise Crash

    monkeypatch.setattr(reconcile.time, "sleep", crash)  # the hook runs after all writes
    with pytest.raises(Crash):
        reconcile_batch()
    assert snapshot() == before

    monkeypatch.delenv(reconcile.TEST_SLEEP_ENV)
    assert reconcile_all().records == 3
    org.refresh_from_db()
    assert org.balance_nano == USD - 600
    assert check_invariants(org) == []


def test_bad_fault_injection_value_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(reconcile.TEST_SLEEP_ENV, "soon")
    with pytest.raises(reconcile.ImproperlyConfigured, match=reconcile.TEST_SLEEP_ENV):
        reconcile_batch()


def test_a_batch_is_its_own_transaction_never_nested() -> None:
    with pytest.raises(RuntimeError, match="durable"), transaction.atomic():
        reconcile_batch()


def test_task_called_twice_charges_once() -> None:
    org = make_org(credit_nano=USD)
    make_usages(org, [1_000] * 3)

    first = reconcile_usage.apply().get()
    second = reconcile_usage.apply().get()
    third = reconcile_usage(batch_size=1)  # a direct call, as beat's eager fallback does

    assert first == {"batches": 1, "records": 3, "entries": 1, "amount_nano": 3_000}
    assert second == third == {"batches": 0, "records": 0, "entries": 0, "amount_nano": 0}
    org.refresh_from_db()
    assert org.balance_nano == USD - 3_000


def test_task_options_make_redelivery_safe() -> None:
    assert reconcile_usage.name == "billing.tasks.reconcile_usage"
    assert reconcile_usage.acks_late is True
    assert reconcile_usage.reject_on_worker_lost is True


class TestCheckInvariants:
    def test_clean_org(self) -> None:
        org = make_org(credit_nano=USD)
        make_usages(org, [5, 6])
        reconcile_all()
        assert check_invariants(org) == []

    def test_unreconciled_usage_is_not_a_violation(self) -> None:
        org = make_org(credit_nano=USD)
        make_usages(org, [5, 6])
        assert check_invariants(org) == []

    def test_balance_out_of_step_with_ledger(self) -> None:
        org = make_org(credit_nano=USD)
        Organization.objects.filter(pk=org.pk).update(balance_nano=USD + 1)
        [problem] = check_invariants(org)
        assert f"balance_nano {USD + 1} != Σ ledger {USD}" in problem

    def test_record_cost_changed_after_reconciliation(self) -> None:
        org = make_org()
        [rec, _] = make_usages(org, [5, 6])
        reconcile_all()
        UsageRecord.objects.filter(pk=rec.pk).update(cost_nano=50)
        problems = check_invariants(org)
        assert len(problems) == 2
        assert "Σ usage debits -11 != −Σ cost of reconciled records -56" in problems[0]
        assert "is -11 but its 2 records cost 56" in problems[1]

    def test_usage_entry_without_records(self) -> None:
        org = make_org()
        LedgerEntry.objects.create(
            org=org, kind=LedgerEntry.Kind.USAGE, amount_nano=0, reference="usage:orphan"
        )
        [problem] = check_invariants(org)
        assert "usage:orphan" in problem and "0 records" in problem

    def test_records_of_another_org_on_this_ledger(self) -> None:
        a = make_org()
        b = make_org()
        make_usages(a, [5])
        [rec_b] = make_usages(b, [0])
        reconcile_all()
        entry_a = LedgerEntry.objects.get(org=a)
        UsageRecord.objects.filter(pk=rec_b.pk).update(ledger_entry=entry_a)
        problems = check_invariants(a)
        assert any("records of other orgs" in p for p in problems)
