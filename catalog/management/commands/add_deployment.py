from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from catalog.services import CatalogDataError, upsert_deployment


def _positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError as exc:
        raise CommandError(f"{value!r} is not an integer") from exc
    if number < 1:
        raise CommandError(f"{value!r} must be at least 1")
    return number


class Command(BaseCommand):
    help = "Create or update a provider deployment. Without --model it serves every model."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--url", required=True)
        parser.add_argument("--api-key", required=True)
        parser.add_argument("--model", action="append", default=[], dest="models")
        parser.add_argument("--weight", type=_positive)
        parser.add_argument("--max-concurrency", type=_positive)
        parser.add_argument(
            "--fair-share",
            type=float,
            help="the most of max-concurrency one org may hold while another org is active "
            "there (0.01-1; 1 = no share rule; default 0.5)",
        )

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
                fair_share=options["fair_share"],  # type: ignore[arg-type]
            )
        except CatalogDataError as exc:
            raise CommandError(str(exc)) from exc
        except ValidationError as exc:
            raise CommandError(
                "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())
            ) from exc
        verb = "created" if created else "updated"
        self.stdout.write(f"deployment {deployment.name} {verb} ({deployment.base_url})")
