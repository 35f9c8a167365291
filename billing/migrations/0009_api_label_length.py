"""Issue 31: the `api` label columns hold 32 characters (they held 16, and the label
`responses_input_tokens` is 22, so PostgreSQL refused those request-log rows).

PostgreSQL: widening a varchar changes only the catalog (no table rewrite, no long lock), and on
a partitioned table it reaches every partition. SQLite does not enforce a varchar's length, so
there only the model state changes: Django's AlterField would rebuild (copy) both tables for
nothing.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations, models

TABLES = ("billing_requestlog", "billing_usagerecord")


def _resize(length: int) -> Any:
    def run(apps: Any, schema_editor: Any) -> None:
        if schema_editor.connection.vendor != "postgresql":
            return
        for table in TABLES:
            schema_editor.execute(f"ALTER TABLE {table} ALTER COLUMN api TYPE varchar({length})")

    return run


class Migration(migrations.Migration):
    dependencies = [("billing", "0008_drop_unused_indexes")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(_resize(32), _resize(16))],
            state_operations=[
                migrations.AlterField(
                    model_name="requestlog", name="api", field=models.CharField(max_length=32)
                ),
                migrations.AlterField(
                    model_name="usagerecord", name="api", field=models.CharField(max_length=32)
                ),
            ],
        )
    ]
