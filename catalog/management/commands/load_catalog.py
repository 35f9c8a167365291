from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from catalog.services import BUNDLED_CATALOG, CatalogDataError, load_catalog


class Command(BaseCommand):
    help = "Load or update the bundled model catalog (idempotent)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--file", type=Path, default=BUNDLED_CATALOG)

    def handle(self, *args: object, **options: object) -> None:
        try:
            created, updated = load_catalog(options["file"])  # type: ignore[arg-type]
        except CatalogDataError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"catalog loaded: {created} created, {updated} updated")
