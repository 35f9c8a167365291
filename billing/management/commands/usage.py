from __future__ import annotations

import json
from datetime import UTC, date, datetime, time, timedelta

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.cli import get_org
from billing.selectors import usage_summary, usd_string

DATE_HELP = "YYYY-MM-DD (midnight UTC) or an ISO 8601 date-time (UTC when it has no offset)"


def parse_when(value: str, *, option: str, end_of_day: bool) -> datetime:
    """An aware datetime from a date or ISO date-time; CommandError naming the option if bad.

    A bare date given to --until means the end of that day, so `--since D --until D` is day D.
    """
    text = value.strip()
    try:
        if len(text) == 10:  # a bare date, YYYY-MM-DD
            day = date.fromisoformat(text)
            start = datetime.combine(day, time.min, tzinfo=UTC)
            return start + timedelta(days=1) if end_of_day else start
        when = datetime.fromisoformat(text)
    except ValueError as exc:
        raise CommandError(f"{option}: {value!r} is not a date ({DATE_HELP})") from exc
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


class Command(BaseCommand):
    help = (
        "An organization's usage totals, by record time: --since inclusive, --until exclusive "
        "(a bare --until date includes that whole day). Costs are USD as exact plain decimals "
        "(at most 9 decimals)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("org_name")
        parser.add_argument("--since", default=None, help=DATE_HELP)
        parser.add_argument("--until", default=None, help=DATE_HELP)
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args: object, **options: object) -> None:
        org = get_org(str(options["org_name"]))
        since = until = None
        if options["since"] is not None:
            since = parse_when(str(options["since"]), option="--since", end_of_day=False)
        if options["until"] is not None:
            until = parse_when(str(options["until"]), option="--until", end_of_day=True)
        if since is not None and until is not None and since >= until:
            raise CommandError("--since must be before --until")
        summary = usage_summary(org, since=since, until=until)
        report: dict[str, int | str] = {
            name: value for name, value in summary.items() if name != "cost_nano"
        }
        # A string: JSON numbers are floats to most readers, and money must stay exact.
        report["cost_usd"] = usd_string(summary["cost_nano"])
        if options["json"]:
            self.stdout.write(json.dumps(report))
            return
        self.stdout.write(f"organization: {org.name}")
        for name, value in report.items():
            self.stdout.write(f"{name}: {value}")
