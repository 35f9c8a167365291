from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from catalog.deployment_services import set_deployment_enabled
from catalog.models import Deployment


class Command(BaseCommand):
    help = "Enable or disable a deployment."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        group = parser.add_mutually_exclusive_group(required=True)
        group.add_argument("--enable", action="store_true")
        group.add_argument("--disable", action="store_true")

    def handle(self, *args: object, **options: object) -> None:
        deployment = Deployment.objects.filter(name=options["name"]).first()
        if deployment is None:
            raise CommandError(f"unknown deployment {options['name']!r}")
        set_deployment_enabled(deployment, enabled=bool(options["enable"]))
        state = "enabled" if deployment.enabled else "disabled"
        self.stdout.write(f"deployment {deployment.name} {state}")
