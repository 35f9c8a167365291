from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from accounts.cli import get_org
from accounts.models import ApiKey
from accounts.services import AccountsError, create_api_key, revoke_api_key
from core.cli import parse_usd, positive_int, usd


class Command(BaseCommand):
    help = "Create an API key; the secret is printed once, as the last line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("org_name")
        parser.add_argument("--name", default="")
        parser.add_argument("--rpm", type=positive_int("--rpm"))
        parser.add_argument(
            "--max-concurrency",
            type=positive_int("--max-concurrency"),
            help="requests in flight at once (default: EZAT_DEFAULT_KEY_CONCURRENCY)",
        )
        parser.add_argument("--spend-cap-usd", type=usd("--spend-cap-usd"))
        parser.add_argument(
            "--cap-period",
            choices=list(ApiKey.CapPeriod.values),
            default=ApiKey.CapPeriod.MONTH,
            help="what --spend-cap-usd counts: a UTC month (default), a UTC day, or all time",
        )
        parser.add_argument(
            "--allow-model",
            action="append",
            default=[],
            metavar="MODEL",
            help="a model the key may call (repeat it; default: every model)",
        )
        parser.add_argument(
            "--allow-ip",
            action="append",
            default=[],
            metavar="CIDR",
            help="a network the key may be used from, e.g. 203.0.113.0/24 (repeat it; "
            "default: anywhere)",
        )
        parser.add_argument(
            "--replace",
            action="store_true",
            help="revoke the org's active keys of the same --name (re-runs do not pile keys up)",
        )

    def handle(self, *args: object, **options: object) -> None:
        org = get_org(str(options["org_name"]))
        cap = options["spend_cap_usd"]
        cap_nano = parse_usd(str(cap), what="--spend-cap-usd") if cap is not None else None
        name = str(options["name"])
        if options["replace"] and not name:
            raise CommandError("--replace needs --name (the keys it replaces)")
        try:
            with transaction.atomic():
                if options["replace"]:
                    old = ApiKey.objects.filter(org=org, name=name, revoked_at__isnull=True)
                    for key in old:
                        revoke_api_key(key=key)
                new = create_api_key(
                    org=org,
                    name=name,
                    rpm_limit=options["rpm"],  # type: ignore[arg-type]
                    max_concurrency=options["max_concurrency"],  # type: ignore[arg-type]
                    spend_cap_nano=cap_nano,
                    spend_cap_period=str(options["cap_period"]),
                    allowed_models=list(options["allow_model"]),  # type: ignore[call-overload]
                    allowed_ips=list(options["allow_ip"]),  # type: ignore[call-overload]
                )
        except AccountsError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"key {new.key.prefix}… created for {org.name}; store it now:")
        self.stdout.write(new.secret)
