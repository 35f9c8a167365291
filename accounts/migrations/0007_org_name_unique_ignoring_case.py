"""Organization names are unique ignoring case (issue 33): `acme` and `Acme` were two tenants.

A database that already holds such a pair cannot take the constraint; the check before it
names every pair, so the operator renames (or merges) them and migrates again, instead of
reading an IntegrityError. Nothing is renamed here: which tenant keeps the name is a decision.
"""

from __future__ import annotations

from typing import Any

import django.db.models.functions.text
from django.db import migrations, models


def refuse_duplicates(apps: Any, schema_editor: Any) -> None:
    Organization = apps.get_model("accounts", "Organization")
    seen: dict[str, list[str]] = {}
    for name in Organization.objects.values_list("name", flat=True):
        seen.setdefault(name.lower(), []).append(name)
    clashes = [names for names in seen.values() if len(names) > 1]
    if clashes:
        listed = "; ".join(", ".join(repr(n) for n in sorted(names)) for names in clashes)
        raise RuntimeError(
            "organization names must be unique ignoring case, and these differ only in case: "
            f"{listed}. Rename all but one of each (admin or shell), then migrate again."
        )


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0006_api_key_allowed_ips"),
    ]

    operations = [
        migrations.RunPython(refuse_duplicates, migrations.RunPython.noop, elidable=True),
        migrations.AddConstraint(
            model_name="organization",
            constraint=models.UniqueConstraint(
                django.db.models.functions.text.Lower("name"),
                name="org_name_unique_ignoring_case",
                violation_error_message=(
                    "An organization with this name already exists (names are compared "
                    "ignoring case)."
                ),
            ),
        ),
    ]
