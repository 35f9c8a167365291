"""Request-log rows go through the group-commit log too (EZAT_USAGE_COMMIT=group, issue 35 item 1):
a row handed to the writer is fsync'd in the log (a record kind of its own, sharing the usage
rows' fsyncs), stored by the log's flusher in its batches, and, after a crash before the flush,
stored by the replay: each row once, with the usage row of the same request."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest

from billing import recorder, spool, usage_log
from billing.models import RequestLog, UsageRecord
from tests.billing.factories import make_org
from tests.billing.test_recorder import usage
from tests.billing.test_request_log_writer import log_fields
from tests.billing.test_usage_log import Outage, Settled, log, segment_files, settled  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)  # the flusher writes from its own thread


@pytest.fixture
def writer(monkeypatch: pytest.MonkeyPatch) -> Any:
    made = recorder.UsageWriter()
    monkeypatch.setattr(recorder, "writer", made)
    yield made
    made.close()


@dataclass
class Scene:
    log: usage_log.UsageLog
    settled: Settled
    writer: recorder.UsageWriter
    org: Any
    outage: Outage

    async def request(self, rid: str) -> None:
        """A request's end in group mode: its usage row committed, its log row handed over."""
        await usage_log.record(usage(self.org.pk, rid), f"lim-{rid}")
        self.writer.submit_log(log_fields(self.org.pk, rid, status="ok", http_status=200))

    async def logged(self) -> None:
        """Until the log rows handed over are fsync'd (nobody awaits them)."""
        await asyncio.sleep(0)
        await self.log.file._flusher  # type: ignore[misc]


@pytest.fixture
def scene(
    log: usage_log.UsageLog,  # noqa: F811
    settled: Settled,  # noqa: F811
    writer: recorder.UsageWriter,
) -> Scene:
    return Scene(log, settled, writer, make_org(), Outage(log))


def _kinds(directory: Any) -> list[str]:
    return [
        str(r.get(spool.KIND_FIELD, "usage"))
        for path in segment_files(directory)
        for r in spool.read_records(path)[0]
    ]


def test_log_rows_are_logged_with_the_usage_rows_and_stored_by_the_flusher(scene: Scene) -> None:
    group_log, org = scene.log, scene.org

    async def scenario() -> None:
        for i in range(4):
            await scene.request(f"rl-{i}")
        await scene.logged()
        assert scene.writer.log_queue_depth == 0  # not in the writer's own (volatile) queue
        assert sorted(_kinds(group_log.file.directory)) == ["request_log"] * 4 + ["usage"] * 4
        assert group_log.unflushed == 8
        scene.outage.down = False
        await group_log.wait_flushed()

    asyncio.run(scenario())
    assert RequestLog.objects.filter(org=org).count() == 4
    assert UsageRecord.objects.filter(org=org).count() == 4
    # Only the usage rows' requests are settled; a log row carries no settlement.
    assert sorted(s["limits_id"] for s in scene.settled.settles) == [
        f"lim-rl-{i}" for i in range(4)
    ]


def test_a_crash_before_the_flush_stores_each_log_row_once_by_the_replay(scene: Scene) -> None:
    group_log, org = scene.log, scene.org
    scene.outage.down = False

    async def scenario() -> None:
        for i in range(2):
            await scene.request(f"crash-rl-{i}")
        await group_log.wait_flushed()  # stored, still in the segment
        scene.outage.down = True
        for i in range(2, 4):
            await scene.request(f"crash-rl-{i}")
        await scene.logged()

    asyncio.run(scenario())
    directory = group_log.file.directory
    assert RequestLog.objects.filter(org=org).count() == 2
    group_log.close()  # SIGKILL: the log rows of 2 and 3 are only in the segment

    result = spool.replay(directory)
    assert (result.replayed, result.request_log) == (4, 4)  # stored again: skipped, not doubled
    ids = sorted(RequestLog.objects.filter(org=org).values_list("request_id", flat=True))
    assert ids == [f"crash-rl-{i}" for i in range(4)]
    assert UsageRecord.objects.filter(org=org).count() == 4
    assert not segment_files(directory)


def test_direct_mode_keeps_log_rows_in_the_writers_queue(
    log: usage_log.UsageLog,  # noqa: F811
    writer: recorder.UsageWriter,
    settings: Any,
) -> None:
    settings.EZAT_USAGE_COMMIT = "direct"
    org = make_org()

    async def scenario() -> None:
        writer.submit_log(log_fields(org.pk, "direct-rl", status="ok", http_status=200))
        assert writer.log_queue_depth == 1
        await writer.drain_log()

    asyncio.run(scenario())
    assert log.file.appended == 0
    assert RequestLog.objects.filter(org=org).count() == 1
