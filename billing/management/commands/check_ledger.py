from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.cli import get_org
from accounts.models import Organization
from billing.reconcile import check_invariants


class Command(BaseCommand):
    help = (
        "Check the money invariants of every organization (balance == Σ ledger; usage debits == "
        "cost of reconciled records, entry by entry). Exits non-zero on any violation."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--org", dest="org_name", default=None, help="check one organization")

    def handle(self, *args: object, **options: object) -> None:
        if options["org_name"] is not None:
            orgs = [get_org(str(options["org_name"]))]
        else:
            orgs = list(Organization.objects.order_by("pk"))
        bad_orgs = 0
        violations = 0
        for org in orgs:
            problems = check_invariants(org)
            if problems:
                bad_orgs += 1
                violations += len(problems)
                for problem in problems:
                    self.stderr.write(problem)
        if violations:
            raise CommandError(
                f"{violations} ledger violations in {bad_orgs} of {len(orgs)} organizations"
            )
        self.stdout.write(f"ok: {len(orgs)} organizations checked, no violations")
