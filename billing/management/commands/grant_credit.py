from __future__ import annotations

from django.core.management.base import BaseCommand, CommandParser

from accounts.cli import get_org
from billing.services import grant_credit
from core import money
from core.cli import parse_usd, usd


class Command(BaseCommand):
    help = "Grant prepaid credit to an organization (a ledger credit entry)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("org_name")
        parser.add_argument("amount_usd", type=usd("amount"))
        parser.add_argument("--memo", default="")

    def handle(self, *args: object, **options: object) -> None:
        org = get_org(str(options["org_name"]))
        amount = parse_usd(str(options["amount_usd"]), what="amount")
        entry = grant_credit(
            org=org, amount_nano=amount, memo=str(options["memo"]), created_by="cli"
        )
        org.refresh_from_db()
        self.stdout.write(
            f"granted {money.usd_from_nano(entry.amount_nano)} USD to {org.name}; "
            f"balance {money.usd_from_nano(org.balance_nano)} USD"
        )
