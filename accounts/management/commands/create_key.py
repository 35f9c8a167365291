from __future__ import annotations

from collections.abc import Callable

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.services import AccountsError, create_api_key
from ezat.cli import get_org, parse_usd


def _positive(option: str) -> Callable[[str], int]:
    """An argparse type: a positive integer, or a CommandError naming the option."""

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError as exc:
            raise CommandError(f"{option}: {value!r} is not an integer") from exc
        if number < 1:
            raise CommandError(f"{option} must be at least 1")
        return number

    return parse


_rpm = _positive("--rpm")


class Command(BaseCommand):
    help = "Create an API key; the secret is printed once, as the last line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("org_name")
        parser.add_argument("--name", default="")
        parser.add_argument("--rpm", type=_rpm)
        parser.add_argument(
            "--max-concurrency",
            type=_positive("--max-concurrency"),
            help="requests in flight at once (default: EZAT_DEFAULT_KEY_CONCURRENCY)",
        )
        parser.add_argument("--spend-cap-usd")

    def handle(self, *args: object, **options: object) -> None:
        org = get_org(str(options["org_name"]))
        cap = options["spend_cap_usd"]
        cap_nano = (
            parse_usd(str(cap), what="--spend-cap-usd", allow_zero=True)
            if cap is not None
            else None
        )
        try:
            new = create_api_key(
                org=org,
                name=str(options["name"]),
                rpm_limit=options["rpm"],  # type: ignore[arg-type]
                max_concurrency=options["max_concurrency"],  # type: ignore[arg-type]
                spend_cap_nano=cap_nano,
            )
        except AccountsError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"key {new.key.prefix}… created for {org.name}; store it now:")
        self.stdout.write(new.secret)
