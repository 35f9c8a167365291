"""python manage.py simulator --port P|auto [--host H] [--api-key K]

Runs the same server as ``python -m gateway.simulator``; Django is only the launcher here.
"""

from __future__ import annotations

import asyncio
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from ezat.cli import port
from gateway.simulator.app import serve


class Command(BaseCommand):
    help = "Run the EZAT upstream simulator (Anthropic Messages API with scripted faults)."
    # The simulator uses no models or database; skip checks so it starts instantly.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument(
            "--port", type=port("--port"), default=8787, help="1-65535, or auto for a free port"
        )
        parser.add_argument(
            "--api-key", default=None, help="require this key (x-api-key or Bearer)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            asyncio.run(serve(options["host"], options["port"], options["api_key"]))
        except KeyboardInterrupt:
            self.stdout.write("simulator stopped")
