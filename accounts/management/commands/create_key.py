from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.services import AccountsError, create_api_key
from ezat.cli import get_org, parse_usd


def _rpm(value: str) -> int:
    try:
        rpm = int(value)
    except ValueError as exc:
        raise CommandError(f"--rpm: {value!r} is not an integer") from exc
    if rpm < 1:
        raise CommandError("--rpm must be at least 1")
    return rpm


class Command(BaseCommand):
    help = "Create an API key; the secret is printed once, as the last line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("org_name")
        parser.add_argument("--name", default="")
        parser.add_argument("--rpm", type=_rpm)
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
                spend_cap_nano=cap_nano,
            )
        except AccountsError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"key {new.key.prefix}… created for {org.name}; store it now:")
        self.stdout.write(new.secret)
