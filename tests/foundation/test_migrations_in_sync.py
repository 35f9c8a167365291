"""The models and their migrations agree: a model change without its migration fails here, not
on an operator's `migrate` (it slipped through once, a help text edited after the migration)."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command


@pytest.mark.django_db
def test_no_model_change_lacks_a_migration() -> None:
    out = io.StringIO()
    try:
        call_command("makemigrations", "--check", "--dry-run", stdout=out, stderr=out)
    except SystemExit as exit_:  # --check exits 1 when a migration is missing
        pytest.fail(f"makemigrations --check exited {exit_.code}:\n{out.getvalue()}")
