"""Issue 22: less PostgreSQL work per usage record and request-log row (docs/scaling.md §6).

1. The request-id key table (billing/partitions.py) is kept by statement-level triggers with
   transition tables instead of row triggers (PostgreSQL only). One plpgsql call and one
   `INSERT … SELECT` per statement claims every inserted request id, so the gateway's batch (one
   multi-row INSERT, billing/pg_async.py) costs one trigger call, not one per row. Same rules:
   - INSERT claims the ids: a duplicate, in the table or within the statement, fails the
     statement with a unique violation on the key table's primary key, as before;
   - DELETE frees them;
   - UPDATE moves the ids that changed (old ids not in the new rows are freed first, then new
     ids not in the old rows claimed, so swaps work and a collision fails). A row moved to
     another partition by an UPDATE of `created_at` is in the UPDATE's transition tables (not a
     DELETE + INSERT at statement level), so its id stays claimed;
   - TRUNCATE empties the key table (unchanged).
   PostgreSQL allows transition tables on a partitioned table's statement-level triggers only
   (not row triggers), and an UPDATE trigger with them cannot name columns: it fires on every
   UPDATE (the reconciler's), comparing the ids of the rows it touched (two hashed set
   differences of the rows updated).
2. Indexes no query uses, dropped (both databases; the model state says so too):
   - `billing_usagerecord.org_id` and `billing_requestlog.org_id` (the foreign keys' own
     indexes): every query that filters on the org is served by `usage_org_created` /
     `reqlog_org_created`, whose first column is the org;
   - `billing_usagerecord.model_id` and its `_like` twin: the model is filtered only within
     an org and a time window (dashboards, API), as `iexact`, or OR'd with `model_name`, which
     no index serves;
   - on PostgreSQL, the plain `billing_usagerecord(request_id)` index 0007 kept: uniqueness is
     the key table's, and equality, `IN` and prefix lookups use the `varchar_pattern_ops`
     index `…_request_id_21a19607_like` (its operator family has `=`).
   tests/billing/test_row_writes.py shows each query's plan keeps an index.

Reversible: backwards restores the row triggers and recreates the indexes.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations, models

USAGE = "billing_usagerecord"
LOG = "billing_requestlog"
KEYS = "billing_usagerecord_request_key"

# (name, table, definition) of the indexes dropped; the definitions recreate them backwards.
DROPPED = (
    ("billing_usagerecord_org_id_038fdab7", USAGE, "(org_id)"),
    ("billing_usagerecord_model_id_c31432a7", USAGE, "(model_id)"),
    ("billing_requestlog_org_id_ce961611", LOG, "(org_id)"),
)
DROPPED_POSTGRES = (
    ("billing_usagerecord_model_id_c31432a7_like", USAGE, "(model_id varchar_pattern_ops)"),
    ("billing_usagerecord_request_id_key", USAGE, "(request_id)"),
)

STATEMENT_TRIGGERS = f"""
DROP TRIGGER IF EXISTS {KEYS}_claim ON {USAGE};
DROP TRIGGER IF EXISTS {KEYS}_free ON {USAGE};
DROP TRIGGER IF EXISTS {KEYS}_rename ON {USAGE};
DROP FUNCTION IF EXISTS {KEYS}_claim();
DROP FUNCTION IF EXISTS {KEYS}_free();
DROP FUNCTION IF EXISTS {KEYS}_rename();
CREATE FUNCTION {KEYS}_claim_rows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {KEYS} (request_id) SELECT request_id FROM inserted;
    RETURN NULL;
END $$;
CREATE FUNCTION {KEYS}_free_rows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM {KEYS} k USING deleted d WHERE k.request_id = d.request_id;
    RETURN NULL;
END $$;
CREATE FUNCTION {KEYS}_move_rows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM {KEYS} k USING
        (SELECT request_id FROM old_rows EXCEPT SELECT request_id FROM new_rows) gone
        WHERE k.request_id = gone.request_id;
    INSERT INTO {KEYS} (request_id)
        SELECT request_id FROM new_rows EXCEPT ALL SELECT request_id FROM old_rows;
    RETURN NULL;
END $$;
CREATE TRIGGER {KEYS}_claim_rows AFTER INSERT ON {USAGE}
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION {KEYS}_claim_rows();
CREATE TRIGGER {KEYS}_free_rows AFTER DELETE ON {USAGE}
    REFERENCING OLD TABLE AS deleted
    FOR EACH STATEMENT EXECUTE FUNCTION {KEYS}_free_rows();
CREATE TRIGGER {KEYS}_move_rows AFTER UPDATE ON {USAGE}
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {KEYS}_move_rows();
"""

# 0007's row triggers, as it created them (backwards).
ROW_TRIGGERS = f"""
DROP TRIGGER IF EXISTS {KEYS}_claim_rows ON {USAGE};
DROP TRIGGER IF EXISTS {KEYS}_free_rows ON {USAGE};
DROP TRIGGER IF EXISTS {KEYS}_move_rows ON {USAGE};
DROP FUNCTION IF EXISTS {KEYS}_claim_rows();
DROP FUNCTION IF EXISTS {KEYS}_free_rows();
DROP FUNCTION IF EXISTS {KEYS}_move_rows();
CREATE FUNCTION {KEYS}_claim() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {KEYS} (request_id) VALUES (NEW.request_id);
    RETURN NULL;
END $$;
CREATE FUNCTION {KEYS}_free() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM {KEYS} WHERE request_id = OLD.request_id;
    RETURN NULL;
END $$;
CREATE FUNCTION {KEYS}_rename() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM {KEYS} WHERE request_id = OLD.request_id;
    INSERT INTO {KEYS} (request_id) VALUES (NEW.request_id);
    RETURN NULL;
END $$;
CREATE TRIGGER {KEYS}_claim AFTER INSERT ON {USAGE}
    FOR EACH ROW EXECUTE FUNCTION {KEYS}_claim();
CREATE TRIGGER {KEYS}_free AFTER DELETE ON {USAGE}
    FOR EACH ROW EXECUTE FUNCTION {KEYS}_free();
CREATE TRIGGER {KEYS}_rename AFTER UPDATE OF request_id ON {USAGE}
    FOR EACH ROW WHEN (OLD.request_id IS DISTINCT FROM NEW.request_id)
    EXECUTE FUNCTION {KEYS}_rename();
"""


def _postgres_with_keys(schema_editor: Any) -> bool:
    if schema_editor.connection.vendor != "postgresql":
        return False
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [KEYS])
        return bool(cursor.fetchone()[0])


def _dropped(schema_editor: Any) -> tuple[tuple[str, str, str], ...]:
    postgres = schema_editor.connection.vendor == "postgresql"
    return DROPPED + (DROPPED_POSTGRES if postgres else ())


def forwards(apps: Any, schema_editor: Any) -> None:
    quote = schema_editor.quote_name
    for name, _table, _definition in _dropped(schema_editor):
        schema_editor.execute(f"DROP INDEX IF EXISTS {quote(name)}")
    if _postgres_with_keys(schema_editor):
        schema_editor.execute(STATEMENT_TRIGGERS)


def backwards(apps: Any, schema_editor: Any) -> None:
    quote = schema_editor.quote_name
    for name, table, definition in _dropped(schema_editor):
        if name == "billing_usagerecord_request_id_key" and not _postgres_with_keys(schema_editor):
            continue  # only 0007's partitioned table had it as a plain index
        schema_editor.execute(f"CREATE INDEX IF NOT EXISTS {quote(name)} ON {table} {definition}")
    if _postgres_with_keys(schema_editor):
        schema_editor.execute(ROW_TRIGGERS)


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
