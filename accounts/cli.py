"""The operator commands' one look-up of an organization by name (a clear error, not a traceback).

Here rather than in `core/cli.py`: ezat's shared helpers sit below every app and import none.
"""

from __future__ import annotations

from django.core.management.base import CommandError

from accounts.models import Organization


def get_org(name: str) -> Organization:
    try:
        return Organization.objects.get(name__iexact=name)  # unique ignoring case
    except Organization.DoesNotExist as exc:
        raise CommandError(f"unknown organization {name!r}") from exc
