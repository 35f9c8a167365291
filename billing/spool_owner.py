"""Which database a usage spool belongs to: a folder per database inside EZAT_USAGE_SPOOL_DIR.

Spooled records are bills owed to one database's orgs. Two gateways that share a spool
directory (an embedded gateway started from the production checkout, two installations on one
volume) must not replay each other's records: the wrong database refuses them (no such org),
they are moved aside as rejected, and they go unbilled (issue 31, item 4). So each process
writes into, and replays only, the folder of the database it is configured for,
`db-<digest>/`, where the digest is of the database's engine, host, port and name (never the
user or password). Spool files anywhere else in the directory are another database's: they are
left exactly where they are, counted in `ezat_usage_spool_foreign_files` and named in a warning,
until a gateway of their database replays them.

The identity is taken from the configuration, not read from the database: the spool is written
precisely when the database is unreachable. Two spellings of one database (`localhost` and
`127.0.0.1`) count as two; that errs on the safe side (the spool waits, named in the warning,
instead of being replayed into the wrong database).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

FOLDER_PREFIX = "db-"
DESCRIPTION_FILE = "database.json"
DEFAULT_PORTS = {"postgresql": "5432", "mysql": "3306"}


@dataclass(frozen=True, slots=True)
class DatabaseIdentity:
    vendor: str  # postgresql, sqlite3, ...
    host: str
    port: str
    name: str  # the database name, or a SQLite file's absolute path

    @property
    def digest(self) -> str:
        raw = orjson.dumps([self.vendor, self.host, self.port, self.name])
        return hashlib.sha256(raw).hexdigest()[:16]

    @property
    def folder(self) -> str:
        return f"{FOLDER_PREFIX}{self.digest}"

    def describe(self) -> str:
        if self.vendor.startswith("sqlite"):
            return f"{self.vendor} {self.name}"
        return f"{self.vendor} {self.name!r} at {self.host}:{self.port}"


def identity_of(settings_dict: Mapping[str, Any]) -> DatabaseIdentity:
    """The identity of a Django database configuration (`connection.settings_dict`). Pure but
    for resolving a SQLite file's path (relative paths depend on the working directory)."""
    vendor = str(settings_dict.get("ENGINE", "")).rsplit(".", 1)[-1]
    name = str(settings_dict.get("NAME") or "")
    if vendor.startswith("sqlite"):
        if name and name != ":memory:" and not name.startswith("file:"):
            name = os.path.realpath(name)
        return DatabaseIdentity(vendor, "", "", name)
    host = str(settings_dict.get("HOST") or "localhost").strip().lower()
    port = str(settings_dict.get("PORT") or DEFAULT_PORTS.get(vendor, "")).strip()
    return DatabaseIdentity(vendor, host, port, name)


def current_identity() -> DatabaseIdentity:
    from django.db import connections

    # The connection's settings, not settings.DATABASES: under test runners the database's
    # name is the test database's.
    return identity_of(connections["default"].settings_dict)


def describe_folder(folder: Path) -> str:
    """What a spool folder's description file says it belongs to (for messages)."""
    try:
        data = orjson.loads((folder / DESCRIPTION_FILE).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return "an unknown database"
    if not isinstance(data, dict):
        return "an unknown database"
    return str(data.get("database") or "an unknown database")


def write_description(folder: Path, identity: DatabaseIdentity) -> None:
    """Name the folder's database for operators (written once, when the folder is made)."""
    path = folder / DESCRIPTION_FILE
    if path.exists():
        return
    tmp = folder / f".{DESCRIPTION_FILE}.{os.getpid()}"
    tmp.write_bytes(
        orjson.dumps({"database": identity.describe(), "digest": identity.digest}) + b"\n"
    )
    os.replace(tmp, path)
