from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from catalog.services import CatalogDataError, upsert_deployment
from ezat.cli import positive_int


class Command(BaseCommand):
    help = "Create or update a provider deployment. Without --model it serves every model."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--url", required=True)
        parser.add_argument("--api-key", required=True)
        parser.add_argument("--model", action="append", default=[], dest="models")
        parser.add_argument("--weight", type=positive_int("--weight"))
        parser.add_argument("--max-concurrency", type=positive_int("--max-concurrency"))

    def handle(self, *args: object, **options: object) -> None:
        if not str(options["api_key"]).strip():
            raise CommandError("--api-key must not be empty")
        try:
            deployment, created = upsert_deployment(
                name=str(options["name"]),
                base_url=str(options["url"]),
                api_key=str(options["api_key"]),
                model_ids=options["models"],  # type: ignore[arg-type]
                weight=options["weight"],  # type: ignore[arg-type]
                max_concurrency=options["max_concurrency"],  # type: ignore[arg-type]
            )
        except CatalogDataError as exc:
            raise CommandError(str(exc)) from exc
        except ValidationError as exc:
            raise CommandError(
                "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())
            ) from exc
        verb = "created" if created else "updated"
        self.stdout.write(f"deployment {deployment.name} {verb} ({deployment.base_url})")
