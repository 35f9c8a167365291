from __future__ import annotations

from django.core.management.base import BaseCommand, CommandParser

from accounts.cli import get_org
from billing.selectors import org_balance_nano, unreconciled_cost_nano, usd_string


class Command(BaseCommand):
    help = (
        "Print an organization's prepaid balance in USD. The last line is always the balance "
        "alone, as an exact plain decimal (e.g. 15.5; negative when overdrawn); -v 2 adds details "
        "above it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("org_name")

    def handle(self, *args: object, **options: object) -> None:
        org = get_org(str(options["org_name"]))
        balance = org_balance_nano(org)
        if int(str(options["verbosity"])) >= 2:
            self.stdout.write(f"organization: {org.name}")
            # The balance lags usage by up to one reconcile interval; show what is in flight.
            self.stdout.write(f"unreconciled usage: {usd_string(unreconciled_cost_nano(org))}")
        self.stdout.write(usd_string(balance))
