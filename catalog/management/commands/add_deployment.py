from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError, CommandParser

from catalog.credential_chain import missing_credentials
from catalog.deployment_services import Credentials, DeploymentInput, DeploymentInputError, upsert
from catalog.platform_config import (
    KINDS,
    OPENAI_KINDS,
    OPTIONS,
    PlatformConfigError,
    read_service_account_file,
)
from core.cli import fraction, positive_int


class Command(BaseCommand):
    help = (
        "Create or update a provider deployment. Without --model it serves every model.\n"
        "  anthropic: NAME --url U --api-key K\n"
        "  bedrock:   NAME --kind bedrock --region R [--aws-access-key-id I "
        "--aws-secret-access-key S [--aws-session-token T] | --bedrock-api-key K] [--url U]\n"
        "  vertex:    NAME --kind vertex --project P --region R "
        "[--service-account-file F] [--url U]\n"
        "  openai:    NAME --kind openai --url BASE [--api-key K] --model ID [--model ID …] "
        "[--model-ids JSON] [--max-tokens-param max_tokens] [--responses-api]\n"
        "  azure-openai: NAME --kind azure-openai --url ENDPOINT --api-key K --model ID …\n"
        "openai: BASE is the OpenAI SDK's base_url (it ends in /v1); no --api-key = no auth "
        "header (vLLM, Ollama). A model's server name is its id after the first / unless "
        "--model-ids maps it (docs/providers.md)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--kind", choices=KINDS, default="anthropic")
        parser.add_argument("--url", default="", help="base URL (Bedrock/Vertex: optional)")
        parser.add_argument(
            "--api-key",
            default="",
            help="anthropic: the x-api-key; openai: the Bearer key (optional); "
            "azure-openai: the api-key",
        )
        parser.add_argument(
            "--prompt-cache-key",
            choices=OPTIONS["prompt_cache_key"],
            help="openai kinds: derived (default) sends one made from the session when the "
            "client sent none; client forwards only the client's own",
        )
        parser.add_argument(
            "--max-tokens-param",
            choices=OPTIONS["max_tokens_param"],
            help="openai kinds: the name the server takes the output limit by "
            "(default max_completion_tokens)",
        )
        parser.add_argument(
            "--responses-api",
            action="store_true",
            default=None,
            help="openai kinds: the server has the Responses API (/responses); Responses "
            "requests are relayed to it instead of translated to Chat Completions",
        )
        parser.add_argument("--region", default="")
        parser.add_argument("--project", default="")
        parser.add_argument("--aws-access-key-id", default="")
        parser.add_argument("--aws-secret-access-key", default="")
        parser.add_argument("--aws-session-token", default="")
        parser.add_argument("--bedrock-api-key", default="")
        parser.add_argument(
            "--service-account-file", default="", help="vertex: a service-account key (JSON)"
        )
        parser.add_argument(
            "--model-ids",
            default=None,
            help="JSON object: catalog model id → platform model id, e.g. "
            '\'{"anthropic/claude-sonnet-4-6": "us.anthropic.claude-sonnet-4-6"}\'',
        )
        parser.add_argument("--model", action="append", default=[], dest="models")
        parser.add_argument("--weight", type=positive_int("--weight"))
        parser.add_argument("--max-concurrency", type=positive_int("--max-concurrency"))
        parser.add_argument(
            "--fair-share",
            type=fraction("--fair-share"),
            help="the most of max-concurrency one org may hold while another org is active "
            "there (0.01-1; 1 = no share rule; default 0.5)",
        )

    def handle(self, *args: object, **options: object) -> None:
        kind = str(options["kind"])
        api_key = str(options["api_key"] or "").strip()
        bedrock_key = str(options["bedrock_api_key"] or "").strip()
        if kind in ("anthropic", "azure-openai") and not api_key:
            raise CommandError("--api-key must not be empty")
        for flag in ("max_tokens_param", "prompt_cache_key", "responses_api"):
            if options[flag] and kind not in OPENAI_KINDS:
                name = "--" + flag.replace("_", "-")
                raise CommandError(f"{name} is for openai and azure-openai deployments")
        if kind in OPENAI_KINDS and not options["models"]:
            raise CommandError(f"--model is required for {kind} deployments (one per model)")
        if api_key and kind not in ("anthropic", *OPENAI_KINDS):
            raise CommandError(
                f"--api-key is for anthropic deployments; a {kind} deployment "
                + ("takes --bedrock-api-key" if kind == "bedrock" else "authenticates with Google")
            )
        if bedrock_key and kind != "bedrock":
            raise CommandError("--bedrock-api-key is for bedrock deployments")
        overrides = None
        if options["model_ids"] is not None:
            try:
                overrides = json.loads(str(options["model_ids"]))
            except ValueError as exc:
                raise CommandError(f"--model-ids is not JSON ({exc})") from exc
        try:
            account = ""
            if options["service_account_file"]:
                account = read_service_account_file(str(options["service_account_file"]))
        except PlatformConfigError as exc:
            raise CommandError(f"--{exc.field.replace('_', '-')}: {exc.message}") from exc
        credentials = Credentials(
            api_key=api_key or bedrock_key,
            aws_access_key_id=str(options["aws_access_key_id"]),
            aws_secret_access_key=str(options["aws_secret_access_key"]),
            aws_session_token=str(options["aws_session_token"]),
            service_account_json=account,
        )
        spec = DeploymentInput(
            name=str(options["name"]),
            kind=kind,
            base_url=str(options["url"]),
            region=str(options["region"]),
            project=str(options["project"]),
            # No credentials given on an update: the stored ones are kept.
            credentials=credentials if credentials.given() else None,
            models=tuple(options["models"]),  # type: ignore[arg-type]
            model_ids=overrides,
            options=_provider_options(options) if kind in OPENAI_KINDS else None,
            weight=options["weight"],  # type: ignore[arg-type]
            max_concurrency=options["max_concurrency"],  # type: ignore[arg-type]
            fair_share=options["fair_share"],  # type: ignore[arg-type]
        )
        try:
            deployment, created = upsert(spec)
        except DeploymentInputError as exc:
            raise CommandError(f"{_flag(exc.field, kind)}: {exc.message}") from exc
        verb = "created" if created else "updated"
        where = deployment.base_url or f"{kind} {deployment.region}"
        self.stdout.write(f"deployment {deployment.name} {verb} ({where})")
        why = missing_credentials(deployment)
        if why is not None:
            hint = (
                "give --aws-access-key-id/--aws-secret-access-key or --bedrock-api-key"
                if kind == "bedrock"
                else "give --service-account-file"
            )
            self.stderr.write(
                f"warning: deployment {deployment.name} has no credentials of its own and {why} "
                f"on this machine: its requests will fail unless the gateway's host has them "
                f"({hint})"
            )
        if not deployment.enabled:
            # An update never re-enables: an operator's --disable survives a key rotation.
            self.stdout.write(
                f"deployment {deployment.name} is disabled: it serves nothing until "
                f"`manage.py set_deployment {deployment.name} --enable`"
            )


def _provider_options(options: dict[str, object]) -> dict[str, str | bool]:
    """Deployment.options from the command line: only what was given."""
    given: dict[str, str | bool] = {
        name: str(options[name])
        for name in ("max_tokens_param", "prompt_cache_key")
        if options[name]
    }
    if options["responses_api"]:
        given["responses_api"] = True
    return given


# DeploymentInputError's field → the option that sets it.
_FLAGS = {
    "base_url": "--url",
    "models": "--model",
    "service_account_json": "--service-account-file",
    "non_field_errors": "error",
}


def _flag(field: str, kind: str) -> str:
    if field == "api_key" and kind == "bedrock":
        return "--bedrock-api-key"
    return _FLAGS.get(field) or "--" + field.replace("_", "-")
