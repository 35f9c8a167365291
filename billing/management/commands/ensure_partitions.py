from __future__ import annotations

from datetime import UTC, datetime

from django.core.management.base import BaseCommand, CommandError, CommandParser

from billing import partitions
from core.cli import positive_int

# Ten years of empty monthly tables is already far more than anyone plans ahead.
MAX_MONTHS_AHEAD = 120


def _month(value: str) -> datetime:
    try:
        return datetime.strptime(value, "%Y-%m").replace(tzinfo=UTC)
    except ValueError as exc:
        raise CommandError(f"--since takes a month as YYYY-MM, not {value!r}") from exc


class Command(BaseCommand):
    help = (
        "Create the monthly partitions of the usage records and the request log on PostgreSQL "
        "(what beat's ensure_partitions task does): this month and --months-ahead months ahead "
        "(default EZAT_PARTITION_MONTHS_AHEAD), and every month from --since on. Idempotent; "
        "rows of a new month already in the default partition are moved into it. Prints each "
        "partition created; nothing on SQLite, whose tables are not partitioned."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--months-ahead",
            type=positive_int("--months-ahead", maximum=MAX_MONTHS_AHEAD),
            default=None,
            help="months to create after this one (1 or more; default EZAT_PARTITION_MONTHS_AHEAD)",
        )
        parser.add_argument("--since", type=_month, default=None, help="first month, YYYY-MM")

    def handle(self, *args: object, **options: object) -> None:
        if not partitions.enabled():
            self.stdout.write("not PostgreSQL: tables are not partitioned, nothing to do")
            return
        created = partitions.ensure_partitions(
            months_ahead=options["months_ahead"],  # type: ignore[arg-type]
            since=options["since"],  # type: ignore[arg-type]
        )
        for name in created:
            self.stdout.write(f"created {name}")
        self.stdout.write(f"{len(created)} partition(s) created")
