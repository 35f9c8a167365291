"""Writes of stored responses: the batched insert, deletion and the retention purge."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from gateway import nul_escape
from gateway.models import StoredResponse

DEFAULT_PURGE_BATCH = 1000

_COLUMNS = ("org_id", "response_id", "model_id", "response", "context", "created_at", "expires_at")


def insert_stored_responses(rows: list[dict[str, Any]]) -> None:
    """Insert a batch in one statement; a repeated (org, response id) replaces the older row.

    Response ids come from request ids, which a caller may reuse (its own x-request-id): the
    latest response is the one a continuation means. Raw SQL, not the ORM: this runs for every
    stored response and the ORM's per-row model instances cost more than the insert.
    """
    if not rows:
        return
    ops = connection.ops
    quote = ops.quote_name
    table = quote(StoredResponse._meta.db_table)
    columns = ", ".join(quote(c) for c in _COLUMNS)
    marks = ", ".join(["%s"] * len(_COLUMNS))
    updates = ", ".join(
        f"{quote(c)} = excluded.{quote(c)}"
        for c in ("model_id", "response", "context", "created_at", "expires_at")
    )
    sql = (
        f"INSERT INTO {table} ({columns}) VALUES ({marks}) "
        f"ON CONFLICT ({quote('org_id')}, {quote('response_id')}) DO UPDATE SET {updates}"
    )
    params = [
        [
            row["org_id"],
            row["response_id"],
            row["model_id"],
            # A NUL (which jsonb cannot hold) is kept, escaped: gateway/nul_escape.py.
            ops.adapt_json_value(nul_escape.encode(row["response"]), None),
            ops.adapt_json_value(nul_escape.encode(row["context"]), None),
            ops.adapt_datetimefield_value(row["created_at"]),
            ops.adapt_datetimefield_value(row["expires_at"]),
        ]
        for row in rows
    ]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.executemany(sql, params)


def delete_stored_response(*, org_id: int, response_id: str) -> bool:
    deleted, _ = StoredResponse.objects.filter(org_id=org_id, response_id=response_id).delete()
    return bool(deleted)


def purge_expired_responses(
    *, batch_size: int = DEFAULT_PURGE_BATCH, max_batches: int = 100, now: datetime | None = None
) -> int:
    """Delete expired responses in batches (short transactions; beat's next run continues).
    Idempotent: a second run finds nothing left to delete."""
    cutoff = now or timezone.now()
    total = 0
    for _ in range(max_batches):
        ids = list(
            StoredResponse.objects.filter(expires_at__lte=cutoff).values_list("id", flat=True)[
                :batch_size
            ]
        )
        if not ids:
            break
        deleted, _ = StoredResponse.objects.filter(id__in=ids).delete()
        total += deleted
    return total
