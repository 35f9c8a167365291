"""Issue 16: request-log retention (batches, usage and ledger untouched), audit lines with the
actor, and the JSON log format (ISO-8601 ms Z, no traceback for an expected 4xx)."""

from __future__ import annotations

import json
import logging
import re
from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.models import ApiKey, Organization
from billing.models import LedgerEntry, RequestLog, UsageRecord
from billing.request_log import purge_expired
from billing.services import grant_credit
from core.logging import ClientErrorsWithoutTraceback, JsonFormatter
from tests.api.conftest import make_usage

pytestmark = pytest.mark.django_db


def test_retention_deletes_old_rows_in_batches_and_never_usage(
    org_a: Organization, key_a: ApiKey, settings
) -> None:
    settings.EZAT_REQUEST_LOG_RETENTION_DAYS = 30
    old = timezone.now() - timedelta(days=31)
    for n in range(7):
        make_usage(org_a, key_a, created_at=old, request_id=f"req_old_{n}")
    make_usage(org_a, key_a, request_id="req_new")
    grant_credit(org=org_a, amount_nano=1000, memo="x")
    assert purge_expired(batch_size=3) == 7
    assert list(RequestLog.objects.values_list("request_id", flat=True)) == ["req_new"]
    assert UsageRecord.objects.count() == 8 and LedgerEntry.objects.count() == 1
    assert purge_expired(batch_size=3) == 0  # idempotent


def _audit_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "ezat.audit"]


def test_audit_lines_name_the_actor(
    org_a: Organization, as_owner_a: APIClient, owner_a, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ezat.audit")
    created = as_owner_a.post(f"/api/v1/orgs/{org_a.pk}/keys", {"name": "k"}, format="json")
    key_id = created.json()["id"]
    as_owner_a.patch(f"/api/v1/orgs/{org_a.pk}/keys/{key_id}", {"rpm_limit": 5}, format="json")
    as_owner_a.post(f"/api/v1/orgs/{org_a.pk}/keys/{key_id}/revoke")
    grant_credit(org=org_a, amount_nano=5, memo="cli grant")  # outside a request: the CLI
    lines = _audit_lines(caplog)
    actions = [r.audit for r in lines]  # type: ignore[attr-defined]
    assert actions[:3] == ["api_key.create", "api_key.update", "api_key.revoke"], actions
    assert all(r.actor == f"web:{owner_a.get_username()}" for r in lines[:3])  # type: ignore[attr-defined]
    assert lines[-1].audit == "credit.grant" and lines[-1].actor.startswith("cli:")  # type: ignore[attr-defined]


def test_json_lines_have_ms_z_timestamps_and_4xx_has_no_traceback() -> None:
    record = logging.LogRecord("django.request", logging.WARNING, "", 0, "Forbidden", (), None)
    try:
        raise PermissionError("expected")
    except PermissionError:
        import sys

        record.exc_info = sys.exc_info()
    record.status_code = 403
    assert ClientErrorsWithoutTraceback().filter(record)
    line = json.loads(JsonFormatter().format(record))
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", line["ts"])
    assert "exc" not in line and line["status_code"] == 403
    bug = logging.LogRecord("django.request", logging.ERROR, "", 0, "boom", (), None)
    try:
        raise RuntimeError("bug")
    except RuntimeError:
        import sys

        bug.exc_info = sys.exc_info()
    bug.status_code = 500
    ClientErrorsWithoutTraceback().filter(bug)
    assert "RuntimeError" in json.loads(JsonFormatter().format(bug))["exc"]
