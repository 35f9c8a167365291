from __future__ import annotations

import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from accounts.models import Membership
from accounts.services import add_member
from ezat.cli import get_org


class Command(BaseCommand):
    help = "Quickstart only: an operator (superuser) and an owner of the demo org, if missing."

    def handle(self, *args: object, **options: object) -> None:
        users = get_user_model()
        org = get_org("demo")
        if not users.objects.filter(username="admin").exists():
            password = secrets.token_urlsafe(12)
            users.objects.create_superuser("admin", "admin@example.com", password)
            self.stdout.write(f"operator console login: admin / {password}")
        if not users.objects.filter(username="demo").exists():
            password = secrets.token_urlsafe(12)
            user = users.objects.create_user("demo", "demo@example.com", password)
            add_member(org=org, user=user, role=Membership.Role.OWNER)
            self.stdout.write(f"dashboard login: demo / {password}")
