"""Issue 22: less PostgreSQL work per usage record and request-log row (docs/scaling.md §6).

Indexes no query uses, dropped (both databases; the model state says so too): each was one more
index insert per row written by the gateway.
- `billing_usagerecord.org_id` and `billing_requestlog.org_id` (the foreign keys' own indexes):
  every query that filters on the org is served by `usage_org_created` / `reqlog_org_created`,
  whose first column is the org;
- `billing_usagerecord.model_id` and its `_like` twin: the model is filtered only within an org
  (dashboards, API), as `iexact`, or OR'd with `model_name`, which no index serves;
- on PostgreSQL, the plain `billing_usagerecord(request_id)` index 0007 kept: uniqueness is the
  key table's (billing/partitions.py), and equality, `IN` and prefix lookups use the
  `varchar_pattern_ops` index `…_request_id_21a19607_like` (its operator family has `=`).
tests/billing/test_row_writes.py shows those queries' plans keep an index.

Done with DROP INDEX rather than Django's AlterField: on a foreign key AlterField drops and
re-adds the constraint, which would re-validate every row of the partitioned tables.
Reversible: backwards recreates the indexes (on PostgreSQL as partitioned indexes, one per
partition, as 0007 left them).
"""

from __future__ import annotations

from typing import Any

from django.db import migrations, models

USAGE = "billing_usagerecord"
LOG = "billing_requestlog"
KEYS = "billing_usagerecord_request_key"  # exists on PostgreSQL once 0007 partitioned

# (name, table, definition) of the indexes dropped; the definitions recreate them backwards.
DROPPED = (
    ("billing_usagerecord_org_id_038fdab7", USAGE, "(org_id)"),
    ("billing_usagerecord_model_id_c31432a7", USAGE, "(model_id)"),
    ("billing_requestlog_org_id_ce961611", LOG, "(org_id)"),
)
DROPPED_POSTGRES = (
    ("billing_usagerecord_model_id_c31432a7_like", USAGE, "(model_id varchar_pattern_ops)"),
)
# A plain index only where 0007 moved the uniqueness to the key table (elsewhere it backs the
# UNIQUE constraint, which stays).
DROPPED_WITH_KEYS = (("billing_usagerecord_request_id_key", USAGE, "(request_id)"),)


def _dropped(schema_editor: Any) -> tuple[tuple[str, str, str], ...]:
    if schema_editor.connection.vendor != "postgresql":
        return DROPPED
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [KEYS])
        keys = bool(cursor.fetchone()[0])
    return DROPPED + DROPPED_POSTGRES + (DROPPED_WITH_KEYS if keys else ())


def forwards(apps: Any, schema_editor: Any) -> None:
    for name, _table, _definition in _dropped(schema_editor):
        schema_editor.execute(f"DROP INDEX IF EXISTS {schema_editor.quote_name(name)}")


def backwards(apps: Any, schema_editor: Any) -> None:
    for name, table, definition in _dropped(schema_editor):
        quoted = schema_editor.quote_name(name)
        schema_editor.execute(f"CREATE INDEX IF NOT EXISTS {quoted} ON {table} {definition}")


class Migration(migrations.Migration):
    atomic = True

    dependencies = [
        ("accounts", "0001_initial"),
        ("billing", "0007_partition_by_month"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunPython(forwards, backwards, elidable=False),
            ],
            state_operations=[
                migrations.AlterField(
                    model_name="usagerecord",
                    name="model_id",
                    field=models.CharField(max_length=128),
                ),
                migrations.AlterField(
                    model_name="usagerecord",
                    name="org",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=models.deletion.PROTECT,
                        related_name="usage_records",
                        to="accounts.organization",
                    ),
                ),
                migrations.AlterField(
                    model_name="requestlog",
                    name="org",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=models.deletion.CASCADE,
                        related_name="request_logs",
                        to="accounts.organization",
                    ),
                ),
            ],
        ),
    ]
