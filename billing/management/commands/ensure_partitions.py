from __future__ import annotations

from datetime import UTC, datetime

from django.core.management.base import BaseCommand, CommandError, CommandParser

from billing import partitions


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
        parser.add_argument("--months-ahead", type=int, default=None)
        parser.add_argument("--since", type=_month, default=None, help="first month, YYYY-MM")

    def handle(self, *args: object, **options: object) -> None:
        if not partitions.enabled():
            self.stdout.write("not PostgreSQL: tables are not partitioned, nothing to do")
            return
        months_ahead = options["months_ahead"]
        if months_ahead is not None and int(str(months_ahead)) < 0:
            raise CommandError("--months-ahead must be 0 or more")
        created = partitions.ensure_partitions(
            months_ahead=None if months_ahead is None else int(str(months_ahead)),
            since=options["since"],  # type: ignore[arg-type]
        )
        for name in created:
            self.stdout.write(f"created {name}")
        self.stdout.write(f"{len(created)} partition(s) created")
