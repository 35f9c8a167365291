"""A usage spool belongs to one database (issue 31, item 4): a gateway of another database that
shares the spool directory leaves it alone and says so, and the spool's own database then bills
every record.

The audit's case: an embedded gateway (SQLite) started from the production checkout replayed
the production gateway's spool into SQLite, which refused all 28 records (no such org); they
were moved aside as rejected and went unbilled.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from billing import spool
from billing.models import UsageRecord
from billing.spool_owner import DESCRIPTION_FILE, current_identity, identity_of
from tests.billing.factories import make_org
from tests.billing.test_spool import fields

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]

# Database B: an embedded gateway's SQLite file, migrated (its tables exist, its orgs do not).
_REPLAY_AS_B = """
import json, django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from billing import spool
result = spool.replay()
print("RESULT " + json.dumps({"replayed": result.replayed, "rejected": result.rejected,
      "foreign": result.foreign, "gauge": spool.FOREIGN_FILES._value.get()}))
"""


def _spool_as_current_database(count: int, org_id: int) -> Path:
    writer = spool.UsageSpool()  # the default folder: this process's database's

    async def scenario() -> None:
        await writer.append([fields(org_id, f"req-db-a-{i}") for i in range(count)])

    asyncio.run(scenario())
    path = writer.close()
    assert path is not None
    return path


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_another_databases_gateway_leaves_the_spool_and_its_own_database_bills_it(
    tmp_path: Path, settings: Any
) -> None:
    root = tmp_path / "spool"
    settings.EZAT_USAGE_SPOOL_DIR = str(root)
    org = make_org()
    path = _spool_as_current_database(28, org.pk)
    assert path.parent == root / current_identity().folder
    description = orjson.loads((path.parent / DESCRIPTION_FILE).read_bytes())
    assert description["digest"] == current_identity().digest
    before = _snapshot(root)

    # A gateway process configured for database B, on the same spool directory.
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "ezat.settings",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'b.sqlite3'}",
        "EZAT_USAGE_SPOOL_DIR": str(root),
        "LOG_LEVEL": "WARNING",
    }
    done = subprocess.run(
        [sys.executable, "-c", _REPLAY_AS_B],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    result = orjson.loads(line[len("RESULT ") :])
    # Nothing replayed, nothing moved aside, counted and said.
    assert result == {"replayed": 0, "rejected": 0, "foreign": 1, "gauge": 1.0}
    assert _snapshot(root) == before
    assert not list(root.rglob("rejected-*"))
    said = done.stderr + done.stdout
    assert "belong to another database" in said, said[-3000:]
    assert str(path.parent) in said and current_identity().describe() in said

    # The spool's own database replays it: every record billed, the file gone.
    mine = spool.replay()
    assert (mine.replayed, mine.rejected, mine.foreign) == (28, 0, 0)
    assert UsageRecord.objects.filter(org=org).count() == 28
    assert not path.exists()


def test_spool_files_from_before_database_folders_are_named_and_left_alone(
    tmp_path: Path, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "spool"
    settings.EZAT_USAGE_SPOOL_DIR = str(root)
    org = make_org()
    root.mkdir()
    legacy = root / f"{spool.PREFIX}old-host-1-abc{spool.SUFFIX}"
    legacy.write_bytes(spool.encode(fields(org.pk, "req-legacy")))
    result = spool.replay()

    assert (result.replayed, result.foreign) == (0, 1)
    assert spool.FOREIGN_FILES._value.get() == 1
    assert legacy.exists() and not UsageRecord.objects.filter(org=org).exists()
    assert "their database is unknown" in caplog.text
    # Moved into this database's folder, as the message says, it is replayed.
    own = root / current_identity().folder
    own.mkdir()
    legacy.rename(own / legacy.name)
    assert spool.replay().replayed == 1
    assert spool.FOREIGN_FILES._value.get() == 0


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        (
            {"ENGINE": "django.db.backends.postgresql", "NAME": "ezat", "HOST": "DB", "PORT": ""},
            {"ENGINE": "django.db.backends.postgresql", "NAME": "ezat", "HOST": "db", "PORT": 5432},
            True,
        ),
        (
            {"ENGINE": "django.db.backends.postgresql", "NAME": "ezat", "USER": "a"},
            {"ENGINE": "django.db.backends.postgresql", "NAME": "ezat", "USER": "b"},
            True,  # the user and password do not change which database it is
        ),
        (
            {"ENGINE": "django.db.backends.postgresql", "NAME": "ezat", "HOST": "db"},
            {"ENGINE": "django.db.backends.postgresql", "NAME": "ezat_b", "HOST": "db"},
            False,
        ),
        (
            {"ENGINE": "django.db.backends.postgresql", "NAME": "ezat", "HOST": "db"},
            {"ENGINE": "django.db.backends.sqlite3", "NAME": "ezat"},
            False,
        ),
    ],
)
def test_database_identity(a: dict[str, Any], b: dict[str, Any], same: bool) -> None:
    assert (identity_of(a).folder == identity_of(b).folder) is same
