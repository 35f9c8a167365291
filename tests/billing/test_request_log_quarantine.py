"""Issue 31 item 2: one request-log row the database refuses costs no other row.

The writer's batch INSERT used to fail whole: org B's one row with a label too long for its
column (or a NUL byte, which PostgreSQL text cannot hold) took org A's twenty rows with it. Now
NUL is replaced before the INSERT (those rows are stored), and a row the database still refuses
is quarantined alone: logged, counted, appended to a JSON-lines file that
`replay_request_log_quarantine` inserts once the cause is fixed.

Runs on either database; production shape (DATABASE_URL=postgres://…) is the case that
matters, where the column lengths and NUL are enforced.
"""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

import orjson
import pytest
from django.core.management import call_command
from django.db import connection
from prometheus_client import REGISTRY

from accounts.models import Organization
from billing import recorder, request_log_quarantine
from billing.models import RequestLog
from tests.billing.factories import make_org
from tests.billing.test_request_log_writer import log_fields

pytestmark = pytest.mark.django_db(transaction=True)  # rows are written by the writer's connection

GONE_ORG = 987_654_321  # an org deleted between its request and the write: a foreign key refusal


@pytest.fixture(autouse=True)
def quarantine_dir(settings, tmp_path: Path) -> Path:  # type: ignore[no-untyped-def]
    settings.EZAT_REQUEST_LOG_QUARANTINE_DIR = str(tmp_path / "quarantine")
    return tmp_path / "quarantine"


def _quarantined(label: str) -> float:
    value = REGISTRY.get_sample_value("ezat_request_log_quarantined_total", {"reason": label})
    return value or 0.0


def _lines(folder: Path) -> list[dict[str, Any]]:
    path = folder / request_log_quarantine.FILE_NAME
    if not path.exists():
        return []
    return [orjson.loads(raw) for raw in path.read_bytes().splitlines()]


def _write(batch: list[dict[str, Any]]) -> None:
    writer = recorder.UsageWriter()
    try:
        asyncio.run(writer._write_log_batch(batch))
    finally:
        writer.close()


def _ids(org_id: int) -> list[str]:
    return sorted(RequestLog.objects.filter(org_id=org_id).values_list("request_id", flat=True))


def test_one_refused_row_costs_no_other_row_of_its_batch(quarantine_dir: Path) -> None:
    org_a, org_b = make_org(), make_org()
    rows_a = [log_fields(org_a.pk, f"a-{i}") for i in range(20)]
    nul = log_fields(
        org_b.pk,
        "b-nul",
        model_name="son\x00net",
        error_message="bad byte \x00 here",
        attempts=[{"deployment": "d\x00", "error": "x\x00y"}],
    )
    gone = log_fields(GONE_ORG, "b-gone")
    # The label of the audit, now within its column; and one that is not (PostgreSQL refuses).
    label = log_fields(org_b.pk, "b-label", api="responses_input_tokens")
    too_long = log_fields(org_b.pk, "b-too-long", api="x" * 40)
    batch = [*rows_a[:10], gone, nul, *rows_a[10:], label, too_long]
    before = _quarantined("IntegrityError")

    _write(batch)

    assert _ids(org_a.pk) == sorted(f"a-{i}" for i in range(20))  # every row of org A
    postgresql = connection.vendor == "postgresql"
    expected_b = ["b-label", "b-nul"] + ([] if postgresql else ["b-too-long"])
    assert _ids(org_b.pk) == sorted(expected_b)
    stored = RequestLog.objects.get(request_id="b-nul")
    assert stored.model_name == "son\ufffdnet" and stored.error_message == "bad byte \ufffd here"
    assert stored.attempts == [{"deployment": "d\ufffd", "error": "x\ufffdy"}]
    lines = _lines(quarantine_dir)
    assert sorted(line["row"]["request_id"] for line in lines) == (
        ["b-gone", "b-too-long"] if postgresql else ["b-gone"]
    )
    assert _quarantined("IntegrityError") + _quarantined("ForeignKeyViolation") > before
    if postgresql:
        assert _quarantined("StringDataRightTruncation") >= 1
    gone_line = next(line for line in lines if line["row"]["request_id"] == "b-gone")
    assert gone_line["row"]["org_id"] == GONE_ORG and gone_line["error"]


def test_a_batch_written_again_after_a_quarantine_stores_nothing_twice(
    quarantine_dir: Path,
) -> None:
    org = make_org()
    batch = [log_fields(org.pk, f"r-{i}") for i in range(6)]
    batch.insert(3, log_fields(GONE_ORG, "gone"))
    _write(batch)
    _write(batch)
    assert _ids(org.pk) == sorted(f"r-{i}" for i in range(6))
    assert [line["row"]["request_id"] for line in _lines(quarantine_dir)] == ["gone", "gone"]


def test_the_replay_stores_quarantined_rows_once_their_cause_is_fixed(
    quarantine_dir: Path,
) -> None:
    org = make_org()
    _write([log_fields(org.pk, "fine"), log_fields(GONE_ORG, "gone-1")])
    _write([log_fields(GONE_ORG, "gone-2")])
    assert len(_lines(quarantine_dir)) == 2

    out = io.StringIO()
    call_command("replay_request_log_quarantine", stdout=out)  # the cause is still there
    assert "stored 0" in out.getvalue() and "kept 2" in out.getvalue()
    assert sorted(line["row"]["request_id"] for line in _lines(quarantine_dir)) == [
        "gone-1",
        "gone-2",
    ]

    Organization.objects.create(id=GONE_ORG, name="restored")  # the operator fixes the cause
    out = io.StringIO()
    call_command("replay_request_log_quarantine", stdout=out)
    assert "stored 2" in out.getvalue()
    assert _ids(GONE_ORG) == ["gone-1", "gone-2"]
    assert _lines(quarantine_dir) == []
    assert list(quarantine_dir.glob("*.jsonl")) == []
    stored = RequestLog.objects.get(request_id="gone-1")
    original = log_fields(GONE_ORG)
    assert stored.started_at.tzinfo is not None and stored.api == original["api"]

    call_command("replay_request_log_quarantine", stdout=io.StringIO())  # nothing left: a no-op
    assert _ids(GONE_ORG) == ["gone-1", "gone-2"]


def test_a_writer_appends_to_a_new_file_once_a_replay_took_the_old_one(
    quarantine_dir: Path,
) -> None:
    request_log_quarantine.append([{"row": {"request_id": "one"}}])
    taken = request_log_quarantine.take()
    request_log_quarantine.append([{"row": {"request_id": "two"}}])
    assert [
        line["row"]["request_id"] for p in taken for line in request_log_quarantine.read(p)
    ] == ["one"]
    assert [line["row"]["request_id"] for line in _lines(quarantine_dir)] == ["two"]


def test_one_replay_at_a_time(quarantine_dir: Path) -> None:
    from django.core.management.base import CommandError

    with request_log_quarantine.replay_lock(), pytest.raises(CommandError, match="another replay"):
        call_command("replay_request_log_quarantine", stdout=io.StringIO())
