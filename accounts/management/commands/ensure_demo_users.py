"""Quickstart only: the demo logins, and a credentials file that `make run` prints every run.

The passwords are stored hashed, so a login can be shown again only from the credentials file
(var/demo-credentials.txt, mode 600, never committed). A user whose login is not in the file (a
first run, or the file was deleted) gets a new password, written there.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser

from accounts.cli import get_org
from accounts.models import Membership
from accounts.services import add_member

LABELS = {"admin": "operator console login", "demo": "dashboard login"}
KEY_LABEL = "API key"


def _read(path: Path) -> dict[str, str]:
    entries: dict[str, str] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            label, sep, value = line.partition(": ")
            if sep and not line.startswith("#"):
                entries[label.strip()] = value.strip()
    return entries


def _write(path: Path, entries: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "# EZAT Router quickstart credentials (written by `make run`; keep private)\n" + "".join(
        f"{label}: {value}\n" for label, value in entries.items()
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.chmod(path, 0o600)  # an existing file keeps its mode through O_CREAT


class Command(BaseCommand):
    help = "Quickstart only: an operator (superuser) and an owner of the demo org, if missing."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--credentials",
            type=Path,
            default=None,
            help="keep the logins (and --api-key) in this file, mode 600",
        )
        parser.add_argument("--api-key", default=None, help="the quickstart key, for the file")

    def handle(self, *args: object, **options: object) -> None:
        users = get_user_model()
        org = get_org("demo")
        path = options["credentials"]
        entries = _read(path) if isinstance(path, Path) else {}
        for username, label in LABELS.items():
            user = users.objects.filter(username=username).first()
            if user is not None and label in entries:
                continue
            password = secrets.token_urlsafe(12)
            if user is None:
                if username == "admin":
                    users.objects.create_superuser("admin", "admin@example.com", password)
                else:
                    user = users.objects.create_user("demo", "demo@example.com", password)
                    add_member(org=org, user=user, role=Membership.Role.OWNER)
            elif isinstance(path, Path):  # its password is not on file: a new one is
                user.set_password(password)
                user.save(update_fields=["password"])
            else:
                continue
            entries[label] = f"{username} / {password}"
            if not isinstance(path, Path):
                self.stdout.write(f"{label}: {username} / {password}")
        if isinstance(path, Path):
            if options["api_key"]:
                entries[KEY_LABEL] = str(options["api_key"])
            _write(path, entries)
