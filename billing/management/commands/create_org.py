"""`create_org`: in billing, not accounts, because it may grant the new org its first credit."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from accounts.services import AccountsError, create_org, set_org_concurrency
from billing.services import grant_credit
from core.cli import parse_usd, positive_int, usd


class Command(BaseCommand):
    help = "Create an organization, optionally with prepaid credit."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--credit-usd", type=usd("--credit-usd"))
        parser.add_argument(
            "--max-concurrency",
            type=positive_int("--max-concurrency"),
            help="requests in flight across the org's keys (default: EZAT_DEFAULT_ORG_CONCURRENCY)",
        )

    def handle(self, *args: object, **options: object) -> None:
        credit = options["credit_usd"]
        amount = parse_usd(str(credit), what="--credit-usd") if credit is not None else None
        try:
            with transaction.atomic():
                org = create_org(name=str(options["name"]))
                if options["max_concurrency"] is not None:
                    set_org_concurrency(
                        org=org,
                        max_concurrency=options["max_concurrency"],  # type: ignore[arg-type]
                    )
                if amount:
                    grant_credit(
                        org=org,
                        amount_nano=amount,
                        memo="initial credit",
                        created_by="cli",
                    )
        except AccountsError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"organization {org.name} created (id {org.pk})")
