"""Reconciliation: unreconciled usage records become ledger debits, each record exactly once.

A record is reconciled when its `ledger_entry` is set. One batch is one database transaction:

1. lock up to `batch_size` unreconciled records, oldest first (`FOR UPDATE SKIP LOCKED` on
   Postgres, so concurrent workers take disjoint batches instead of queueing on each other; on
   SQLite the `BEGIN IMMEDIATE` transaction already serialises writers);
2. per org, insert one `LedgerEntry(kind=usage)` for −Σ cost, whose `reference` is derived from
   exactly that set of record ids (unique: the same set can never be debited twice);
3. point exactly those records at the entry with a guarded UPDATE (`… AND ledger_entry_id IS
   NULL`); if fewer rows than selected change, someone else charged them and the whole batch
   rolls back;
4. move `Organization.balance_nano` by the same amount with `F()`, orgs in id order (a fixed lock
   order, so two workers can never deadlock on org rows).

Nothing is visible until the commit, so a crash, a SIGKILL or a lost connection anywhere before
it leaves no trace, and the records are simply picked up by the next run. A task delivered twice
finds nothing left to do. Three independent guards (row locks, the guarded UPDATE, the unique
reference) each prevent a double charge on their own.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import connection, transaction
from django.db.models import Count, F, IntegerField, OuterRef, QuerySet, Subquery, Sum, Value
from django.db.models.functions import Coalesce

from accounts.models import Organization
from billing.models import LedgerEntry, UsageRecord

logger = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 500
# Keeps the `id IN (…)` list and the transaction short whatever a caller passes.
MAX_BATCH_SIZE = 5000
# Fault-injection hook for tests (see tests/billing/test_worker.py): seconds to sleep after
# every write of a batch and before its commit, so a test can SIGKILL a worker mid-batch or make
# two workers overlap. Read per batch from the environment; never set it in production.
TEST_SLEEP_ENV = "EZAT_RECONCILE_TEST_SLEEP"
# The log line a test waits for before killing the process named in it.
TEST_SLEEP_MARKER = "reconcile fault injection"
# Bounds the violation list of one org so a badly broken ledger still prints a readable report.
MAX_ENTRY_VIOLATIONS = 20


class ReconcileError(RuntimeError):
    """Reconciliation could not proceed; the batch was rolled back and nothing was charged."""


class ReconcileConflict(ReconcileError):
    """A selected record was reconciled by someone else before our guarded UPDATE."""


@dataclass(frozen=True, slots=True)
class OrgCharge:
    """One ledger debit written for one org in one batch."""

    org_id: int
    ledger_entry_id: int
    reference: str
    records: int
    amount_nano: int  # what was charged: positive, the entry itself holds −amount_nano


@dataclass(frozen=True, slots=True)
class ReconcileResult:
    batches: int = 0
    records: int = 0
    amount_nano: int = 0  # total charged, positive
    charges: tuple[OrgCharge, ...] = field(default=())

    @property
    def entries(self) -> int:
        return len(self.charges)

    def __add__(self, other: ReconcileResult) -> ReconcileResult:
        return ReconcileResult(
            batches=self.batches + other.batches,
            records=self.records + other.records,
            amount_nano=self.amount_nano + other.amount_nano,
            charges=self.charges + other.charges,
        )

    def as_dict(self) -> dict[str, int]:
        """A JSON-safe summary (the Celery task's return value)."""
        return {
            "batches": self.batches,
            "records": self.records,
            "entries": self.entries,
            "amount_nano": self.amount_nano,
        }


def usage_reference(org_id: int, record_ids: list[int]) -> str:
    """A reference that is a function of the exact set of records it debits.

    Readable parts (org, id range, count) help an operator; the digest makes it unique per set,
    so retrying the same set collides on `LedgerEntry.reference` instead of charging again.
    """
    ids = sorted(record_ids)
    digest = hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()[:16]
    return f"usage:{org_id}:{ids[0]}-{ids[-1]}:{len(ids)}:{digest}"


def _test_sleep_seconds() -> float:
    raw = os.environ.get(TEST_SLEEP_ENV, "").strip()
    if not raw:
        return 0.0
    try:
        seconds = float(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{TEST_SLEEP_ENV} must be a number of seconds") from exc
    return max(seconds, 0.0)


def _lock_unreconciled(batch_size: int) -> list[tuple[int, int, int]]:
    """(id, org_id, cost_nano) of up to `batch_size` unreconciled records, locked for us."""
    qs = UsageRecord.objects.filter(ledger_entry__isnull=True).order_by("id")
    features = connection.features
    if features.has_select_for_update and features.has_select_for_update_skip_locked:
        # Rows another worker holds are skipped, not waited for: that worker charges them.
        # Rows another worker committed meanwhile are re-checked against the WHERE clause by
        # Postgres and dropped, so we never see a record as unreconciled after its commit.
        qs = qs.select_for_update(skip_locked=True)
    return list(qs.values_list("id", "org_id", "cost_nano")[:batch_size])


def _charge_org(org_id: int, rows: list[tuple[int, int]]) -> OrgCharge:
    """Debit one org for `rows` ((id, cost_nano)); must run inside the batch's transaction."""
    ids = [record_id for record_id, _ in rows]
    total = sum(cost for _, cost in rows)
    reference = usage_reference(org_id, ids)
    entry = LedgerEntry.objects.create(
        org_id=org_id,
        kind=LedgerEntry.Kind.USAGE,
        amount_nano=-total,
        reference=reference,
        memo=(
            f"1 usage record, id {ids[0]}"
            if len(ids) == 1
            else f"{len(ids)} usage records, ids {min(ids)}-{max(ids)}"
        ),
        created_by="reconcile",
    )
    updated = UsageRecord.objects.filter(id__in=ids, ledger_entry__isnull=True).update(
        ledger_entry=entry
    )
    if updated != len(ids):
        # Impossible while the row locks hold; if it ever happens, charging nothing is right.
        raise ReconcileConflict(
            f"org {org_id}: {len(ids) - updated} of {len(ids)} records were reconciled "
            "concurrently; batch rolled back"
        )
    return OrgCharge(
        org_id=org_id,
        ledger_entry_id=entry.pk,
        reference=reference,
        records=len(ids),
        amount_nano=total,
    )


def reconcile_batch(batch_size: int = DEFAULT_BATCH_SIZE) -> ReconcileResult:
    """Charge up to `batch_size` unreconciled records in one transaction.

    Returns an empty result when nothing is left (or everything left is locked by another
    worker, which will charge it). On a conflict it rolls back and raises `ReconcileConflict`
    (guarded UPDATE) or `IntegrityError` (a reference already used): nothing is charged.
    """
    if not 1 <= batch_size <= MAX_BATCH_SIZE:
        raise ValueError(f"batch_size must be between 1 and {MAX_BATCH_SIZE}")
    sleep_seconds = _test_sleep_seconds()
    # durable: the batch must really commit when we return, not ride in a caller's transaction.
    with transaction.atomic(durable=True):
        rows = _lock_unreconciled(batch_size)
        if not rows:
            return ReconcileResult()
        by_org: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for record_id, org_id, cost in rows:
            by_org[org_id].append((record_id, cost))
        charges = tuple(_charge_org(org_id, by_org[org_id]) for org_id in sorted(by_org))
        # Balances last and in org-id order: org rows are the only rows two batches can share,
        # so a fixed order rules out deadlocks, and the locks are held for the shortest time.
        for charge in charges:
            Organization.objects.filter(pk=charge.org_id).update(
                balance_nano=F("balance_nano") - charge.amount_nano
            )
        if sleep_seconds:
            logger.warning(
                "%s: pid=%d sleeping %.1fs before commit (%d records)",
                TEST_SLEEP_MARKER,
                os.getpid(),
                sleep_seconds,
                len(rows),
            )
            time.sleep(sleep_seconds)
    result = ReconcileResult(
        batches=1,
        records=len(rows),
        amount_nano=sum(c.amount_nano for c in charges),
        charges=charges,
    )
    logger.info(
        "reconciled %d usage records into %d ledger entries (%d nano-USD)",
        result.records,
        result.entries,
        result.amount_nano,
    )
    return result


def reconcile_all(
    batch_size: int = DEFAULT_BATCH_SIZE, max_batches: int | None = None
) -> ReconcileResult:
    """Run batches until none is left (or `max_batches`, so one task cannot run forever)."""
    total = ReconcileResult()
    while max_batches is None or total.batches < max_batches:
        result = reconcile_batch(batch_size)
        if not result.records:
            break
        total += result
    return total


def _sum_subquery(qs: QuerySet[Any], column: str) -> Coalesce:
    """Σ `column` over `qs` (filtered on one org) as a scalar subquery, 0 when empty."""
    return Coalesce(
        Subquery(
            qs.values("org_id").annotate(total=Sum(column)).values("total"),
            output_field=IntegerField(),
        ),
        Value(0),
    )


def check_invariants(org: Organization) -> list[str]:
    """What is wrong with `org`'s money, as readable sentences; empty when all is well.

    - balance_nano == Σ ledger;
    - Σ usage debits == −Σ cost of reconciled records;
    - every usage entry == −Σ cost of its own records, and those records are the org's.
    """
    # One statement, so one snapshot: a reconciliation committing between two separate reads
    # would otherwise show up as a violation that never existed.
    sums = (
        Organization.objects.filter(pk=org.pk)
        .annotate(
            ledger_sum=_sum_subquery(LedgerEntry.objects.filter(org=OuterRef("pk")), "amount_nano"),
            usage_debits=_sum_subquery(
                LedgerEntry.objects.filter(org=OuterRef("pk"), kind=LedgerEntry.Kind.USAGE),
                "amount_nano",
            ),
            reconciled_cost=_sum_subquery(
                UsageRecord.objects.filter(org=OuterRef("pk"), ledger_entry__isnull=False),
                "cost_nano",
            ),
        )
        .values("balance_nano", "ledger_sum", "usage_debits", "reconciled_cost")
        .first()
    )
    if sums is None:
        return [f"org {org.pk}: does not exist"]
    problems: list[str] = []
    name = f"org {org.name!r} (id {org.pk})"
    if sums["balance_nano"] != sums["ledger_sum"]:
        problems.append(
            f"{name}: balance_nano {sums['balance_nano']} != Σ ledger {sums['ledger_sum']}"
        )
    if sums["usage_debits"] != -sums["reconciled_cost"]:
        problems.append(
            f"{name}: Σ usage debits {sums['usage_debits']} != −Σ cost of reconciled records "
            f"{-sums['reconciled_cost']}"
        )
    # Entries and their records commit together and never change afterwards, so these per-entry
    # reads need no common snapshot.
    entries = (
        LedgerEntry.objects.filter(org=org, kind=LedgerEntry.Kind.USAGE)
        .annotate(records=Count("usage_records"), cost=Sum("usage_records__cost_nano"))
        .order_by("id")
        .values_list("id", "reference", "amount_nano", "records", "cost")
    )
    bad_entries = 0
    for entry_id, reference, amount, records, cost in entries.iterator():
        if records and amount == -(cost or 0):
            continue
        bad_entries += 1
        if bad_entries <= MAX_ENTRY_VIOLATIONS:
            problems.append(
                f"{name}: usage entry {entry_id} ({reference}) is {amount} but its "
                f"{records} records cost {cost or 0}"
            )
    if bad_entries > MAX_ENTRY_VIOLATIONS:
        problems.append(f"{name}: … and {bad_entries - MAX_ENTRY_VIOLATIONS} more bad entries")
    foreign = UsageRecord.objects.filter(ledger_entry__org=org).exclude(org=org).count()
    if foreign:
        problems.append(f"{name}: {foreign} records of other orgs are charged to its ledger")
    return problems
