"""Garbage-collector tuning of serving processes (gateway/runtime.py)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from gateway.runtime import tune_garbage_collector


@pytest.fixture
def restore_gc() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def test_startup_objects_are_frozen_and_young_collections_rarer(settings, restore_gc) -> None:
    settings.EZAT_GC_GEN0_THRESHOLD = 20_000
    gen2 = gc.get_threshold()[2]
    tune_garbage_collector()
    assert gc.get_freeze_count() > 10_000  # Django and the apps, at least
    assert gc.get_threshold() == (20_000, 50, gen2)


def test_zero_keeps_cpython_defaults(settings, restore_gc) -> None:
    settings.EZAT_GC_GEN0_THRESHOLD = 0
    before = gc.get_threshold()
    tune_garbage_collector()
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == before


async def test_lifespan_startup_tunes_the_collector(settings, restore_gc) -> None:
    from gateway.app import GatewayApp

    settings.EZAT_GC_GEN0_THRESHOLD = 12_345
    messages = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    sent: list[dict] = []

    async def receive() -> dict:
        return messages.pop(0)

    async def send(message: dict) -> None:
        sent.append(message)

    await GatewayApp().lifespan({"type": "lifespan"}, receive, send)
    assert [m["type"] for m in sent] == [
        "lifespan.startup.complete",
        "lifespan.shutdown.complete",
    ]
    assert gc.get_threshold()[0] == 12_345
