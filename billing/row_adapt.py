"""How the batched writers turn JSON and datetime values into INSERT parameters.

Resolved once per process, not per row: `connection.ops` goes through Django's per-context
connection proxy on every access, and its PostgreSQL JSON adapter serialises with the standard
library. The rows of the hot path (usage records, request-log rows) were paying both for every
value (issue 22's profile). On PostgreSQL the columns are `jsonb`, so the text's formatting does
not matter and orjson writes it; datetimes go to psycopg as they are (what Django's PostgreSQL
adapter returns too). Elsewhere (SQLite) Django's adapters are used unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import orjson
from django.db import connection

Adapter = Callable[[Any], Any]


def _orjson_text(value: Any) -> str:
    # Non-string keys as json.dumps writes them (as strings), so nothing json accepted fails.
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()


@cache
def adapters() -> tuple[Adapter, Adapter]:
    """(JSON value → parameter, datetime → parameter) for the default database."""
    if connection.vendor == "postgresql":
        from psycopg.types.json import Jsonb

        def json_param(value: Any) -> Any:
            return Jsonb(value, dumps=_orjson_text)

        def datetime_param(value: Any) -> Any:
            return value

        return json_param, datetime_param
    ops = connection.ops

    def json_param_default(value: Any) -> Any:
        return ops.adapt_json_value(value, None)

    return json_param_default, ops.adapt_datetimefield_value


@cache
def is_postgresql() -> bool:
    return connection.vendor == "postgresql"
