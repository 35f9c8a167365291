"""python manage.py simulator --port P|auto [--host H] [--api-key K] [--platform KIND]

Runs the same server as ``python -m simulator``; Django is only the launcher here.

    --platform bedrock --region us-east-1 --aws-access-key-id I --aws-secret-access-key S
        [--bedrock-api-key K]          verifies SigV4 with that secret (or the API key as Bearer)
    --platform vertex --project P --region R --service-account-file F
        the token endpoint trusts the key in F (written, token_uri pointing here, if missing)
"""

from __future__ import annotations

import asyncio
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.cli import port
from simulator.app import serve
from simulator.platforms import PlatformSim


class Command(BaseCommand):
    help = "Run the EZAT upstream simulator (Anthropic API, Bedrock or Vertex, scripted faults)."
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
        parser.add_argument(
            "--platform", choices=("anthropic", "bedrock", "vertex"), default="anthropic"
        )
        parser.add_argument("--region", default="")
        parser.add_argument("--project", default="ezat-sim-project")
        parser.add_argument("--aws-access-key-id", default="")
        parser.add_argument("--aws-secret-access-key", default="")
        parser.add_argument(
            "--aws-session-token", default="", help="bedrock: also require this session token"
        )
        parser.add_argument("--bedrock-api-key", default="")
        parser.add_argument("--service-account-file", default="")

    def handle(self, *args: Any, **options: Any) -> None:
        platform = options["platform"]
        sim = PlatformSim(
            platform=platform,
            region=options["region"] or ("us-east5" if platform == "vertex" else "us-east-1"),
            project=options["project"],
            aws_access_key_id=options["aws_access_key_id"],
            aws_secret_access_key=options["aws_secret_access_key"],
            aws_session_token=options["aws_session_token"],
            bedrock_api_key=options["bedrock_api_key"],
        )
        if platform == "bedrock" and not (sim.aws_access_key_id or sim.bedrock_api_key):
            raise CommandError(
                "--platform bedrock needs --aws-access-key-id and --aws-secret-access-key, "
                "or --bedrock-api-key"
            )
        if platform == "vertex" and not options["service_account_file"]:
            raise CommandError("--platform vertex needs --service-account-file")
        try:
            asyncio.run(
                serve(
                    options["host"],
                    options["port"],
                    options["api_key"],
                    sim,
                    options["service_account_file"] if platform == "vertex" else "",
                )
            )
        except KeyboardInterrupt:
            self.stdout.write("simulator stopped")
