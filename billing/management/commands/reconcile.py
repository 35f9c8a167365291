from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.models import Organization
from billing.reconcile import DEFAULT_BATCH_SIZE, MAX_BATCH_SIZE, ReconcileError, reconcile_all
from billing.selectors import usd_string
from core.cli import positive_int


class Command(BaseCommand):
    help = (
        "Charge unreconciled usage records to their organizations' ledgers now (what the "
        "billing.tasks.reconcile_usage task does). Safe to run at any time, also alongside "
        "workers: every record is charged exactly once."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--batch-size",
            type=positive_int("--batch-size", maximum=MAX_BATCH_SIZE),
            default=DEFAULT_BATCH_SIZE,
            help=f"records per transaction (1-{MAX_BATCH_SIZE}, default {DEFAULT_BATCH_SIZE})",
        )
        parser.add_argument(
            "--max-batches",
            type=positive_int("--max-batches"),
            default=None,
            help="stop after N batches",
        )

    def handle(self, *args: object, **options: object) -> None:
        batch_size = int(str(options["batch_size"]))
        max_batches = options["max_batches"]
        if not 1 <= batch_size <= MAX_BATCH_SIZE:
            raise CommandError(f"--batch-size must be between 1 and {MAX_BATCH_SIZE}")
        if max_batches is not None and int(str(max_batches)) < 1:
            raise CommandError("--max-batches must be a positive integer")
        try:
            result = reconcile_all(
                batch_size=batch_size,
                max_batches=None if max_batches is None else int(str(max_batches)),
            )
        except ReconcileError as exc:
            raise CommandError(f"reconciliation failed and was rolled back: {exc}") from exc
        names = dict(
            Organization.objects.filter(pk__in={c.org_id for c in result.charges}).values_list(
                "pk", "name"
            )
        )
        for charge in result.charges:
            self.stdout.write(
                f"{names.get(charge.org_id, charge.org_id)}: {charge.records} records, "
                f"{usd_string(charge.amount_nano)} USD (ledger entry {charge.ledger_entry_id}, "
                f"{charge.reference})"
            )
        if not result.records:
            self.stdout.write("nothing to reconcile")
            return
        self.stdout.write(
            f"reconciled {result.records} records into {result.entries} ledger entries "
            f"in {result.batches} batches: {usd_string(result.amount_nano)} USD"
        )
