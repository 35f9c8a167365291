from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from catalog.services import BUNDLED_CATALOG, CatalogDataError, load_catalog


class Command(BaseCommand):
    help = (
        "Load or update the model catalog from the bundled file (or --file PATH). Changed prices "
        "become a new price version, effective from now; requests admitted before keep the old "
        "one. --check prints what would change and writes nothing. A bad file is refused whole."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--file", type=Path, default=BUNDLED_CATALOG)
        parser.add_argument(
            "--check", action="store_true", help="print what would change; change nothing"
        )

    def handle(self, *args: object, **options: object) -> None:
        path: Path = options["file"]  # type: ignore[assignment]
        check = bool(options["check"])
        try:
            report = load_catalog(path, check=check)
        except CatalogDataError as exc:
            raise CommandError(f"{exc} (nothing was written)") from exc
        for line in report.changes:
            self.stdout.write(line)
        counts = (
            f"{report.created} created, {report.updated} updated, "
            f"{report.new_price_versions} new price version(s)"
        )
        if check:
            verdict = "no changes" if not report.changes else "nothing written (--check)"
            self.stdout.write(f"catalog check: {counts}; {verdict}")
        else:
            self.stdout.write(f"catalog loaded: {counts}")
